"""GPU reads write their output only after the work queued on the caller's stream.

cupy's memory pool gives a block freed on a stream to the next allocation on that stream at once,
while kernels queued there may still read it; a read that fills its output from streams of its
own must wait for them (a GPU stitch of one-chunk-per-tile mosaics read tiles into memory that
the other dask thread's block was still averaging).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from zarr_layouts import make_array

from linumpy.io import read_volume

SHAPE = (8, 512, 512)
CHUNKS = (4, 512, 512)  # 2 MiB of uint16 per chunk
#: Host decode (chunks above GPU_CHUNK_BYTES, libzstd threads) and nvCOMP's path.
PATHS = {"host decode": 2**20, "nvcomp": None}

SPIN_THEN_SUM = r"""
extern "C" __global__ void spin_then_sum(const unsigned short* x, long long n, long long cycles,
                                         unsigned long long* total) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    unsigned long long sum = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        sum += x[i];
    }
    atomicAdd(total, sum);
}
"""


@pytest.mark.gpu
@pytest.mark.parametrize("chunk_bytes", PATHS.values(), ids=PATHS.keys())
def test_a_read_waits_for_kernels_still_reading_the_memory_it_gets(
    tmp_path: Path, chunk_bytes: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cupy

    from linumpy.io.engine import plan

    if chunk_bytes is not None:
        monkeypatch.setattr(plan, "GPU_CHUNK_BYTES", chunk_bytes)

    for name, value in (("sevens", 7), ("threes", 3)):
        make_array(tmp_path / f"{name}.zarr", "v3", np.full(SHAPE, value, np.uint16), chunks=CHUNKS)
    kernel = cupy.RawKernel(SPIN_THEN_SUM, "spin_then_sum")
    cycles = np.int64(400_000_000)  # about 0.2 s at 2 GHz: far longer than reading 4 MiB
    for _ in range(3):
        sevens = read_volume(tmp_path / "sevens.zarr", gpu=True)
        total = cupy.zeros(1, dtype=cupy.uint64)
        kernel((64,), (256,), (sevens, np.int64(sevens.size), cycles, total))
        size = sevens.size
        del sevens  # back to the pool while the kernel is still to read it
        threes = read_volume(tmp_path / "threes.zarr", gpu=True)
        assert int(total.get()[0]) == 7 * size
        assert bool((threes == 3).all())
