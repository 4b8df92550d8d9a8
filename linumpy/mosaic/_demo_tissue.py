"""The demo mosaic grid's content, evaluated over any box of it: the same values whatever the boxes.

Every random field is keyed by position (:class:`KeyedUniform`). The smooth fields (the
section's outline, its surface, regions) are drawn at once on coarse grids; the fine ones
(fibres, speckle, the detector's noise floor) are drawn for each box.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from linumpy.settings import available_cpus

__all__: list[str] = []

#: Streams of the keyed draws (with the seed, the key of each random field).
_SPECKLE, _FLOOR, _FIBRES = 1, 2, 3
#: The speckle's grain (the Gaussian filter's sigma, pixels) and its reach (scipy's radius).
_GRAIN = 1.0
_GRAIN_RADIUS = int(4.0 * _GRAIN + 0.5)
#: Upsampling factors of the coarse fields (z, y, x).
_REGION_FACTORS = (16, 16, 16)
_FIBRE_FACTORS = (16, 2, 2)
_FIBRE_SIGMA = 0.8

Range = tuple[int, int]


class KeyedUniform:
    """Uniform draws in [0, 1) over a 3D volume, keyed by position: one PCG64 stream, block
    after block of ``(all planes, BLOCK, BLOCK)`` voxels, each thread jumping to a block's planes
    with ``advance``, so a box gets the same values whatever was drawn before, on any thread."""

    BLOCK = 64

    def __init__(
        self, seed: int, stream: int, shape: Sequence[int], dtype: Any = np.float32
    ) -> None:
        self._state = np.random.PCG64(np.random.SeedSequence([seed, stream])).state
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self._per_word = 2 if self.dtype == np.float32 else 1  # values per 64-bit draw
        self._blocks_x = -(-self.shape[2] // self.BLOCK)
        self._local = threading.local()

    def _draw(self, start: int, count: int) -> np.ndarray:
        """Values ``start:start + count`` of the stream (both even)."""
        local = self._local
        if not hasattr(local, "generator"):
            local.bitgen = np.random.PCG64()
            local.bitgen.state = self._state
            local.generator, local.word = np.random.Generator(local.bitgen), 0
        word = start // self._per_word
        local.bitgen.advance((word - local.word) % 2**128)  # backwards too: modulo the period
        local.word = word + count // self._per_word
        return local.generator.random(count, dtype=self.dtype)

    def box(self, z: Range, y: Range, x: Range) -> np.ndarray:
        """The values of planes ``z[0]:z[1]``, rows ``y[0]:y[1]``, columns ``x[0]:x[1]``."""
        (z0, z1), (y0, y1), (x0, x1) = z, y, x
        depth, b = self.shape[0], self.BLOCK
        out = np.empty((z1 - z0, y1 - y0, x1 - x0), self.dtype)
        for yb in range(y0 // b, -(-y1 // b)):
            for xb in range(x0 // b, -(-x1 // b)):
                first = ((yb * self._blocks_x + xb) * depth + z0) * b * b
                block = self._draw(first, (z1 - z0) * b * b).reshape(z1 - z0, b, b)
                ya, yz = max(y0, yb * b), min(y1, (yb + 1) * b)
                xa, xz = max(x0, xb * b), min(x1, (xb + 1) * b)
                out[:, ya - y0 : yz - y0, xa - x0 : xz - x0] = block[
                    :, ya - yb * b : yz - yb * b, xa - xb * b : xz - xb * b
                ]
        return out


def _runs(first: int, last: int, size: int) -> list[tuple[int, int, int]]:
    """``(start, stop, offset)`` runs of consecutive indices of ``arange(first, last) % size``."""
    runs, offset = [], 0
    while first < last:
        start = first % size
        length = min(last - first, size - start)
        runs.append((start, start + length, offset))
        first, offset = first + length, offset + length
    return runs


def _wrapped_box(noise: KeyedUniform, lo: Sequence[int], hi: Sequence[int]) -> np.ndarray:
    """``noise`` over the box ``lo:hi``, whose indices wrap around the volume's edges."""
    out = np.empty([h - lo_ for lo_, h in zip(lo, hi, strict=True)], noise.dtype)
    for z0, z1, oz in _runs(lo[0], hi[0], noise.shape[0]):
        for y0, y1, oy in _runs(lo[1], hi[1], noise.shape[1]):
            for x0, x1, ox in _runs(lo[2], hi[2], noise.shape[2]):
                region = (slice(oz, oz + z1 - z0), slice(oy, oy + y1 - y0), slice(ox, ox + x1 - x0))
                out[region] = noise.box((z0, z1), (y0, y1), (x0, x1))
    return out


