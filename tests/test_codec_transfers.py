"""Transfers of the GPU codec's batches: runs of pieces, host chunks uploaded a piece at a time."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack

import numpy as np
import pytest

from linumpy.gpu import codec_transfers
from linumpy.gpu.codec_transfers import layout, runs_of, stage_inputs, upload_host_chunks


def test_layout_packs_buffers_at_aligned_offsets() -> None:
    assert layout([3, 20]) == ([0, 16], 48)
    assert layout([]) == ([], 0)


def test_runs_of_keeps_order_and_limit() -> None:
    assert runs_of([], 10) == []
    assert runs_of([4, 4, 4, 4], 8) == [[0, 1], [2, 3]]
    assert runs_of([12, 1, 1], 8) == [[0], [1, 2]]  # a larger one alone
    assert runs_of([3, 3, 3], 100) == [[0, 1, 2]]


@pytest.mark.parametrize("part_bytes", [7, 4096, 2**23])
def test_copied_is_a_new_array_with_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch, part_bytes: int
) -> None:
    monkeypatch.setattr(codec_transfers, "COPY_PART_BYTES", part_bytes)
    source = np.random.default_rng(2).integers(0, 256, 100_003, dtype=np.uint8)
    out = asyncio.run(codec_transfers.copied(source))
    assert not np.shares_memory(out, source)
    np.testing.assert_array_equal(out, source)


@pytest.mark.gpu
@pytest.mark.parametrize("piece_bytes", [64, 4096, 2**26])
def test_host_and_device_chunks_land_at_their_offsets(
    monkeypatch: pytest.MonkeyPatch, piece_bytes: int
) -> None:
    """Host chunks (some side by side, some between device chunks) go up in pieces through two
    pinned buffers; every chunk ends at its offset, device chunks untouched by the pieces."""
    import cupy

    monkeypatch.setattr(codec_transfers, "PIECE_BYTES", piece_bytes)
    rng = np.random.default_rng(1)
    chunks = [rng.integers(0, 256, int(n), dtype=np.uint8) for n in rng.integers(1, 300, 40)]
    arrays = [cupy.asarray(c) if i % 7 == 3 else c for i, c in enumerate(chunks)]
    offsets, total = layout([c.nbytes for c in chunks])
    stream = cupy.cuda.Stream(non_blocking=False)

    async def stage() -> cupy.ndarray:
        with ExitStack() as pinned:
            _, device_in, host, _ = stage_inputs(
                arrays, offsets, total, stream, download=False, pinned=pinned
            )
            assert host == [i for i in range(len(arrays)) if i % 7 != 3]
            await upload_host_chunks(arrays, offsets, host, device_in, stream, pinned)
            stream.synchronize()
            return device_in

    staged = cupy.asnumpy(asyncio.run(stage()))
    for chunk, offset in zip(chunks, offsets, strict=True):
        np.testing.assert_array_equal(staged[offset : offset + chunk.nbytes], chunk)
