"""Object stores over HTTP, S3 and GCS: naming them by URL, opening them (obstore, the
``remote`` extra), and turning their failures into :class:`~linumpy.errors.RemoteError` naming
the URL.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from linumpy import settings as _settings
from linumpy.errors import (
    LinumpyError,
    RemoteConnectionError,
    RemoteError,
    RemoteNotFoundError,
    RemotePermissionError,
    RemoteTimeoutError,
)

__all__: list[str] = []

#: How to get remote support.
# "linumpy" on the package index is another project: the hint names the package itself
REMOTE_INSTALL_HINT = "install obstore (pip install obstore)"
#: Schemes of remote stores, and the obstore store each one opens.
REMOTE_SCHEMES = {"http": "HTTPStore", "https": "HTTPStore", "s3": "S3Store", "gs": "GCSStore"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: storage_options names of fsspec / s3fs, and the obstore configuration key each one sets.
_OPTION_NAMES = {
    "key": "access_key_id",
    "secret": "secret_access_key",
    "token": "session_token",
    "endpoint_url": "endpoint",
    "region_name": "region",
}


def url_scheme(source: object) -> str | None:
    """The scheme of a URL (``"http"``, ``"s3"``, ``"file"``...), None for anything else: only a
    string with an explicit ``scheme://`` is a URL."""
    if not isinstance(source, str):
        return None
    match = _SCHEME.match(source)
    return match.group(1).lower() if match else None


def is_url(source: object) -> bool:
    """Whether ``source`` is the URL of a remote store (``file://`` URLs are local paths)."""
    scheme = url_scheme(source)
    return scheme is not None and scheme != "file"


def local_path(url: str) -> Path:
    """The local path of a ``file://`` URL (percent-escapes decoded)."""
    parts = urllib.parse.urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise LinumpyError(f"{url}: file URLs name a local path (file:///path), not a host")
    return Path(urllib.parse.unquote(parts.path))


def _obstore() -> Any:
    try:
        import obstore
        import obstore.store
    except ImportError as exc:
        raise LinumpyError(
            f"reading remote data needs obstore ({exc}): {REMOTE_INSTALL_HINT}"
        ) from None
    return obstore


