"""One settings object for linumpy's I/O: defaults, environment variables, a context manager.

Every tunable of the read engine, the GPU back end and the nvCOMP codec is a field of
:class:`Settings`. Values come, later ones winning, from the defaults, the ``LINUMPY_*``
environment variables, :func:`set` (process-wide, usable as a context manager, nestable) and a
``settings=`` argument of a call (a :class:`Settings` or a dict of fields).

========================  ==============================  ==========================================
field                     environment variable            default
========================  ==============================  ==========================================
``io_threads``            ``LINUMPY_IO_THREADS``          CPUs available to the process
``pinned_bytes``          ``LINUMPY_GPU_PINNED_MIB``      0: 256 MiB growing to 1024 MiB
``scratch_bytes``         ``LINUMPY_GPU_SCRATCH_MIB``     2048 MiB on the device beyond the output
``fetch``                 ``LINUMPY_GPU_FETCH``           ``auto`` (kvikio if it works, else pread)
``gpu_streams``           ``LINUMPY_GPU_STREAMS``         4 groups decoded at once
``batch_bytes``           ``LINUMPY_GPU_BATCH_MIB``       0: groups sized by scratch and streams
``gpu_cpu_share``         ``LINUMPY_GPU_CPU_SHARE``       0: nvCOMP decodes every chunk
``gpu_read_order``        ``LINUMPY_GPU_READ_ORDER``      ``auto`` (``size`` for chunks >= 1 MiB)
``gpu_chunk_bytes``       ``LINUMPY_GPU_CHUNK_MIB``       16 MiB: larger chunks decode on the CPU
``gpu_crc32c``            ``LINUMPY_GPU_CRC32C``          ``auto``: on the GPU where nvCOMP can
``gpu_encode_min_bytes``  ``LINUMPY_GPU_ENCODE_MIN_MIB``  0: 2 MiB per I/O thread, >= 16 MiB
``nvcomp_batch_size``     ``LINUMPY_NVCOMP_BATCH_SIZE``   1024 chunks per codec call in zarr
``nvcomp_concurrency``    ``LINUMPY_NVCOMP_CONCURRENCY``  32 (zarr's ``async.concurrency``)
``write_checksum``        ``LINUMPY_ZSTD_CHECKSUM``       true: written zstd frames carry checksums
``zstd_level``            ``LINUMPY_ZSTD_LEVEL``          2: the zstd level of linumpy's writers
``chunk_bytes``           ``LINUMPY_CHUNK_KIB``           1024 KiB per chunk in written layouts
``durable``               ``LINUMPY_DURABLE``             true: written images flushed to disk
``metadata_cache``        ``LINUMPY_METADATA_CACHE``      true: valid NGFF metadata remembered
``remote_timeout``        ``LINUMPY_REMOTE_TIMEOUT``      30 s without an answer fails a request
``remote_retries``        ``LINUMPY_REMOTE_RETRIES``      3 retries of a failed request, backing off
``remote_requests``       ``LINUMPY_REMOTE_REQUESTS``     64 requests in flight per read
``remote_ahead_bytes``    ``LINUMPY_REMOTE_AHEAD_MIB``    256 MiB fetched ahead per read
========================  ==============================  ==========================================

An invalid value raises :class:`~linumpy.errors.SettingsError` naming the field or the variable.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from linumpy.errors import SettingsError

__all__ = ["ENV", "Settings", "cache_dir", "get", "resolve", "set"]

KIB = 1024
MIB = 1024 * KIB
FETCH_CHOICES = ("auto", "kvikio", "pread")
READ_ORDER_CHOICES = ("auto", "file", "size")
CRC32C_CHOICES = ("auto", "device", "cpu")


def cache_dir(name: str) -> Path:
    """linumpy's cache folder ``name``: under ``$XDG_CACHE_HOME/linumpy`` (by default
    ``~/.cache/linumpy``), where what one process found is kept for the next (valid metadata,
    compiled GPU kernels). Not created here.

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


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{name} must be a positive integer, got {value!r}")
    return value


#: The zstd levels libzstd takes (its negative "fast" levels are not written by linumpy).
ZSTD_LEVELS = (1, 22)
#: The default of the ``zstd_level`` setting.
DEFAULT_ZSTD_LEVEL = 2


