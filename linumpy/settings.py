"""One settings object for linumpy's I/O: defaults, environment variables, a context manager.

The settings a user may need are the fields of :class:`Settings`, each declared once (its type,
default, ``LINUMPY_*`` environment variable, validation and description). Values come, later ones
winning, from the defaults, the environment variables, :func:`set` (process-wide, usable as a
context manager, nestable) and a ``settings=`` argument of a call (a :class:`Settings` or a dict
of fields). Sizes are given in KiB or MiB in the environment (``LINUMPY_GPU_SCRATCH_MIB=512``)
and in bytes as fields (``scratch_bytes=512 * 2**20``).

{table}

An invalid value raises :class:`~linumpy.errors.SettingsError` naming the field or the variable.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from linumpy.errors import SettingsError

__all__ = ["Declaration", "Settings", "cache_dir", "declarations", "get", "resolve", "set"]

KIB = 1024
MIB = 1024 * KIB
FETCH_CHOICES = ("auto", "kvikio", "pread")
#: The zstd levels libzstd takes (its negative "fast" levels are not written by linumpy).
ZSTD_LEVELS = (1, 22)
#: The default of the ``zstd_level`` setting.
DEFAULT_ZSTD_LEVEL = 2


def cache_dir(name: str) -> Path:
    """linumpy's cache folder ``name`` (not created): ``$XDG_CACHE_HOME/linumpy/name``, by
    default under ``~/.cache``, where one process keeps what the next needs (compiled kernels).

    Examples
    --------
    >>> cache_dir("kernels").parts[-2:]
    ('linumpy', 'kernels')
    """
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root, "linumpy", name)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class _Kind:
    """What values a setting takes: ``what`` (for messages), a test of a Python value, the
    conversion of its variable's text (which may raise ValueError) and the variable's unit."""

    what: str
    ok: Callable[[Any], bool]
    from_text: Callable[[str], Any]
    unit: int = 1
    convert: Callable[[Any], Any] = lambda value: value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


_COUNT = _Kind("a positive integer", lambda v: _is_int(v) and v >= 1, int)
_RETRIES = _Kind("0 or a positive integer", lambda v: _is_int(v) and v >= 0, int)
_KIB = _Kind("a positive integer", _COUNT.ok, int, KIB)
_MIB = _Kind("a positive integer", _COUNT.ok, int, MIB)
_FLAG = _Kind("True or False", lambda v: isinstance(v, bool), _parse_flag)
_LEVEL = _Kind(
    f"a zstd level from {ZSTD_LEVELS[0]} to {ZSTD_LEVELS[1]}",
    lambda v: _is_int(v) and ZSTD_LEVELS[0] <= v <= ZSTD_LEVELS[1],
    int,
)
_SECONDS = _Kind(
    "a positive number of seconds",
    lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf,
    float,
    convert=float,
)
_REQUESTS = _Kind(
    "a positive integer or auto",
    lambda v: v == "auto" or _COUNT.ok(v),
    lambda text: "auto" if text == "auto" else int(text),
)
_FETCH = _Kind(f"one of {', '.join(FETCH_CHOICES)}", FETCH_CHOICES.__contains__, str)


@dataclass(frozen=True, slots=True)
class Declaration:
    """One public setting: its field, environment variable, values, default and description.

    Examples
    --------
    >>> declarations()["zstd_level"].parse_text("12")
    12
    """

    name: str
    variable: str
    kind: _Kind
    default_text: str
    doc: str

    def parse(self, name: str, value: object) -> Any:
        """``value`` checked (and converted: seconds are floats); ``name`` is in the error."""
        if not self.kind.ok(value):
            raise SettingsError(f"{name} must be {self.kind.what}, got {value!r}")
        return self.kind.convert(value)

    def parse_text(self, text: str) -> Any:
        """The value of the environment variable's ``text``, the variable named in an error."""
        unit = {KIB: " (KiB)", MIB: " (MiB)"}.get(self.kind.unit, "")
        try:
            value = self.kind.from_text(text)
            if self.kind.unit != 1 and _is_int(value):
                value *= self.kind.unit
            return self.parse(self.variable, value)
        except (ValueError, SettingsError):
            raise SettingsError(
                f"{self.variable} must be {self.kind.what}{unit}, got {text!r}"
            ) from None


