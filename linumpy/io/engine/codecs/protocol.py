"""What the engine asks of a compressor: the :class:`Compressor` protocol and the frame verdicts.

The verdicts of :meth:`Compressor.check_frames` say where a chunk may go: :data:`FRAME_GPU`
(nvCOMP decodes it), :data:`FRAME_CHECKSUM` (the same, with a content checksum verified after the
decode) or :data:`FRAME_NEEDS_CHECK` (:meth:`~Compressor.inspect_chunk` raises a precise error or
leaves the chunk to the CPU decoder).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from linumpy.errors import ChunkDecodeError

__all__: list[str] = []

#: Verdict: a chunk nvCOMP decodes to the chunk's size, no content checksum to verify.
FRAME_GPU = 0
#: Verdict: the same, with a stored content checksum for the GPU back end to verify.
FRAME_CHECKSUM = 1
#: Verdict: left to the compressor's ``inspect_chunk`` (and maybe its CPU decoder).
FRAME_NEEDS_CHECK = 2

BytesLike = bytes | bytearray | memoryview | np.ndarray


def decoded_chunk(
    decoded: Any, *, key: str, expected_size: int | None, out: np.ndarray | None
) -> np.ndarray:
    """A CPU decoder's bytes as uint8, checked against the chunk's size and copied into ``out``
    when given: the common end of every compressor's :meth:`Compressor.decode`.
    """
    result = np.frombuffer(decoded, dtype=np.uint8)
    if expected_size is not None and result.nbytes != expected_size:
        raise ChunkDecodeError(
            key, f"decoded to {result.nbytes} bytes, the chunk holds {expected_size}"
        )
    if out is None:
        return result
    out[...] = result
    return out


def decode_fast(
    decode_into: Callable[[Any, int, int, int], bool], data: BytesLike, target: np.ndarray
) -> bool:
    """Whether ``decode_into`` (a compressor's :meth:`Compressor.decode_into`) decoded ``data``
    into exactly ``target``, the GIL released: the fast path of every :meth:`Compressor.decode`.
    On False the caller decodes again, slowly, to say what is wrong.
    """
    source = data if isinstance(data, bytes) else np.frombuffer(data, dtype=np.uint8)
    if not len(source):
        return False
    address = source if isinstance(source, bytes) else source.ctypes.data
    return decode_into(address, len(source), target.ctypes.data, target.nbytes)


class ChunkInfo(Protocol):
    """What a compressor's ``inspect_chunk`` says of one chunk."""

    @property
    def checksum(self) -> int | None:
        """The stored content checksum, or None."""
        ...

    @property
    def verdict(self) -> int:
        """:data:`FRAME_GPU`, :data:`FRAME_CHECKSUM`, or :data:`FRAME_NEEDS_CHECK` (valid, but
        only the CPU decoder takes it)."""
        ...


class Compressor(Protocol):
    """A compressor as the engine uses it: one module per compressor implements it."""

    NAME: str
    NVCOMP: str | None
    NVCOMP_ENCODE: bool
    CHECKSUM_BYTES: int
    FAST_DECODE: bool

    def config_of(self, codec: Any) -> tuple[int, bool] | None:
        """Its level and checksum flag when ``codec`` (zarr v3 codec or zarr v2 compressor) is
        this compressor, else None."""
        ...

    def check_frames(
        self, buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, expected_size: int
    ) -> np.ndarray:
        """Verdicts (int8) of many chunks of one host buffer, at once."""
        ...

    def inspect_chunk(
        self, data: BytesLike, *, key: str, expected_size: int | None = None
    ) -> ChunkInfo:
        """Check one chunk; raise :class:`~linumpy.errors.ChunkDecodeError` naming ``key``."""
        ...

    def decode(
        self,
        data: BytesLike,
        *,
        key: str,
        out: np.ndarray | None = None,
        expected_size: int | None = None,
        checked: bool = False,
    ) -> np.ndarray:
        """Check and decode one chunk on the CPU (into ``out`` when given); ``checked``: it
        passed :meth:`check_frames` already, so its headers are not walked again."""
        ...

    def decode_into(self, src: Any, src_size: int, dst: int, dst_size: int) -> bool:
        """Decode bytes (``bytes`` or an address) into exactly ``dst_size`` bytes at ``dst``,
        the GIL released; False on any doubt (:meth:`decode` then says what is wrong)."""
        ...

    def encoder(self, level: int, checksum: bool) -> Any:
        """A numcodecs codec writing chunks of ``level`` (with content checksums when
        ``checksum``)."""
        ...

    def nvcomp_span(self, offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the bytes nvCOMP decodes lie in chunks at ``offsets`` of ``sizes``."""
        ...

    def set_checksum(self, frame: np.ndarray, checksum: int) -> None:
        """Give a chunk nvCOMP wrote (followed by :attr:`CHECKSUM_BYTES` spare bytes) the content
        checksum hashed on the device (compressors with :attr:`NVCOMP_ENCODE`)."""
        ...
