"""The paths a user takes to read and write a zarr volume, timed as benchmark rows.

CPU reads: linumpy's ``read_volume``, zarr's own read, tensorstore and zarr with the ``zarrs``
codec pipeline (each when installed; otherwise the row says so). GPU reads:
``read_volume(gpu=True)``, zarr inside ``gpu_zarr_context`` (the nvCOMP codec),
``zarr.config.enable_gpu()`` alone. Writes: zarr's CPU write, linumpy's write engine (CPU and
GPU), and zarr's GPU write (nvCOMP encode inside ``gpu_zarr_context``). Every read is checked
against the volume.
"""

from __future__ import annotations

import functools
import importlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import zarr

from linumpy.bench.timing import Row, Timer
from linumpy.io import read_volume

__all__ = ["Layout", "cpu_read_rows", "gpu_read_rows", "write_rows", "write_volume"]

ZARRS_PIPELINE = "zarrs.ZarrsCodecPipeline"
#: Names of checksummed layouts end with this (:meth:`Layout.cubic`).
CHECKSUM_SUFFIX = ", checksums"


@dataclass(frozen=True, slots=True)
class Layout:
    """How a volume is stored: chunk shape, shard shape when sharded, and checksums (linumpy's
    default chain: zstd's content checksum, then zarr's crc32c codec).

    Examples
    --------
    >>> from linumpy.bench import Layout
    >>> Layout.cubic(64, 3).name, Layout.cubic(64, 3, shards=(128, 512, 512)).name
    ('64^3', 'sharded 64^3 in 128x512x512')
    >>> Layout.cubic(64, 3, checksum=True).name
    '64^3, checksums'
    """

    name: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None
    checksum: bool = False

    @classmethod
    def cubic(
        cls, edge: int, ndim: int, shards: Sequence[int] | None = None, *, checksum: bool = False
    ) -> Layout:
        """Chunks of ``edge`` along every axis, in ``shards`` when given."""
        name = f"{edge}^{ndim}"
        if shards is not None:
            shards = tuple(int(s) for s in shards)
            name = f"sharded {name} in {'x'.join(map(str, shards))}"
        return cls(name + (CHECKSUM_SUFFIX if checksum else ""), (edge,) * ndim, shards, checksum)


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _zarr_read(path: Path) -> Any:
    return zarr.open_array(path, mode="r")[...]


def _tensorstore_read(ts: ModuleType, path: Path) -> np.ndarray:
    driver = "zarr3" if (path / "zarr.json").exists() else "zarr"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec, read=True).result().read().result()


def _zarrs_read(path: Path) -> Any:
    with zarr.config.set({"codec_pipeline.path": ZARRS_PIPELINE}):
        return _zarr_read(path)


def write_volume(path: Path, volume: Any, layout: Layout, codec: Any) -> None:
    """Write ``volume`` (numpy or cupy) as a zarr v3 array in ``layout`` with ``codec``.

    Examples
    --------
    >>> import numpy as np, tempfile, zarr
    >>> from pathlib import Path
    >>> from linumpy.bench import Layout, write_volume
    >>> path = Path(tempfile.mkdtemp()) / "a.zarr"
    >>> write_volume(path, np.ones((8, 8, 8), "u2"), Layout.cubic(4, 3), zarr.codecs.ZstdCodec())
    >>> zarr.open_array(path).chunks
    (4, 4, 4)
    """
    _create(path, volume, layout, codec)[...] = volume


def _create(path: Path, volume: Any, layout: Layout, codec: Any) -> zarr.Array:
    """An empty zarr v3 array shaped like ``volume``, in ``layout``, with ``codec``."""
    return zarr.create_array(
        path,
        shape=volume.shape,
        chunks=layout.chunks,
        shards=layout.shards,
        dtype=volume.dtype,
        compressors=codec,
        fill_value=0,
        overwrite=True,
    )