def _zstd_level(name: str, value: object) -> int:
    low, high = ZSTD_LEVELS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SettingsError(f"{name} must be a zstd level from {low} to {high}, got {value!r}")
    return value


def _non_negative(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SettingsError(f"{name} must be 0 or a positive integer, got {value!r}")
    return value


def _share(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise SettingsError(f"{name} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _one_of(options: tuple[str, ...]) -> Callable[[str, object], str]:
    def check(name: str, value: object) -> str:
        if value not in options:
            raise SettingsError(f"{name} must be one of {', '.join(options)}; got {value!r}")
        return str(value)

    return check


_fetch_choice = _one_of(FETCH_CHOICES)
_order_choice = _one_of(READ_ORDER_CHOICES)
_crc32c_choice = _one_of(CRC32C_CHOICES)


def _seconds(name: str, value: object) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not 0 < value < float("inf"):  # type: ignore[operator]
        raise SettingsError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"{name} must be True or False, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    """Resources and choices of linumpy's readers and writers (see the module docstring).

    Attributes
    ----------
    io_threads
        Threads reading and decoding chunk files on the CPU (and kvikio's thread pool size,
        unless ``KVIKIO_NTHREADS`` is set).
    pinned_bytes
        Page-locked host memory the GPU back end stages compressed chunks in. 0 (the default):
        256 MiB in a new process, growing to 1024 MiB as its reads stage more
        (:func:`linumpy.gpu.pinned_buffers.pinned_allowance`), since page-locking costs a
        command that reads once more than the larger staging gains it.
    scratch_bytes
        Device memory the GPU back end uses beyond the output: compressed chunks and decoded
        chunks before they are scattered (at least one chunk's worth is always allowed); less
        when the device has less free beside the output. nvCOMP's own work space comes on top
        (reported by ``last_read_report()``).
    fetch
        How the GPU back end reads files: ``"auto"``, ``"kvikio"`` or ``"pread"``.
    gpu_streams
        Groups of chunks the GPU decodes at once, each on its own CUDA stream: an nvCOMP call
        takes its frames' decode latency however few they are, so reads overlap decoding only
        through concurrent calls.
    batch_bytes
        Most decoded bytes per nvCOMP call (at least one chunk); 0 leaves it to
        ``scratch_bytes`` and ``gpu_streams``.
    gpu_cpu_share
        Fraction of a GPU read's chunks, the last ones read, that libzstd threads decode on the
        CPU once the files are read, while nvCOMP finishes the chunks before them; they are
        copied to the device and scattered there. 1 decodes every chunk with libzstd, which
        also rejects any corrupt frame (see the GPU guide).
    gpu_read_order
        The order a GPU read takes chunks in: ``"file"`` (a shard's chunks in one read),
        ``"size"`` (the best-compressed chunks first: nvCOMP decodes them slowest, and a call
        lasts as long as its slowest frame), or ``"auto"``: ``"size"`` for chunks of 1 MiB or
        more, whose frames take tens of milliseconds each, ``"file"`` for smaller ones.
    gpu_chunk_bytes
        Largest decoded chunk nvCOMP decodes; larger ones are decoded by libzstd on the CPU.
    gpu_crc32c
        Where a GPU read checks the crc32c of chunks stored with one, before nvCOMP decodes
        them: ``"device"`` (nvCOMP's batched CRC32 on the chunks copied to the GPU; a failed
        chunk never reaches the decoder), ``"cpu"`` (on the reading threads), or ``"auto"``:
        the device where nvCOMP can, else the CPU.
    gpu_encode_min_bytes
        Writes of device arrays smaller than this are encoded by libzstd threads on the CPU
        after one download: an nvCOMP write has a fixed cost per call, more than the CPU takes
        for a small block. 0 (the default) means 2 MiB per ``io_threads`` and at least 16 MiB.
    nvcomp_batch_size
        Chunks per codec call in zarr's pipeline under
        :func:`linumpy.gpu.nvcomp_zstd.gpu_zstd_config`.
    nvcomp_concurrency
        zarr's ``async.concurrency`` under ``gpu_zstd_config``: shards in flight share nvCOMP calls.
    write_checksum
        Whether zstd frames written by linumpy carry zstd's content checksum.
    zstd_level
        The zstd level (1 to 22) linumpy's writers compress at unless given one: 2, which on
        OCT volumes, mosaics and stitched float32 images compressed within 3 % of level 3 at 1.4
        to 4.6 times its speed (see the writing guide).
    chunk_bytes
        Target size of the (inner) chunks that writers choose when none are given
        (:func:`linumpy.io.layout.inner_chunks`).
    durable
        Whether a write flushes what it wrote to stable storage before it replaces the old
        version, and the folder's entry after (see the writing guide); off for scratch data.
    metadata_cache
        Whether OME-NGFF attributes that ome-zarr-models found valid are remembered on disk
        (:func:`linumpy.io.ngff_validation.validated_marker`), so later processes reading the same
        image skip importing the validator.
    remote_timeout
        Seconds a remote store (HTTP, S3, GCS) may take to connect or to send the next bytes of
        an answer before the request fails (and is retried).
    remote_retries
        Times a failed remote request (a 5xx answer, a broken connection, a timeout, an answer
        cut short) is tried again, with exponential backoff from 0.1 s; 0 never retries.
    remote_requests
        Most requests one read keeps in flight to a remote store.
    remote_ahead_bytes
        Most compressed bytes one remote read holds fetched (or being fetched) ahead of the
        groups it decodes: the memory that keeps ``remote_requests`` busy across groups.

    Examples
    --------
    >>> s = Settings(io_threads=4, fetch="pread")
    >>> s.io_threads, s.fetch
    (4, 'pread')
    >>> Settings(fetch="nvme")
    Traceback (most recent call last):
    ...
    linumpy.errors.SettingsError: fetch must be one of auto, kvikio, pread; got 'nvme'
    """

    io_threads: int = field(default_factory=available_cpus)
    pinned_bytes: int = 0
    scratch_bytes: int = 2048 * MIB
    fetch: Literal["auto", "kvikio", "pread"] = "auto"
    gpu_streams: int = 4
    batch_bytes: int = 0
    gpu_cpu_share: float = 0.0
    gpu_read_order: Literal["auto", "file", "size"] = "auto"
    gpu_chunk_bytes: int = 16 * MIB
    gpu_crc32c: Literal["auto", "device", "cpu"] = "auto"
    gpu_encode_min_bytes: int = 0
    nvcomp_batch_size: int = 1024
    nvcomp_concurrency: int = 32
    write_checksum: bool = True
    zstd_level: int = DEFAULT_ZSTD_LEVEL
    durable: bool = True
    metadata_cache: bool = True
    chunk_bytes: int = 1024 * KIB
    remote_timeout: float = 30.0
    remote_retries: int = 3
    remote_requests: int = 64
    remote_ahead_bytes: int = 256 * MIB

    def __post_init__(self) -> None:
        for f in fields(self):
            _VALIDATORS[f.name](f.name, getattr(self, f.name))

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Defaults, then the ``LINUMPY_*`` environment variables, then ``overrides``.

        Examples
        --------
        >>> import os
        >>> from unittest import mock
        >>> with mock.patch.dict(os.environ, {"LINUMPY_IO_THREADS": "3"}):
        ...     Settings.from_env().io_threads
        3
        """
        values: dict[str, Any] = {}
        for name, (variable, parse) in ENV.items():
            raw = os.environ.get(variable)
            if raw is not None:
                values[name] = parse(variable, raw)
        return cls(**(values | overrides))


def _env_int(variable: str, raw: str, scale: int = 1) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        unit = {KIB: " (KiB)", MIB: " (MiB)"}.get(scale, "")
        raise SettingsError(f"{variable} must be a positive integer{unit}, got {raw!r}")
    return value * scale


def _env_mib(variable: str, raw: str) -> int:
    return _env_int(variable, raw, MIB)


def _env_kib(variable: str, raw: str) -> int:
    return _env_int(variable, raw, KIB)


def _env_mib0(variable: str, raw: str) -> int:
    return 0 if raw.strip() == "0" else _env_int(variable, raw, MIB)


def _env_share(variable: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{variable} must be a number between 0 and 1, got {raw!r}") from None
    return _share(variable, value)


def _env_seconds(variable: str, raw: str) -> float:
    try:
        return _seconds(variable, float(raw))
    except (ValueError, SettingsError):
        raise SettingsError(
            f"{variable} must be a positive number of seconds, got {raw!r}"
        ) from None


def _env_zstd_level(variable: str, raw: str) -> int:
    try:
        return _zstd_level(variable, int(raw))
    except ValueError:
        return _zstd_level(variable, raw)  # not a number: the same message, naming the text


def _env_int0(variable: str, raw: str) -> int:
    return 0 if raw.strip() == "0" else _env_int(variable, raw)


def _env_flag(variable: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{variable} must be 1/0, true/false, yes/no or on/off, got {raw!r}")


#: Field name -> (environment variable, parser of its text).
ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "io_threads": ("LINUMPY_IO_THREADS", _env_int),
    "pinned_bytes": ("LINUMPY_GPU_PINNED_MIB", _env_mib0),
    "scratch_bytes": ("LINUMPY_GPU_SCRATCH_MIB", _env_mib),
    "fetch": ("LINUMPY_GPU_FETCH", _fetch_choice),
    "gpu_streams": ("LINUMPY_GPU_STREAMS", _env_int),
    "batch_bytes": ("LINUMPY_GPU_BATCH_MIB", _env_mib0),
    "gpu_cpu_share": ("LINUMPY_GPU_CPU_SHARE", _env_share),
    "gpu_read_order": ("LINUMPY_GPU_READ_ORDER", _order_choice),
    "gpu_chunk_bytes": ("LINUMPY_GPU_CHUNK_MIB", _env_mib),
    "gpu_crc32c": ("LINUMPY_GPU_CRC32C", _crc32c_choice),
    "gpu_encode_min_bytes": ("LINUMPY_GPU_ENCODE_MIN_MIB", _env_mib0),
    "nvcomp_batch_size": ("LINUMPY_NVCOMP_BATCH_SIZE", _env_int),
    "nvcomp_concurrency": ("LINUMPY_NVCOMP_CONCURRENCY", _env_int),
    "write_checksum": ("LINUMPY_ZSTD_CHECKSUM", _env_flag),
    "zstd_level": ("LINUMPY_ZSTD_LEVEL", _env_zstd_level),
    "durable": ("LINUMPY_DURABLE", _env_flag),
    "metadata_cache": ("LINUMPY_METADATA_CACHE", _env_flag),
    "chunk_bytes": ("LINUMPY_CHUNK_KIB", _env_kib),
    "remote_timeout": ("LINUMPY_REMOTE_TIMEOUT", _env_seconds),
    "remote_retries": ("LINUMPY_REMOTE_RETRIES", _env_int0),
    "remote_requests": ("LINUMPY_REMOTE_REQUESTS", _env_int),
    "remote_ahead_bytes": ("LINUMPY_REMOTE_AHEAD_MIB", _env_mib),
}

_VALIDATORS: dict[str, Callable[[str, Any], Any]] = {
    "io_threads": _positive,
    "pinned_bytes": _non_negative,
    "scratch_bytes": _positive,
    "fetch": _fetch_choice,
    "gpu_streams": _positive,
    "batch_bytes": _non_negative,
    "gpu_cpu_share": _share,
    "gpu_read_order": _order_choice,
    "gpu_chunk_bytes": _positive,
    "gpu_crc32c": _crc32c_choice,
    "gpu_encode_min_bytes": _non_negative,
    "nvcomp_batch_size": _positive,
    "nvcomp_concurrency": _positive,
    "write_checksum": _flag,
    "zstd_level": _zstd_level,
    "durable": _flag,
    "metadata_cache": _flag,
    "chunk_bytes": _positive,
    "remote_timeout": _seconds,
    "remote_retries": _non_negative,
    "remote_requests": _positive,
    "remote_ahead_bytes": _positive,
}

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


def resolve(settings: Settings | Mapping[str, Any] | None) -> Settings:
    """The settings of one call: ``settings`` itself, or :func:`get` updated by a dict of fields.

    Examples
    --------
    >>> resolve({"fetch": "pread"}).fetch
    'pread'
    >>> resolve(None) == get()
    True
    """
    if isinstance(settings, Settings):
        return settings
    current = get()
    if not settings:
        return current
    unknown = sorted(k for k in settings if k not in ENV)
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(ENV)}")
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
    >>> with set(fetch="pread", io_threads=2):
    ...     get().fetch, get().io_threads
    ('pread', 2)
    >>> get().fetch == Settings.from_env().fetch
    True
    """

    def __init__(self, **values: Any) -> None:
        unknown = sorted(k for k in values if k not in ENV)
        if unknown:
            raise SettingsError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(ENV)}")
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