def _store_config(
    scheme: str, url: str, storage_options: Mapping[str, Any] | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """obstore keyword arguments of ``storage_options``, and HTTP headers to send."""
    config: dict[str, Any] = {}
    headers: dict[str, str] = {}
    for name, value in (storage_options or {}).items():
        if name in ("anon", "anonymous"):
            if value and scheme != "http" and scheme != "https":
                config["skip_signature"] = True
        elif name == "headers":
            if not isinstance(value, Mapping):
                raise LinumpyError(f"{url}: storage_options['headers'] must be a dict")
            headers.update({str(k): str(v) for k, v in value.items()})
        elif name == "client_kwargs" and isinstance(value, Mapping):  # s3fs's nesting
            nested, more = _store_config(scheme, url, value)
            config.update(nested)
            headers.update(more)
        else:
            config[_OPTION_NAMES.get(name, name)] = value
    return config, headers


def object_store(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    settings: _settings.Settings | None = None,
) -> Any:
    """An obstore store for the folder a remote URL names (its prefix)."""
    settings = settings or _settings.get()
    key = (
        url,
        repr(sorted((storage_options or {}).items())),
        settings.remote_timeout,
        settings.remote_retries,
    )
    with _stores_lock:
        store = _stores.get(key)
    if store is None:
        store = _new_object_store(url, storage_options, settings)
        with _stores_lock:
            _stores[key] = store
            while len(_stores) > 64:
                _stores.pop(next(iter(_stores)))
    return store


#: Stores opened, by URL, options and settings: each holds a client whose connections stay
#: open, so that the next read of the same image skips the connection set-up.
_stores: dict[tuple[Any, ...], Any] = {}
_stores_lock = threading.Lock()


def _new_object_store(
    url: str, storage_options: Mapping[str, Any] | None, settings: _settings.Settings
) -> Any:
    scheme = url_scheme(url)
    if scheme not in REMOTE_SCHEMES:
        known = ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
        raise LinumpyError(f"{url}: no store for this scheme; remote data are read from {known}")
    obstore = _obstore()
    config, headers = _store_config(scheme, url, storage_options)
    timeout = datetime.timedelta(seconds=settings.remote_timeout)
    client: dict[str, Any] = {
        "allow_http": True,
        "connect_timeout": timeout,
        "read_timeout": timeout,
        "pool_idle_timeout": datetime.timedelta(seconds=30),
    }
    if headers:
        client["default_headers"] = headers
    retry = {
        "max_retries": settings.remote_retries,
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=100),
            "max_backoff": datetime.timedelta(seconds=5),
            "base": 2,
        },
        # Each try may wait remote_timeout for a connection and for each read.
        "retry_timeout": timeout * 2 * (settings.remote_retries + 1),
    }
    kind = getattr(obstore.store, REMOTE_SCHEMES[scheme])
    with remote_errors(url):
        try:
            if kind.__name__ == "HTTPStore":
                if config:
                    raise LinumpyError(
                        f"{url}: storage_options {sorted(config)} do not apply to HTTP; "
                        "pass headers={...} for authentication"
                    )
                return kind(url.rstrip("/"), client_options=client, retry_config=retry)
            return kind.from_url(url, config=config, client_options=client, retry_config=retry)
        except obstore.exceptions.UnknownConfigurationKeyError as exc:
            raise LinumpyError(f"{url}: unknown storage option ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _reason(exc: BaseException) -> tuple[type[RemoteError], str]:
    """The error class and the one-line reason of an obstore (or builtin) failure."""
    text = str(exc)
    status = re.search(r"status code: (\d{3})", text)
    code = int(status.group(1)) if status else None
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError) or code == 404:
        return RemoteNotFoundError, "not found (HTTP 404)"
    if name in ("PermissionDeniedError", "UnauthenticatedError") or code in (401, 403):
        what = f"HTTP {code}" if code else name
        return RemotePermissionError, f"access denied ({what}): check the credentials"
    if "kind: Timeout" in text or "TimedOut" in text or isinstance(exc, TimeoutError):
        return RemoteTimeoutError, "no answer within remote_timeout (LINUMPY_REMOTE_TIMEOUT)"
    if "kind: Connect" in text or "dns error" in text or isinstance(exc, ConnectionError):
        refused = "Connection refused" in text
        return RemoteConnectionError, "connection refused" if refused else "cannot connect"
    if "body error" in text or "kind: Body" in text:
        return RemoteConnectionError, "the response ended before its declared length"
    if code is not None:
        return RemoteError, f"the server answered HTTP {code}"
    return RemoteError, _first_line(exc)


def is_remote_failure(exc: BaseException) -> bool:
    """Whether ``exc`` comes from obstore (a request that failed), not from linumpy or zarr."""
    return type(exc).__module__.startswith("obstore") or (
        isinstance(exc, FileNotFoundError) and "Error performing" in str(exc)
    )


@contextlib.contextmanager
def remote_errors(url: str) -> Iterator[None]:
    """Turn obstore's failures inside the block into :class:`RemoteError` naming ``url``."""
    try:
        yield
    except LinumpyError:
        raise
    except Exception as exc:
        if not is_remote_failure(exc):
            raise
        kind, reason = _reason(exc)
        raise kind(url, reason) from None


def holds_zarr(store: Any, url: str) -> bool:
    """Whether an obstore store's root holds zarr metadata (an image or an array is there)."""
    obstore = _obstore()
    with remote_errors(url):
        for key in ("zarr.json", ".zgroup", ".zarray"):
            try:
                obstore.head(store, key)
                return True
            except FileNotFoundError:
                continue
    return False


def delete_all(store: Any, url: str) -> None:
    """Delete every object under an obstore store's root (an image written in part)."""
    obstore = _obstore()
    with remote_errors(url):
        for batch in obstore.list(store, chunk_size=1000):
            paths = [meta["path"] for meta in batch]
            if paths:
                obstore.delete(store, paths)


def store_url(store: Any) -> str | None:
    """The URL of an obstore store's root (for messages), None for a kind with no URL."""
    name = type(store).__name__
    prefix = str(getattr(store, "prefix", None) or "").strip("/")
    if name == "HTTPStore":
        return str(store.url).rstrip("/")
    if name in ("S3Store", "GCSStore"):
        bucket = (store.config or {}).get("bucket")
        if not bucket:
            return None
        scheme = "s3" if name == "S3Store" else "gs"
        return f"{scheme}://{bucket}" + (f"/{prefix}" if prefix else "")
    return None