def cpu_read_rows(timer: Timer, layout: str, path: Path, volume: np.ndarray) -> list[Row]:
    """Time the CPU reads of the array at ``path``, each checked against ``volume``.

    Examples
    --------
    >>> import tempfile, zarr
    >>> from pathlib import Path
    >>> from linumpy.bench import Layout, Timer, cpu_read_rows, oct_volume, write_volume
    >>> volume = oct_volume((16, 16, 16))
    >>> path = Path(tempfile.mkdtemp()) / "a.zarr"
    >>> write_volume(path, volume, Layout.cubic(8, 3), zarr.codecs.ZstdCodec())
    >>> rows = cpu_read_rows(Timer(warmup=0, repeats=1), "8^3", path, volume)
    >>> rows[0].name, rows[0].matches
    ('linumpy read_volume (CPU)', True)
    """
    nbytes = volume.nbytes
    same = functools.partial(_equals, volume)
    measure = functools.partial(timer.measure, layout, kind="cpu", op="read", nbytes=nbytes)
    rows = [
        measure(name="linumpy read_volume (CPU)", run=lambda: read_volume(path), check=same),
        measure(name="zarr CPU read", run=lambda: _zarr_read(path), check=same),
    ]
    ts = _optional("tensorstore")
    name = "tensorstore read"
    if ts is None:
        rows.append(timer.skip(layout, name, "cpu", "read", "skipped: tensorstore not installed"))
    else:
        rows.append(measure(name=name, run=lambda: _tensorstore_read(ts, path), check=same))
    name = "zarr with the zarrs codec pipeline"
    if _optional("zarrs") is None:
        note = "skipped: zarrs not installed (pip install zarrs, or the bench extra)"
        rows.append(timer.skip(layout, name, "cpu", "read", note))
    else:
        rows.append(measure(name=name, run=lambda: _zarrs_read(path), check=same))
    return rows


def _equals(volume: np.ndarray, result: Any) -> bool:
    return isinstance(result, np.ndarray) and np.array_equal(result, volume)


def _equals_on_device(device_volume: Any, result: Any) -> bool:
    import cupy

    return isinstance(result, cupy.ndarray) and bool(cupy.array_equal(result, device_volume))


def gpu_read_rows(timer: Timer, layout: str, path: Path, device_volume: Any) -> list[Row]:
    """Time the GPU reads of the array at ``path``, each checked against ``device_volume``.

    Examples
    --------
    >>> rows = gpu_read_rows(timer, "64^3", path, device_volume)  # doctest: +SKIP
    >>> [row.name for row in rows]  # doctest: +SKIP
    ['read_volume(gpu=True)', 'gpu_zarr_context (nvCOMP codec in zarr)', 'zarr enable_gpu()']
    """
    from linumpy.gpu.zarr_io import gpu_zarr_context

    nbytes = int(device_volume.nbytes)
    measure = functools.partial(
        timer.measure,
        layout,
        kind="gpu",
        op="read",
        nbytes=nbytes,
        check=functools.partial(_equals_on_device, device_volume),
    )

    def in_context() -> Any:
        with gpu_zarr_context():
            return _zarr_read(path)

    def enable_gpu() -> Any:
        with zarr.config.enable_gpu():
            return _zarr_read(path)

    return [
        measure(name="read_volume(gpu=True)", run=lambda: read_volume(path, gpu=True)),
        measure(name="gpu_zarr_context (nvCOMP codec in zarr)", run=in_context),
        measure(name="zarr enable_gpu() (CPU decode, copy per chunk)", run=enable_gpu),
    ]


def _engine_write(path: Path, volume: Any, layout: Layout, codec: Any) -> Any:
    """Create the array as :func:`write_volume` does, then fill it with linumpy's write engine."""
    from linumpy.io.block_write import device_encoder
    from linumpy.io.engine.write import write_array

    array = _create(path, volume, layout, codec)
    return write_array(array, volume, encoder=device_encoder(volume))


