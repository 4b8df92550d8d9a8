"""The GPU back end's scatter stage: one CUDA kernel copies a group's decoded chunks into the
output, from a table of one row per chunk (see the kernel's comment); fill rows broadcast one
value.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from linumpy.gpu.kernel_cache import raw_kernel
from linumpy.io.engine.plan import ReadPlan

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

_SCATTER_SOURCE = r"""
typedef unsigned long long u64;
typedef WORD_TYPE WORD;

__device__ __forceinline__ unsigned char swap_word(unsigned char x) { return x; }
__device__ __forceinline__ unsigned short swap_word(unsigned short x) {
    return (unsigned short)((x >> 8) | (x << 8));
}
__device__ __forceinline__ unsigned int swap_word(unsigned int x) {
    return __byte_perm(x, 0, 0x0123);
}
__device__ __forceinline__ u64 swap_word(u64 x) {
    return ((u64)__byte_perm((unsigned int)x, 0, 0x0123) << 32)
         | __byte_perm((unsigned int)(x >> 32), 0, 0x0123);
}

// One table row per chunk: source and destination addresses, element count, then per dimension
// the extent, the source stride and the destination stride (in words). Rows with source
// strides of 0 broadcast one value (the fill value of chunks that are not stored).
extern "C" __global__ void linumpy_scatter(const long long* __restrict__ table, const int first) {
    const long long* row = table + (long long)(first + blockIdx.y) * (3 + 3 * ND);
    const WORD* __restrict__ src = (const WORD*)row[0];
    WORD* __restrict__ dst = (WORD*)row[1];
    const unsigned int count = (unsigned int)row[2];
    unsigned int extent[ND];
    long long src_stride[ND];
    long long dst_stride[ND];
#pragma unroll
    for (int d = 0; d < ND; ++d) {
        extent[d] = (unsigned int)row[3 + d];
        src_stride[d] = row[3 + ND + d];
        dst_stride[d] = row[3 + 2 * ND + d];
    }
    const unsigned int step = gridDim.x * blockDim.x;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        unsigned int rest = i;
        long long s = 0, t = 0;
#pragma unroll
        for (int d = ND - 1; d > 0; --d) {
            const unsigned int c = rest % extent[d];
            rest /= extent[d];
            s += c * src_stride[d];
            t += c * dst_stride[d];
        }
        s += rest * src_stride[0];
        t += rest * dst_stride[0];
        const WORD w = src[s];
        dst[t] = SWAP ? swap_word(w) : w;
    }
}
"""

_WORD_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_THREADS = 256
_MAX_GRID_Y = 65535


@functools.cache
def _scatter_source(ndim: int, word: int, swap: bool) -> str:
    defines = (
        f"#define ND {ndim}\n#define SWAP {int(swap)}\n#define WORD_TYPE {_WORD_TYPES[word]}\n"
    )
    return defines + _SCATTER_SOURCE


def _scatter_kernel(ndim: int, word: int, swap: bool) -> cupy.RawKernel:
    return raw_kernel(_scatter_source(ndim, word, swap), "linumpy_scatter")


@dataclass(frozen=True, slots=True)
class Geometry:
    """Per-entry placement of chunk parts in words (a complex element is two), from
    :func:`geometry`."""

    ndim: int  # dimensions of the kernel's index space (a complex axis added, at least 1)
    word: int  # bytes per word
    swap: bool  # byte-swap every word (stored byte order is not native)
    extent: np.ndarray  # (entries, ndim) words per dimension
    count: np.ndarray  # (entries,) words per entry
    chunk_offset: np.ndarray  # (entries,) word offset of the kept part inside a decoded chunk
    out_offset: np.ndarray  # (entries,) word offset of the part in the output
    chunk_strides: np.ndarray  # (ndim,) word strides of a decoded chunk
    out_strides: np.ndarray  # (ndim,) word strides of the output
    fill_strides: np.ndarray  # (ndim,) source strides of fill rows


def _strides(shape: Sequence[int], order: str) -> np.ndarray:
    strides = np.ones(len(shape), dtype=np.int64)
    dims = range(len(shape) - 2, -1, -1) if order == "C" else range(1, len(shape))
    for d in dims:
        prev = d + 1 if order == "C" else d - 1
        strides[d] = strides[prev] * shape[prev]
    return strides


def geometry(plan: ReadPlan) -> Geometry:
    """Where each entry of ``plan`` lands, in words, for :func:`scatter_table`."""
    stored = plan.stored_dtype
    components = 2 if stored.kind == "c" else 1
    word = stored.itemsize // components
    nd = len(plan.shape)
    n = plan.n_entries
    start, stop, chunk_start = (b.reshape(n, nd) for b in plan.bounds())
    extent = stop - start
    chunk_strides = _strides(plan.chunk_shape, plan.order) * components
    out_strides = _strides(plan.shape, "C") * components
    fill_strides = np.zeros(nd, dtype=np.int64)
    if components == 2:  # the real and imaginary words of an element
        extent = np.concatenate([extent, np.full((n, 1), 2)], axis=1)
        chunk_strides = np.append(chunk_strides, 1)
        out_strides = np.append(out_strides, 1)
        fill_strides = np.append(fill_strides, 1)
    if extent.shape[1] == 0:  # a 0-d array: one element
        extent = np.ones((n, 1), dtype=np.int64)
        chunk_strides = out_strides = fill_strides = np.zeros(1, dtype=np.int64)
    return Geometry(
        ndim=extent.shape[1],
        word=word,
        swap=word > 1 and not stored.isnative,
        extent=extent,
        count=extent.prod(axis=1),
        chunk_offset=chunk_start @ chunk_strides[: chunk_start.shape[1]],
        out_offset=start @ out_strides[: start.shape[1]],
        chunk_strides=chunk_strides,
        out_strides=out_strides,
        fill_strides=fill_strides,
    )


def scatter_table(
    geo: Geometry,
    reads: np.ndarray,
    fills: np.ndarray,
    *,
    sources: np.ndarray,
    out_ptr: int,
    fill_ptr: int,
) -> np.ndarray:
    """Rows of the scatter kernel's table: plan entries ``reads``, decoded at device addresses
    ``sources``, then entries ``fills`` from the fill value at ``fill_ptr``."""
    rows = np.concatenate([reads, fills]).astype(np.int64)
    n, nd = len(rows), geo.ndim
    table = np.empty((n, 3 + 3 * nd), dtype=np.int64)
    table[: len(reads), 0] = sources + geo.chunk_offset[reads] * geo.word
    table[len(reads) :, 0] = fill_ptr
    table[:, 1] = out_ptr + geo.out_offset[rows] * geo.word
    table[:, 2] = geo.count[rows]
    table[:, 3 : 3 + nd] = geo.extent[rows]
    table[: len(reads), 3 + nd : 3 + 2 * nd] = geo.chunk_strides
    table[len(reads) :, 3 + nd : 3 + 2 * nd] = geo.fill_strides
    table[:, 3 + 2 * nd :] = geo.out_strides
    return table[geo.count[rows] > 0]


def launch_scatter(geo: Geometry, table: np.ndarray, stream: cupy.cuda.Stream) -> None:
    """Queue the scatter kernel over every row of ``table`` on ``stream`` (not waited for)."""
    import cupy

    if len(table) == 0:
        return
    kernel = _scatter_kernel(geo.ndim, geo.word, geo.swap)
    per_block = _THREADS * 8
    grid_x = int(min(max(1, -(-int(table[:, 2].max()) // per_block)), 4096))
    with stream:
        device_table = cupy.asarray(table)
        for first in range(0, len(table), _MAX_GRID_Y):
            rows = min(_MAX_GRID_Y, len(table) - first)
            kernel((grid_x, rows), (_THREADS,), (device_table, np.int32(first)))
