"""XXH64 (seed 0) of many device buffers at once: zstd's frame checksum, which nvCOMP neither
verifies nor writes.

Inside one buffer XXH64's four lanes are the only parallelism, so two kernels cover two regimes:
``xxh64_lanes`` gives every buffer four threads with many loads in flight (many small buffers),
``xxh64_tiled`` a block whose warps copy tiles ahead into shared memory while four threads hash
(long buffers, whose chain four threads alone cannot feed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from linumpy.gpu.kernel_cache import raw_kernel

if TYPE_CHECKING:
    import cupy

__all__: list[str] = []

_LANES = 4
_LANES_BLOCK = 128  # threads per block of xxh64_lanes
_TILED_BLOCK = 160  # xxh64_tiled: one warp hashes (four of its threads), four copy
#: Buffers from this size on are hashed by xxh64_tiled: the two kernels cross over between about
#: 100 KB and 512 KiB.
TILED_BYTES = 256 << 10

# Every buffer must start 8-byte aligned: the kernel reads whole 8-byte words.
_ALIGNMENT = 8

_SOURCE = r"""
#define XXH_P1 0x9E3779B185EBCA87ULL
#define XXH_P2 0xC2B2AE3D27D4EB4FULL
#define XXH_P3 0x165667B19E3779F9ULL
#define XXH_P4 0x85EBCA77C2B2AE63ULL
#define XXH_P5 0x27D4EB2F165667C5ULL
#define XXH_UNROLL 16
#define XXH_TILE_STRIPES 256
#define XXH_TILE_WORDS (4 * XXH_TILE_STRIPES)
#define XXH_LOADERS 128

typedef unsigned long long u64;

__device__ __forceinline__ u64 xxh_rotl(u64 x, int r) { return (x << r) | (x >> (64 - r)); }

__device__ __forceinline__ u64 xxh_round(u64 acc, u64 input) {
    acc += input * XXH_P2;
    acc = xxh_rotl(acc, 31);
    return acc * XXH_P1;
}

__device__ __forceinline__ u64 xxh_merge_round(u64 acc, u64 val) {
    acc ^= xxh_round(0, val);
    return acc * XXH_P1 + XXH_P4;
}

__device__ u64 xxh_finish(u64 v1, u64 v2, u64 v3, u64 v4, const unsigned char* p,
                          const long long len) {
    const long long stripes = len >> 5;
    u64 h;
    if (stripes > 0) {
        h = xxh_rotl(v1, 1) + xxh_rotl(v2, 7) + xxh_rotl(v3, 12) + xxh_rotl(v4, 18);
        h = xxh_merge_round(h, v1);
        h = xxh_merge_round(h, v2);
        h = xxh_merge_round(h, v3);
        h = xxh_merge_round(h, v4);
    } else {
        h = XXH_P5;
    }
    h += (u64)len;

    long long pos = stripes << 5;
    for (; pos + 8 <= len; pos += 8) {
        h ^= xxh_round(0, *(const u64*)(p + pos));
        h = xxh_rotl(h, 27) * XXH_P1 + XXH_P4;
    }
    if (pos + 4 <= len) {
        h ^= (u64)(*(const unsigned int*)(p + pos)) * XXH_P1;
        h = xxh_rotl(h, 23) * XXH_P2 + XXH_P3;
        pos += 4;
    }
    for (; pos < len; ++pos) {
        h ^= (u64)p[pos] * XXH_P5;
        h = xxh_rotl(h, 11) * XXH_P1;
    }
    h ^= h >> 33;
    h *= XXH_P2;
    h ^= h >> 29;
    h *= XXH_P3;
    h ^= h >> 32;
    return h;
}

extern "C" __global__ void xxh64_lanes(const unsigned char* __restrict__ base,
                                       const long long* __restrict__ offsets,
                                       const long long* __restrict__ sizes,
                                       u64* __restrict__ out,
                                       const int n) {
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long item = tid >> 2;
    const int lane = (int)(tid & 3);
    const bool active = item < n;
    // Inactive threads run with an empty buffer so that every thread of the warp reaches the
    // shuffles below.
    const long long len = active ? sizes[item] : 0;
    const unsigned char* p = active ? base + offsets[item] : base;
    const u64* words = (const u64*)p;
    const long long stripes = len >> 5;

    u64 acc = lane == 0 ? XXH_P1 + XXH_P2 : lane == 1 ? XXH_P2 : lane == 2 ? 0ULL : 0ULL - XXH_P1;
    u64 cur[XXH_UNROLL];
    u64 nxt[XXH_UNROLL];
#pragma unroll
    for (int u = 0; u < XXH_UNROLL; ++u) {
        cur[u] = u < stripes ? __ldg(words + 4LL * u + lane) : 0ULL;
    }
    for (long long s = 0; s < stripes; s += XXH_UNROLL) {
        // Issue the next group's loads before hashing this group: latency hides behind the math.
#pragma unroll
        for (int u = 0; u < XXH_UNROLL; ++u) {
            const long long t = s + XXH_UNROLL + u;
            nxt[u] = t < stripes ? __ldg(words + 4LL * t + lane) : 0ULL;
        }
#pragma unroll
        for (int u = 0; u < XXH_UNROLL; ++u) {
            if (s + u < stripes) acc = xxh_round(acc, cur[u]);
        }
#pragma unroll
        for (int u = 0; u < XXH_UNROLL; ++u) cur[u] = nxt[u];
    }

    const u64 v1 = __shfl_sync(0xffffffffu, acc, 0, 4);
    const u64 v2 = __shfl_sync(0xffffffffu, acc, 1, 4);
    const u64 v3 = __shfl_sync(0xffffffffu, acc, 2, 4);
    const u64 v4 = __shfl_sync(0xffffffffu, acc, 3, 4);
    if (!active || lane != 0) return;

    out[item] = xxh_finish(v1, v2, v3, v4, p, len);
}