def coarse_field(
    rng: np.random.Generator, shape: Sequence[int], factors: Sequence[int], sigma: float
) -> np.ndarray:
    """Smoothed noise of unit spread on the coarse grid of :func:`upsample` (float32)."""
    from scipy import ndimage

    coarse = rng.standard_normal(coarse_shape(shape, factors))
    coarse = ndimage.gaussian_filter(coarse, sigma, mode="wrap")
    return ((coarse - coarse.mean()) / coarse.std()).astype(np.float32)


def coarse_shape(shape: Sequence[int], factors: Sequence[int]) -> tuple[int, ...]:
    """The shape of the coarse grid of a field of ``shape`` upsampled by ``factors``."""
    return tuple(math.ceil(n / f) + 2 for n, f in zip(shape, factors, strict=True))


def upsample(
    coarse: Any,
    factors: Sequence[int],
    ranges: Sequence[Range],
    xp: ModuleType,
    origin: Sequence[int] | None = None,
    steps: Sequence[int] | None = None,
) -> Any:
    """A coarse field linearly upsampled by ``factors``, over ``ranges`` of the fine grid (one
    ``(first, last)`` per axis, every ``steps`` voxels); ``coarse`` holds the coarse grid from
    ``origin`` on (float32: the same values whatever the ranges)."""
    field = xp.asarray(coarse, dtype=xp.float32)
    origin = origin or (0,) * len(factors)
    steps = steps or (1,) * len(factors)
    # Separable linear upsampling, one axis at a time (much faster than ndimage.zoom).
    for axis, (factor, (first, last), start, step) in enumerate(
        zip(factors, ranges, origin, steps, strict=True)
    ):
        t = xp.arange(first, last, step, dtype=xp.float32) / factor
        i0 = t.astype(xp.int64)
        frac = (t - i0.astype(xp.float32)).reshape((-1,) + (1,) * (len(factors) - axis - 1))
        i0 -= start
        field = (1 - frac) * xp.take(field, i0, axis=axis) + frac * xp.take(
            field, i0 + 1, axis=axis
        )
    return field


class _Fibres:
    """The fibres' coarse field: keyed normal noise smoothed with wrap-around edges, then
    ``0.25 * tanh`` of it (its share of the reflectivity), over any box of the coarse grid."""

    def __init__(self, seed: int, shape: Sequence[int]) -> None:
        self.noise = KeyedUniform(seed, _FIBRES, shape, np.float64)
        self.radius = int(4.0 * _FIBRE_SIGMA + 0.5)  # scipy's Gaussian reach
        x = np.arange(-self.radius, self.radius + 1)
        weights = np.exp(-0.5 * (x / _FIBRE_SIGMA) ** 2)
        weights /= weights.sum()
        # Filtered white noise: its spread is the kernel's norm; divided by it, unit spread.
        self.scale = 1.0 / math.sqrt(float((weights**2).sum()) ** 3)

    def box(self, lo: Sequence[int], hi: Sequence[int]) -> np.ndarray:
        from scipy import ndimage, special

        r = self.radius
        uniform = _wrapped_box(self.noise, [n - r for n in lo], [n + r for n in hi])
        noise = special.ndtri(uniform + 2.0**-54)  # never 0: a finite normal draw
        # The box's margin holds every neighbour the filter reads: its edge mode does not matter.
        smooth = ndimage.gaussian_filter(noise, _FIBRE_SIGMA, mode="nearest")[r:-r, r:-r, r:-r]
        return (0.25 * np.tanh(smooth * self.scale)).astype(np.float32)


@dataclass(frozen=True)
class Columns:
    """What the slabs of a block share: the rows and columns of the tissue volume it covers,
    the tissue mask there, the light's gain below the surface, and the reflectivity of the
    block's planes on the fibres' coarse grid (from ``origin`` on)."""

    y: Range
    x: Range
    mask: Any
    surface: Any
    gain: Any
    reflectivity: np.ndarray
    origin: tuple[int, ...]