def _codecs(zstd: type, level: int, checksum: bool) -> Any:
    """The bytes-to-bytes codecs of a layout: zstd, and with checksums linumpy's default chain
    (zstd with its content checksum, then a crc32c of the frame)."""
    if not checksum:
        return zstd(level=level)
    if zstd is zarr.codecs.ZstdCodec:
        return [zstd(level=level, checksum=True), zarr.codecs.Crc32cCodec()]
    from linumpy.gpu.nvcomp_zstd import DeviceCrc32cCodec

    return [zstd(level=level, checksum=True), DeviceCrc32cCodec()]


def write_rows(
    timer: Timer,
    layout: Layout,
    path: Path,
    volume: np.ndarray,
    *,
    zstd_level: int,
    device_volume: Any = None,
    timed: bool = True,
) -> list[Row]:
    """Write ``volume`` to ``path`` in ``layout`` (zarr's CPU write), then with linumpy's write
    engine on the CPU and, given ``device_volume``, on the GPU (nvCOMP encode), and zarr's GPU
    write (nvCOMP encode inside ``gpu_zarr_context``).

    The zarr CPU write leaves the array that the read rows read. With ``timed=False`` it is
    written once, untimed, and no rows are returned. The other writes go to a scratch array
    beside ``path``, read back on the CPU to check them, then removed. Before each run the last
    run's output is removed, untimed: every run writes new files.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from linumpy.bench import Layout, Timer, oct_volume, write_rows
    >>> volume = oct_volume((16, 16, 16))
    >>> path = Path(tempfile.mkdtemp()) / "a.zarr"
    >>> timer = Timer(warmup=0, repeats=1)
    >>> rows = write_rows(timer, Layout.cubic(8, 3), path, volume, zstd_level=3)
    >>> [(row.name, row.matches) for row in rows]
    [('zarr CPU write', None), ('linumpy CPU write (write engine)', True)]
    >>> path.is_dir()
    True
    """
    cpu_codec = _codecs(zarr.codecs.ZstdCodec, zstd_level, layout.checksum)
    if not timed:
        write_volume(path, volume, layout, cpu_codec)
        return []
    remove = functools.partial(shutil.rmtree, path, ignore_errors=True)
    run = functools.partial(write_volume, path, volume, layout, cpu_codec)
    rows = [
        timer.measure(
            layout.name,
            "zarr CPU write",
            "cpu",
            "write",
            run,
            nbytes=volume.nbytes,
            warmup=0,
            before=remove,
        )
    ]
    writes: list[tuple[str, str, Callable[[Path], Any]]] = [
        (
            "linumpy CPU write (write engine)",
            "cpu",
            lambda target: _engine_write(target, volume, layout, cpu_codec),
        ),
    ]
    if device_volume is not None:
        from linumpy.gpu.nvcomp_zstd import NvcompZstdCodec
        from linumpy.gpu.zarr_io import gpu_zarr_context

        def gpu_write(target: Path) -> None:
            with gpu_zarr_context():
                codec = _codecs(NvcompZstdCodec, zstd_level, layout.checksum)
                write_volume(target, device_volume, layout, codec)

        writes += [
            (
                "linumpy GPU write (nvCOMP, write engine)",
                "gpu",
                lambda target: _engine_write(target, device_volume, layout, cpu_codec),
            ),
            ("GPU write (nvCOMP encode in gpu_zarr_context)", "gpu", gpu_write),
        ]
    for name, kind, write in writes:
        target = path.with_name(f"{path.name}.{kind}-write")
        remove = functools.partial(shutil.rmtree, target, ignore_errors=True)
        try:
            row = timer.measure(
                layout.name,
                name,
                kind,
                "write",
                functools.partial(write, target),
                nbytes=volume.nbytes,
                before=remove,
            )
            if row.runs:
                row.matches = bool(np.array_equal(_zarr_read(target), volume))
                row.note = "checked by reading it back on the CPU"
        finally:
            remove()
        rows.append(row)
    return rows
