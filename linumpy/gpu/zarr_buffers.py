"""zarr's buffers inside :func:`~linumpy.gpu.zarr_context.gpu_zarr_context`: stored bytes stay
on the host, arrays live on the device.

``zarr.config.enable_gpu()`` makes every zarr buffer a device buffer: a store copies each chunk or
shard it reads to the device from pageable memory, on CUDA's legacy default stream (which waits
for the codec's nvCOMP calls on the other streams), and the GPU codec then copies the compressed
bytes back to the host, where it checks their frames before nvCOMP sees them. Inside
``gpu_zarr_context`` zarr's byte buffers are :class:`HostBytes` instead: what a store reads stays
in host memory until the codec uploads a whole batch at once from pinned memory, the codec hands
its decoded chunks over on the device, and zarr's arrays are :class:`DeviceNDBuffer`, so reads
still return cupy arrays (arrays made on the host, such as shard indexes, stay there). Encoded
frames come back to the host, where the store writes them.

Importing this module needs zarr only; cupy is imported when a buffer holds device memory.
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
    """zarr's byte buffer that keeps its bytes where they were made, host or device.

    Bytes a store reads are host memory (``from_bytes``), and a device array handed to it (a
    decoded chunk, a chunk about to be encoded) stays on the device: nothing is copied until
    :meth:`as_numpy_array` asks for host memory.

    Examples
    --------
    >>> import numpy as np
    >>> buffer = HostBytes.from_bytes(b"ab") + HostBytes.from_array_like(np.array([99], "B"))
    >>> buffer.to_bytes()
    b'abc'
    """

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
    """zarr's GPU array buffer, which leaves an array made on the host there.

    The arrays zarr creates (a read's output, a chunk to fill) are on the device, as with zarr's
    own GPU buffer, so reads return cupy arrays. A host array it is given (a shard's index, a
    chunk that no GPU codec decoded, a numpy array written) stays a host array until it is
    written into a device one: zarr decodes and encodes a shard's index on the host, and a round
    trip through the device there is a copy on CUDA's legacy default stream, which waits for
    every nvCOMP call in flight and so stalls zarr's event loop. Nor is zarr's "slow copy based
    path" warning given for such arrays: their copy to the device is the one copy there is.

    Examples
    --------
    >>> DeviceNDBuffer(np.arange(3)).as_ndarray_like()  # a host array stays one
    array([0, 1, 2])
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
    """zarr config overrides: :class:`HostBytes` byte buffers and :class:`DeviceNDBuffer` arrays.

    Registers both classes with zarr (again is harmless). :func:`gpu_zarr_context` applies them;
    ``zarr.config.enable_gpu()`` is the all-device alternative.

    Examples
    --------
    >>> import zarr
    >>> with zarr.config.set(host_bytes_config()):
    ...     zarr.buffer.default_buffer_prototype().buffer.__name__
    'HostBytes'
    """
    register_buffer(HostBytes, qualname=fully_qualified_name(HostBytes))
    register_ndbuffer(DeviceNDBuffer, qualname=fully_qualified_name(DeviceNDBuffer))
    return {
        "buffer": fully_qualified_name(HostBytes),
        "ndbuffer": fully_qualified_name(DeviceNDBuffer),
    }