@dataclass(frozen=True)
class Tissue:
    """A tissue volume of ``shape`` ``(Z, H, W)``: its 2D outline and surface and the coarse
    fields of its reflectivity; :meth:`box` evaluates the noise-free intensity over any box."""

    shape: tuple[int, int, int]
    outline: np.ndarray
    surface: np.ndarray
    regions: np.ndarray
    fibres: _Fibres

    @classmethod
    def draw(cls, rng: np.random.Generator, shape: Sequence[int], seed: int) -> Tissue:
        """The tissue of a volume of ``shape``, its smooth fields drawn from ``rng``."""
        depth, height, width = (int(n) for n in shape)
        # A section off the centre with a wavy outline: the corner tiles hold little or no tissue.
        outline = coarse_field(rng, (height, width), (16, 16), 2.0)
        # Regions of different reflectivity (grey/white matter-like) and a fine texture (fibre
        # bundles, vessels) that runs deep into the tissue, so that it survives the projection.
        regions = coarse_field(rng, (depth, height, width), _REGION_FACTORS, 1.5)
        regions = (0.65 / (1.0 + np.exp(-2.5 * regions))).astype(np.float32)
        fibres_shape = coarse_shape((depth, height, width), _FIBRE_FACTORS)
        # Light enters through an uneven surface and decays with depth below it.
        surface = coarse_field(rng, (height, width), (32, 32), 1.0)
        fibres = _Fibres(seed, fibres_shape)
        return cls((depth, height, width), outline, surface, regions, fibres)

    def columns(
        self, z: Range, y: Range, x: Range, xp: ModuleType, *, fibres: bool = True
    ) -> Columns:
        """What the slabs of planes ``z``, rows ``y`` and columns ``x`` share (without the
        ``fibres``, only the mask and the surface's gain)."""
        depth, height, width = self.shape
        yy = xp.linspace(-1.0, 1.0, height, dtype=xp.float32)[y[0] : y[1], None]
        xx = xp.linspace(-1.0, 1.0, width, dtype=xp.float32)[None, x[0] : x[1]]
        radius = xp.sqrt(((yy - 0.12) / 0.72) ** 2 + ((xx - 0.1) / 0.76) ** 2)
        outline = 1.0 + 0.08 * xp.tanh(upsample(self.outline, (16, 16), (y, x), xp))
        mask = radius < outline
        surface = depth * (0.12 + 0.04 * upsample(self.surface, (32, 32), (y, x), xp))
        # Below the surface the light decays as exp(-(z - surface) / length): the factor of the
        # surface, here, and that of the plane, in :meth:`box`.
        gain = xp.where(mask, xp.exp(surface / (0.45 * depth)), 0.0).astype(xp.float32)
        if not fibres:
            return Columns(y, x, mask, surface, gain, np.zeros((0, 0, 0), np.float32), (0, 0, 0))
        ranges = (z, y, x)
        lo = tuple(first // f for (first, _), f in zip(ranges, _FIBRE_FACTORS, strict=True))
        hi = [(last - 1) // f + 2 for (_, last), f in zip(ranges, _FIBRE_FACTORS, strict=True)]
        # The regions, linear between knots 16 voxels apart, are sampled on the fibres' coarse
        # grid (every 16, 2 and 2 voxels: their knots among its points), so that one upsampling
        # of the sum gives both at every voxel.
        points = [(a * f, b * f) for a, b, f in zip(lo, hi, _FIBRE_FACTORS, strict=True)]
        regions = upsample(self.regions, _REGION_FACTORS, points, np, steps=_FIBRE_FACTORS)
        reflectivity = (0.35 + regions + self.fibres.box(lo, hi)).astype(np.float32)
        return Columns(y, x, mask, surface, gain, reflectivity, lo)

    def box(self, z: Range, columns: Columns, xp: ModuleType) -> Any:
        """Noise-free tissue intensity of planes ``z`` over ``columns``, float32."""
        depth = self.shape[0]
        ranges = (z, columns.y, columns.x)
        reflectivity = upsample(columns.reflectivity, _FIBRE_FACTORS, ranges, xp, columns.origin)
        planes = xp.arange(z[0], z[1], dtype=xp.float32)[:, None, None]
        decay = xp.exp(-planes / (0.45 * depth))
        attenuation = xp.where(planes >= columns.surface[None], decay * columns.gain[None], 0.0)
        reflectivity *= attenuation
        return reflectivity


@dataclass(frozen=True)
class TilePart:
    """The part ``y, x`` (tile coordinates) of tile ``(row, col)`` that a block of the grid
    covers, and where it lies in the block."""

    row: int
    col: int
    y: Range
    x: Range
    out_y: slice
    out_x: slice


class DemoContent:
    """The demo mosaic grid, evaluated a block at a time: :meth:`fill` gives the same values
    for a voxel whatever the block it is part of."""

    def __init__(
        self,
        seed: int,
        tissue: Tissue,
        positions: np.ndarray,
        tile_shape: tuple[int, int, int],
        grid_shape: tuple[int, int],
    ) -> None:
        self.tissue = tissue
        self.positions = positions
        self.tile_shape = tile_shape
        self.grid_shape = grid_shape
        depth, h, w = tile_shape
        rows, cols = grid_shape
        self.shape = (depth, rows * h, cols * w)
        self.speckle = KeyedUniform(seed, _SPECKLE, tissue.shape)
        self.floor = KeyedUniform(seed, _FLOOR, self.shape)
        yy = np.linspace(-1.0, 1.0, h, dtype=np.float32)[:, None]
        xx = np.linspace(-1.0, 1.0, w, dtype=np.float32)[None, :]
        self.vignetting = 1.0 - 0.12 * (yy**2 + xx**2)

    def parts(self, y: Range, x: Range) -> list[TilePart]:
        """The tile parts of the grid's rows ``y`` and columns ``x``."""
        _, h, w = self.tile_shape
        parts = []
        for row in range(y[0] // h, -(-y[1] // h)):
            for col in range(x[0] // w, -(-x[1] // w)):
                ty = (max(y[0], row * h) - row * h, min(y[1], (row + 1) * h) - row * h)
                tx = (max(x[0], col * w) - col * w, min(x[1], (col + 1) * w) - col * w)
                out_y = slice(row * h + ty[0] - y[0], row * h + ty[1] - y[0])
                out_x = slice(col * w + tx[0] - x[0], col * w + tx[1] - x[0])
                parts.append(TilePart(row, col, ty, tx, out_y, out_x))
        return parts

    def _window(self, part: TilePart) -> tuple[int, int]:
        """The tissue volume's row and column of the tile's first voxel (rounded down)."""
        y, x = self.positions[part.row, part.col]
        return math.floor(y), math.floor(x)

    def region(self, parts: Sequence[TilePart]) -> tuple[Range, Range]:
        """The rows and columns of the tissue volume that ``parts`` sample."""
        corners = [self._window(p) for p in parts]
        y0 = min(c[0] + p.y[0] for c, p in zip(corners, parts, strict=True))
        y1 = max(c[0] + p.y[1] + 1 for c, p in zip(corners, parts, strict=True))
        x0 = min(c[1] + p.x[0] for c, p in zip(corners, parts, strict=True))
        x1 = max(c[1] + p.x[1] + 1 for c, p in zip(corners, parts, strict=True))
        return (y0, y1), (x0, x1)

    def planes_per_slab(self, region: tuple[Range, Range], budget: int) -> int:
        """Planes of a slab of ``region`` whose float32 temporaries (about six of the region,
        its margin included) fit ``budget`` bytes."""
        (y0, y1), (x0, x1) = region
        margin = 2 * _GRAIN_RADIUS
        area = (y1 - y0 + margin) * (x1 - x0 + margin)
        return max(1, budget // (6 * 4 * area))

    def fill(
        self,
        out: Any,
        z: Range,
        parts: Sequence[TilePart],
        columns: Columns,
        xp: ModuleType,
    ) -> None:
        """Write planes ``z`` of ``parts`` into ``out`` (the block's planes ``z``, uint16)."""
        from linumpy._numpy_or_cupy import ndimage_module

        ndimage = ndimage_module(xp)
        (y0, y1), (x0, x1) = columns.y, columns.x
        _, height, width = self.tissue.shape
        r = _GRAIN_RADIUS
        sy, sx = (max(0, y0 - r), min(height, y1 + r)), (max(0, x0 - r), min(width, x1 + r))
        # Speckle: exponentially distributed intensity with a grain of about the optical
        # resolution (a few pixels), fixed by the tissue itself, so overlapping tiles see the
        # same speckle. The margin holds the filter's reach: a box's values are the whole's.
        # -log(1 - u): 1 - u is exact in float32, and log is faster than log1p.
        speckle = xp.asarray(self.speckle.box(z, sy, sx))
        xp.subtract(1.0, speckle, out=speckle)
        xp.log(speckle, out=speckle)
        xp.negative(speckle, out=speckle)
        speckle = ndimage.gaussian_filter1d(speckle, _GRAIN, axis=1, mode="nearest")
        speckle = speckle[:, y0 - sy[0] : y1 - sy[0]]
        speckle = ndimage.gaussian_filter1d(speckle, _GRAIN, axis=2, mode="nearest")
        speckled = self.tissue.box(z, columns, xp)
        speckled *= speckle[:, :, x0 - sx[0] : x1 - sx[0]]
        del speckle
        vignetting = xp.asarray(self.vignetting)
        _, h, w = self.tile_shape
        for part in parts:
            wy, wx = self._window(part)
            y, x = self.positions[part.row, part.col]
            fy, fx = float(y) - wy, float(x) - wx  # Python floats: the arithmetic stays float32
            (ty0, ty1), (tx0, tx1) = part.y, part.x
            block = speckled[
                :, wy + ty0 - y0 : wy + ty1 + 1 - y0, wx + tx0 - x0 : wx + tx1 + 1 - x0
            ]
            rows = (1 - fy) * block[:, :-1] + fy * block[:, 1:]
            tile = (1 - fx) * rows[:, :, :-1] + fx * rows[:, :, 1:]
            tile *= vignetting[ty0:ty1, tx0:tx1]
            # Detector noise floor: Rayleigh-distributed, independent for every acquisition.
            gy, gx = part.row * h + ty0, part.col * w + tx0
            floor = xp.asarray(self.floor.box(z, (gy, gy + ty1 - ty0), (gx, gx + tx1 - tx0)))
            xp.subtract(1.0, floor, out=floor)
            xp.log(floor, out=floor)
            floor *= -2.0
            xp.sqrt(floor, out=floor)
            tile *= 3000.0
            floor *= 150.0
            tile += floor
            tile += 0.5
            xp.clip(tile, 0, 65535, out=tile)
            out[:, part.out_y, part.out_x] = tile.astype(xp.uint16)


def tissue_fraction(content: DemoContent, xp: ModuleType) -> np.ndarray:
    """``(rows, cols)`` fraction of each tile's field of view that holds tissue."""
    _, h, w = content.tile_shape
    fraction = np.zeros(content.grid_shape)
    for row, col in np.ndindex(*content.grid_shape):
        y, x = content.positions[row, col]
        y0, x0 = math.floor(y + 0.5), math.floor(x + 0.5)
        mask = content.tissue.columns((0, 1), (y0, y0 + h), (x0, x0 + w), xp, fibres=False).mask
        fraction[row, col] = float(mask.mean())
    return fraction


def blocks(
    shape: tuple[int, ...], unit: tuple[int, ...], budget: int
) -> list[tuple[tuple[int, int], ...]]:
    """Blocks of whole ``unit`` (the stored files: shards, or chunks) covering ``shape``: as many
    units as ``budget`` bytes of uint16 hold (one at least), along x, then z, then y."""
    counts = [-(-n // u) for n, u in zip(shape, unit, strict=True)]
    files = max(1, budget // (2 * math.prod(unit)))
    kx = min(counts[2], files)
    kz = min(counts[0], max(1, files // kx))
    ky = min(counts[1], max(1, files // (kx * kz)))
    step = (kz * unit[0], ky * unit[1], kx * unit[2])
    return [
        tuple((a, min(a + s, n)) for a, s, n in zip(origin, step, shape, strict=True))
        for origin in itertools.product(*(range(0, n, s) for n, s in zip(shape, step, strict=True)))
    ]


def generate(
    content: DemoContent,
    blocks: Sequence[tuple[tuple[int, int], ...]],
    xp: ModuleType,
    slab_bytes: int,
) -> Iterator[tuple[tuple[slice, ...], Any]]:
    """Each block of the grid and its uint16 data, generated a slab of planes at a time by a
    thread per CPU, or one for the GPU (their temporaries within half of ``slab_bytes``)."""
    workers = available_cpus() if xp is np else 1
    with ThreadPoolExecutor(workers) as pool:
        for z, y, x in blocks:
            parts = content.parts(y, x)
            region = content.region(parts)
            columns = content.tissue.columns(z, *region, xp)
            out = xp.empty((z[1] - z[0], y[1] - y[0], x[1] - x[0]), dtype=xp.uint16)
            step = content.planes_per_slab(region, slab_bytes // (2 * workers))
            slabs = [(a, min(a + step, z[1])) for a in range(z[0], z[1], step)]
            fill = functools.partial(_fill, content, out, z[0], parts, columns, xp)
            list(pool.map(fill, slabs))
            yield tuple(slice(*r) for r in (z, y, x)), out


def _fill(
    content: DemoContent,
    out: Any,
    first: int,
    parts: Sequence[TilePart],
    columns: Columns,
    xp: ModuleType,
    planes: Range,
) -> None:
    """Planes ``planes`` of a block (``out``, from plane ``first`` on)."""
    content.fill(out[planes[0] - first : planes[1] - first], planes, parts, columns, xp)
