"""Every exception linumpy raises on purpose.

Each class derives from :class:`LinumpyError` and, like zarr's own errors, from the builtin a
caller would otherwise catch: a :class:`DeviceMemoryError` is a :class:`MemoryError`, a
:class:`SettingsError` a :class:`ValueError`, and so on.
"""

from __future__ import annotations

__all__ = [
    "GPU_INSTALL_HINT",
    "ChunkDecodeError",
    "ClusterError",
    "ClusterLostError",
    "DeviceMemoryError",
    "DiskSpaceError",
    "GPUUnavailableError",
    "HostMemoryError",
    "InputMismatchError",
    "LinumpyError",
    "MemoryLimitError",
    "RemoteConnectionError",
    "RemoteError",
    "RemoteNotFoundError",
    "RemotePermissionError",
    "RemoteTimeoutError",
    "SeriesError",
    "SettingsError",
    "UnsupportedLayoutError",
]


#: How to get the GPU libraries: from a linumpy checkout or conda (the package index's
#: ``linumpy`` is another project), for the messages of errors about a missing GPU path.
GPU_INSTALL_HINT = (
    "install the GPU extra from the linumpy checkout (pip install -e '.[gpu-cu13]', or "
    "'.[gpu-cu12]' for CUDA 12) or create the conda environment (environment.yml)"
)


class LinumpyError(Exception):
    """Base class of every error linumpy raises on purpose.

    Examples
    --------
    >>> issubclass(SettingsError, LinumpyError)
    True
    """


class ChunkDecodeError(LinumpyError, ValueError):
    """A stored chunk could not be decoded into valid data.

    Parameters
    ----------
    key
        The chunk's store key (``"0/c/1/0/2"``), or its location inside a shard.
    reason
        Why the chunk was rejected.

    Examples
    --------
    >>> print(ChunkDecodeError("0/c/1/0/2", "not zstd data"))
    chunk '0/c/1/0/2': not zstd data
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"chunk {key!r}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.key, self.reason))


class GPUUnavailableError(LinumpyError, RuntimeError):
    """A GPU code path was requested but the GPU, its driver or a library is missing.

    Examples
    --------
    >>> issubclass(GPUUnavailableError, RuntimeError)
    True
    """


class ClusterError(LinumpyError, RuntimeError):
    """A dask cluster could not be started or reached (the message says what to change).

    Examples
    --------
    >>> ClusterError.exit_status
    2
    """

    #: Exit status of a ``linum-*`` script that ends with this error (2: fix the command).
    exit_status = 2


class ClusterLostError(ClusterError):
    """The dask scheduler, or every worker, was lost (or none joined in time); a script ends with
    exit status 1, as for other failures of the machines rather than of the command.

    Examples
    --------
    >>> ClusterLostError("lost the dask scheduler at 'tcp://127.0.0.1:8786'").exit_status
    1
    """

    exit_status = 1


class InputMismatchError(ClusterError, ValueError):
    """A dask worker sees another file than the client at an input's path, or none.

    Examples
    --------
    >>> issubclass(InputMismatchError, ClusterError), InputMismatchError.exit_status
    (True, 2)
    """


class MemoryLimitError(LinumpyError, ValueError):
    """The memory limit is smaller than the working set of the smallest block of a job.

    Parameters
    ----------
    limit
        The memory limit per worker, in bytes.
    needed
        The smallest limit that works, in bytes.
    what
        The job's name.

    Examples
    --------
    >>> print(MemoryLimitError(2**20, 24 * 2**20, "stitching"))  # doctest: +NORMALIZE_WHITESPACE
    memory limit 1.00 MiB per worker (--memory-limit) is smaller than one block of stitching:
    use at least 24.00 MiB
    """

    def __init__(self, limit: int, needed: int, what: str) -> None:
        from dask.utils import format_bytes

        self.limit, self.needed, self.what = limit, needed, what
        super().__init__(
            f"memory limit {format_bytes(limit)} per worker (--memory-limit) is smaller than one "
            f"block of {what}: use at least {format_bytes(needed)}"
        )

    def __reduce__(self) -> tuple[type, tuple[int, int, str]]:
        return (type(self), (self.limit, self.needed, self.what))


class DeviceMemoryError(LinumpyError, MemoryError):
    """A GPU read would not fit in the device's free memory (raised before allocating).

    Examples
    --------
    >>> issubclass(DeviceMemoryError, MemoryError)
    True
    """


class DiskSpaceError(LinumpyError, OSError):
    """An output would need more disk space than is free (raised before anything is written).

    Examples
    --------
    >>> issubclass(DiskSpaceError, OSError)
    True
    """


class HostMemoryError(LinumpyError, MemoryError):
    """A read would need more host memory than the machine has available (raised before).

    Examples
    --------
    >>> issubclass(HostMemoryError, MemoryError)
    True
    """


class SeriesError(LinumpyError, IndexError):
    """A TIFF series index that the file does not have (the CLI names ``--series``).

    Examples
    --------
    >>> issubclass(SeriesError, IndexError)
    True
    """


class SettingsError(LinumpyError, ValueError):
    """A setting (keyword or environment variable) has an invalid value; the message names it.

    Examples
    --------
    >>> issubclass(SettingsError, ValueError)
    True
    """


class UnsupportedLayoutError(LinumpyError, NotImplementedError):
    """The array's store or codec chain is not one the engine plans; zarr itself reads it.

    Readers catch it and fall back to zarr (the reason is logged).

    Examples
    --------
    >>> import zarr
    >>> from linumpy.io.engine.plan import plan_read
    >>> plan_read(zarr.create_array(store={}, shape=(4,), dtype="uint8"))
    Traceback (most recent call last):
    ...
    linumpy.errors.UnsupportedLayoutError: store MemoryStore is not a local directory ...
    """


class RemoteError(LinumpyError, OSError):
    """A remote store (HTTP, S3, GCS) failed to answer a request; the message names the URL.

    Parameters
    ----------
    url
        The URL of the object or image.
    reason
        What went wrong, in one line.

    Examples
    --------
    >>> print(RemoteError("https://example.org/a.zarr/zarr.json", "the server answered HTTP 500"))
    https://example.org/a.zarr/zarr.json: the server answered HTTP 500
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url, self.reason = url, reason
        super().__init__(f"{url}: {reason}")

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.url, self.reason))


class RemoteNotFoundError(RemoteError, FileNotFoundError):
    """No image or array at a URL (a missing chunk is not an error: it reads as the fill value).

    Examples
    --------
    >>> issubclass(RemoteNotFoundError, FileNotFoundError)
    True
    """


class RemotePermissionError(RemoteError, PermissionError):
    """A remote store refused access (HTTP 401 or 403), or cannot be written (HTTP servers).

    Examples
    --------
    >>> issubclass(RemotePermissionError, PermissionError)
    True
    """


class RemoteTimeoutError(RemoteError, TimeoutError):
    """A remote server sent nothing for longer than ``remote_timeout``, after every retry.

    Examples
    --------
    >>> issubclass(RemoteTimeoutError, TimeoutError)
    True
    """


class RemoteConnectionError(RemoteError, ConnectionError):
    """A remote server could not be reached, or its answers were cut short, after every retry.

    Examples
    --------
    >>> issubclass(RemoteConnectionError, ConnectionError)
    True
    """