extern "C" __global__ void xxh64_tiled(const unsigned char* __restrict__ base,
                                       const long long* __restrict__ offsets,
                                       const long long* __restrict__ sizes,
                                       u64* __restrict__ out,
                                       const int n) {
    __shared__ u64 tile[2][XXH_TILE_WORDS];
    __shared__ u64 lanes[4];
    const long long item = blockIdx.x;  // one block per buffer: every thread returns or none
    if (item >= n) return;
    const int t = threadIdx.x;
    const long long len = sizes[item];
    const unsigned char* p = base + offsets[item];
    const u64* words = (const u64*)p;
    const long long stripes = len >> 5;
    const long long count = stripes * 4;  // words in whole stripes
    const long long tiles = (stripes + XXH_TILE_STRIPES - 1) / XXH_TILE_STRIPES;
    const int loader = t - 32;  // threads 32.. copy, threads 0-3 hash

    if (loader >= 0 && tiles > 0) {
#pragma unroll
        for (int i = loader; i < XXH_TILE_WORDS; i += XXH_LOADERS) {
            tile[0][i] = i < count ? __ldg(words + i) : 0ULL;
        }
    }
    __syncthreads();
    u64 acc = t == 0 ? XXH_P1 + XXH_P2 : t == 1 ? XXH_P2 : t == 2 ? 0ULL : 0ULL - XXH_P1;
    for (long long k = 0; k < tiles; ++k) {
        const int cur = (int)(k & 1);
        if (loader >= 0 && k + 1 < tiles) {
            const long long first = (k + 1) * XXH_TILE_WORDS;
#pragma unroll
            for (int i = loader; i < XXH_TILE_WORDS; i += XXH_LOADERS) {
                tile[cur ^ 1][i] = first + i < count ? __ldg(words + first + i) : 0ULL;
            }
        } else if (t < 4) {
            const long long left = stripes - k * XXH_TILE_STRIPES;
            const int here = left < XXH_TILE_STRIPES ? (int)left : XXH_TILE_STRIPES;
            const u64* row = tile[cur] + t;
#pragma unroll 8
            for (int s = 0; s < here; ++s) acc = xxh_round(acc, row[4 * s]);
        }
        __syncthreads();
    }
    if (t < 4) lanes[t] = acc;
    __syncthreads();
    if (t != 0) return;
    const u64 v1 = lanes[0], v2 = lanes[1], v3 = lanes[2], v4 = lanes[3];

    out[item] = xxh_finish(v1, v2, v3, v4, p, len);
}
"""


def _kernel(name: str) -> cupy.RawKernel:
    return raw_kernel(_SOURCE, name)


def xxh64_batch(
    buffer: cupy.ndarray,
    offsets: Sequence[int],
    sizes: Sequence[int],
    *,
    stream: cupy.cuda.Stream,
) -> cupy.ndarray:
    """Queue on ``stream`` the XXH64 of ``buffer[offsets[i] : offsets[i] + sizes[i]]`` (1-D uint8
    on the device, each input 8-byte aligned) for every i: one uint64 per input (zstd stores its
    low 32 bits). ValueError for inputs outside ``buffer`` or misaligned."""
    import cupy

    n = len(offsets)
    if len(sizes) != n:
        raise ValueError(f"{n} offsets but {len(sizes)} sizes")
    offsets_host = np.asarray(offsets, dtype=np.int64).reshape(n)
    sizes_host = np.asarray(sizes, dtype=np.int64).reshape(n)
    if n and (
        offsets_host.min() < 0
        or sizes_host.min() < 0
        or (offsets_host + sizes_host).max() > buffer.nbytes
    ):
        raise ValueError("an input lies outside the buffer")
    misaligned = np.flatnonzero((buffer.data.ptr + offsets_host) % _ALIGNMENT)
    if misaligned.size:
        raise ValueError(
            f"input {int(misaligned[0])} does not start at a multiple of {_ALIGNMENT} bytes"
        )
    with stream:
        hashes = cupy.empty(n, dtype=np.uint64)
        if n == 0:
            return hashes
        offsets_dev = cupy.asarray(offsets_host)
        sizes_dev = cupy.asarray(sizes_host)
        args = (buffer, offsets_dev, sizes_dev, hashes, np.int32(n))
        if sizes_host.max() >= TILED_BYTES:
            _kernel("xxh64_tiled")((n,), (_TILED_BLOCK,), args)
        else:
            blocks = (n * _LANES + _LANES_BLOCK - 1) // _LANES_BLOCK
            _kernel("xxh64_lanes")((blocks,), (_LANES_BLOCK,), args)
    return hashes