def _setting(variable: str, kind: _Kind, shown: str, doc: str, default: Any = MISSING) -> Any:
    """A field of :class:`Settings` with its declaration (``default`` callable: a factory)."""
    declared = {"declaration": (variable, kind, shown, doc)}
    if callable(default):
        return field(default_factory=default, metadata=declared)
    return field(default=default, metadata=declared)


@dataclass(frozen=True, slots=True)
class Settings:
    """Resources and choices of linumpy's readers and writers: one field per setting, in the
    table of :mod:`linumpy.settings`.

    Examples
    --------
    >>> Settings(io_threads=4, fetch="pread").fetch
    'pread'
    """

    io_threads: int = _setting(
        "LINUMPY_IO_THREADS",
        _COUNT,
        "the CPUs the process may use",
        "threads reading chunk files and decoding on the CPU; kvikio's thread count unless "
        "`KVIKIO_NTHREADS` is set",
        available_cpus,
    )
    zstd_level: int = _setting(
        "LINUMPY_ZSTD_LEVEL",
        _LEVEL,
        str(DEFAULT_ZSTD_LEVEL),
        "the zstd level (1 to 22) linumpy's writers compress at unless given one",
        DEFAULT_ZSTD_LEVEL,
    )
    chunk_bytes: int = _setting(
        "LINUMPY_CHUNK_KIB",
        _KIB,
        "1024 KiB",
        "target size of the (inner) chunks writers choose when none are given",
        1024 * KIB,
    )
    write_checksum: bool = _setting(
        "LINUMPY_ZSTD_CHECKSUM",
        _FLAG,
        "true",
        "whether zstd frames written by linumpy carry zstd's content checksum",
        True,
    )
    durable: bool = _setting(
        "LINUMPY_DURABLE",
        _FLAG,
        "true",
        "whether a write is flushed to stable storage before it replaces the old version, and "
        "the folder's entry after (see the writing guide); off for scratch data",
        True,
    )
    fetch: Literal["auto", "kvikio", "pread"] = _setting(
        "LINUMPY_GPU_FETCH",
        _FETCH,
        "`auto`",
        "how the GPU back end reads files: `auto` (kvikio when a probe read works, else "
        "`os.preadv`), `kvikio` or `pread`",
        "auto",
    )
    scratch_bytes: int = _setting(
        "LINUMPY_GPU_SCRATCH_MIB",
        _MIB,
        "2048 MiB",
        "device memory of a GPU read or write beyond its output (chunks in flight); halved "
        "until a read fits the free device memory; nvCOMP's work space comes on top",
        2048 * MIB,
    )
    remote_timeout: float = _setting(
        "LINUMPY_REMOTE_TIMEOUT",
        _SECONDS,
        "30 s",
        "seconds a remote store (HTTP, S3, GCS) may take to connect or to send the next bytes "
        "of an answer before the request fails (and is retried)",
        30.0,
    )
    remote_retries: int = _setting(
        "LINUMPY_REMOTE_RETRIES",
        _RETRIES,
        "3",
        "times a failed remote request (a 5xx answer, a broken connection, a timeout) is tried "
        "again, with exponential backoff from 0.1 s; 0 never retries",
        3,
    )
    remote_requests: int | Literal["auto"] = _setting(
        "LINUMPY_REMOTE_REQUESTS",
        _REQUESTS,
        "`auto`",
        "requests in flight at once to one remote host, all reads of the process together; "
        "`auto`: 4 to an `http(s)://` server (a small web server serves a few connections at a "
        "time, and a read opening more waits seconds for them), 64 to S3 and GCS; raise it for "
        "an object store read over `https://`",
        "auto",
    )

    def __post_init__(self) -> None:
        for name, spec in declarations().items():  # checked, and converted (seconds: floats)
            object.__setattr__(self, name, spec.parse(name, getattr(self, name)))

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Defaults, then the ``LINUMPY_*`` environment variables, then ``overrides``."""
        _warn_removed()
        values: dict[str, Any] = {}
        for name, spec in declarations().items():
            raw = os.environ.get(spec.variable)
            if raw is not None:
                values[name] = spec.parse_text(raw)
        return cls(**(values | overrides))


_DECLARATIONS = {f.name: Declaration(f.name, *f.metadata["declaration"]) for f in fields(Settings)}


def declarations() -> dict[str, Declaration]:
    """Every public setting's :class:`Declaration`, by field name, in the order of the fields.

    Examples
    --------
    >>> declarations()["durable"].variable
    'LINUMPY_DURABLE'
    """
    return dict(_DECLARATIONS)


def _rst(text: str) -> str:
    """Markdown's inline code as reStructuredText's."""
    return text.replace("`", "``")


__doc__ = __doc__.format(  # noqa: A001 - the module's table, from the declarations
    table="\n".join(
        [".. list-table::", "   :header-rows: 1", ""]
        + [
            f"   * - {a}\n     - {b}\n     - {c}\n     - {d}"
            for a, b, c, d in [("field", "environment variable", "default", "meaning")]
            + [
                (f"``{x.name}``", f"``{x.variable}``", _rst(x.default_text), _rst(x.doc))
                for x in _DECLARATIONS.values()
            ]
        ]
    )
)

#: Environment variables of settings since removed, with what replaced them.
REMOVED_VARIABLES = dict.fromkeys(
    (
        "LINUMPY_GPU_PINNED_MIB",
        "LINUMPY_GPU_STREAMS",
        "LINUMPY_GPU_BATCH_MIB",
        "LINUMPY_GPU_CPU_SHARE",
        "LINUMPY_GPU_READ_ORDER",
        "LINUMPY_GPU_CHUNK_MIB",
        "LINUMPY_GPU_CRC32C",
        "LINUMPY_GPU_ENCODE_MIN_MIB",
        "LINUMPY_NVCOMP_BATCH_SIZE",
        "LINUMPY_NVCOMP_CONCURRENCY",
        "LINUMPY_REMOTE_AHEAD_MIB",
    ),
    "a tuning knob without a measured gain, now fixed in the code",
)
REMOVED_VARIABLES["LINUMPY_METADATA_CACHE"] = (
    "valid OME-NGFF metadata is no longer recorded on disk"
)
_warned: set[str] = set()


def _warn_removed() -> None:
    """Warn once per process for each removed variable that is set (it has no effect)."""
    for variable, why in REMOVED_VARIABLES.items():
        if variable in os.environ and variable not in _warned:
            _warned.add(variable)
            warnings.warn(
                f"{variable} is no longer read ({why}); unset it", FutureWarning, stacklevel=3
            )


_lock = threading.Lock()
_overrides: list[dict[str, Any]] = []


def get() -> Settings:
    """The settings in force: defaults, environment, then every active :func:`set`.

    Examples
    --------
    >>> with set(io_threads=2):
    ...     get().io_threads
    2
    """
    with _lock:
        merged: dict[str, Any] = {}
        for layer in _overrides:
            merged |= layer
    return Settings.from_env(**merged)


def _check_names(names: Mapping[str, Any]) -> None:
    unknown = sorted(k for k in names if k not in _DECLARATIONS)
    if unknown:
        known = ", ".join(_DECLARATIONS)
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; known: {known}")


def resolve(settings: Settings | Mapping[str, Any] | None) -> Settings:
    """The settings of one call: ``settings`` itself, or :func:`get` updated by a dict of fields.

    Examples
    --------
    >>> resolve({"fetch": "pread"}).fetch
    'pread'
    """
    if isinstance(settings, Settings):
        return settings
    current = get()
    if not settings:
        return current
    _check_names(settings)
    return replace(current, **settings)


class set:  # noqa: N801 - named like kvikio's and zarr's ``defaults.set``/``config.set``
    """Override settings process-wide; as a context manager, only until the block ends.

    Overrides apply to every thread (dask's threaded scheduler included) and nest.

    Parameters
    ----------
    **values
        Fields of :class:`Settings`; validated at once.

    Examples
    --------
    >>> with set(fetch="pread"):
    ...     get().fetch
    'pread'
    """

    def __init__(self, **values: Any) -> None:
        _check_names(values)
        replace(get(), **values)  # validate before anything changes
        self._values = dict(values)
        with _lock:
            _overrides.append(self._values)

    def __enter__(self) -> set:
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            for i in range(len(_overrides) - 1, -1, -1):
                if _overrides[i] is self._values:
                    del _overrides[i]
                    break
