"""zarr's buffers inside :func:`~linumpy.gpu.zarr_context.gpu_zarr_context`: stored bytes stay
on the host, arrays live on the device.

Under ``zarr.config.enable_gpu()`` a store copies every chunk it reads to the device (pageable
memory, legacy default stream) and the codec copies it back to check its frames. With
:class:`HostBytes` what a store reads stays on the host until the codec uploads a whole batch
from pinned memory, and :class:`DeviceNDBuffer` arrays still make reads return cupy arrays.
Importing this module needs zarr only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.buffer import NDBuffer
from zarr.buffer import cpu, gpu
from zarr.registry import fully_qualified_name, register_buffer, register_ndbuffer

from linumpy.gpu.codec_transfers import is_on_device

if TYPE_CHECKING:
    from typing import Self

    import numpy.typing as npt
    from zarr.abc.buffer import Buffer, NDArrayLike

__all__: list[str] = []


class HostBytes(cpu.Buffer):
    """zarr's byte buffer that keeps its bytes where they were made, host or device, until
    :meth:`as_numpy_array` asks for host memory."""

    @classmethod
    def from_buffer(cls, buffer: Buffer) -> Self:
        """The same bytes, in the memory (host or device) they are in now."""
        return cls(buffer.as_array_like())

    def as_numpy_array(self) -> npt.NDArray[Any]:
        """The bytes in host memory (copied there from the device if they are on it)."""
        if is_on_device(self._data):
            import cupy

            return cupy.asnumpy(self._data)
        return np.asanyarray(self._data)

    def combine(self, others: Iterable[Buffer]) -> Self:
        """These bytes followed by ``others``: on the device if all are there, else on the host."""
        parts = [self, *others]
        arrays = [part.as_array_like() for part in parts]
        if all(is_on_device(array) for array in arrays):
            import cupy

            return self.__class__(cupy.concatenate(arrays))
        return self.__class__(np.concatenate([part.as_numpy_array() for part in parts]))


class DeviceNDBuffer(gpu.NDBuffer):
    """zarr's GPU array buffer, which leaves an array made on the host there (a shard's index, a
    chunk no GPU codec decoded) until it is written into a device one.

    zarr decodes a shard's index on the host, and a round trip through the device would be a
    copy on CUDA's legacy default stream, which waits for every nvCOMP call in flight and so
    stalls zarr's event loop. Nor is zarr's "slow copy based path" warning given for such arrays.
    """

    def __init__(self, array: NDArrayLike) -> None:
        if array.dtype == object:
            raise TypeError("zarr.buffer.gpu.NDBuffer does not support arrays with object dtype.")
        self._data = array

    @classmethod
    def from_numpy_array(cls, array_like: npt.ArrayLike) -> Self:
        """A buffer of a host array, left on the host until the device needs it."""
        return cls(np.asarray(array_like))

    def as_numpy_array(self) -> npt.NDArray[Any]:
        """The array in host memory (copied from the device if it is there)."""
        if is_on_device(self._data):
            import cupy

            return cupy.asnumpy(self._data)
        return np.asarray(self._data)

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, NDBuffer):
            value = value._data
        if is_on_device(self._data) != is_on_device(value) and not np.isscalar(value):
            import cupy

            if is_on_device(self._data):
                value = cupy.asarray(value)
            else:  # device bytes written into a host array: the array moves to the device
                self._data = cupy.asarray(self._data)
        self._data.__setitem__(key, value)


def host_bytes_config() -> dict[str, str]:
    """zarr config overrides: :class:`HostBytes` byte buffers and :class:`DeviceNDBuffer` arrays
    (registered with zarr here; again is harmless)."""
    register_buffer(HostBytes, qualname=fully_qualified_name(HostBytes))
    register_ndbuffer(DeviceNDBuffer, qualname=fully_qualified_name(DeviceNDBuffer))
    return {
        "buffer": fully_qualified_name(HostBytes),
        "ndbuffer": fully_qualified_name(DeviceNDBuffer),
    }
