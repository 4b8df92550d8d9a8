"""The paths a user takes to read and write a zarr volume, timed as benchmark rows (every read
checked against the volume); tensorstore and zarrs rows say so when not installed."""

from __future__ import annotations

import functools
import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from linumpy.bench.timing import Row, Timer
from linumpy.io import read_volume

ZARRS_PIPELINE = "zarrs.ZarrsCodecPipeline"


@dataclass(frozen=True, slots=True)
class Layout:
    """How a volume is stored: chunk shape, shard shape when sharded, and checksums (linumpy's
    default chain: zstd's content checksum, then zarr's crc32c codec)."""

    name: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None = None
    checksum: bool = False

    @classmethod
    def cubic(
        cls, edge: int, shards: tuple[int, ...] | None = None, *, checksum: bool = False
    ) -> Layout:
        """Chunks of ``edge`` along the 3 axes, in ``shards`` when given: ``64^3``,
        ``sharded 64^3 in 128x512x512``, ``64^3, checksums``."""
        name = f"{edge}^3"
        if shards is not None:
            name = f"sharded {name} in {'x'.join(map(str, shards))}"
        return cls(name + (", checksums" if checksum else ""), (edge,) * 3, shards, checksum)


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _zarr_read(path: Path) -> Any:
    return zarr.open_array(path, mode="r")[...]


def _tensorstore_read(path: Path) -> np.ndarray:
    import tensorstore as ts

    driver = "zarr3" if (path / "zarr.json").exists() else "zarr"
    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec, read=True).result().read().result()


def _zarrs_read(path: Path) -> Any:
    with zarr.config.set({"codec_pipeline.path": ZARRS_PIPELINE}):
        return _zarr_read(path)


def write_volume(path: Path, volume: Any, layout: Layout, codec: Any) -> None:
    """Write ``volume`` (numpy or cupy) as a zarr v3 array in ``layout`` with ``codec``."""
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
    """Time the CPU reads of the array at ``path``, each checked against ``volume``."""
    nbytes = volume.nbytes
    same = functools.partial(_equals, volume)
    measure = functools.partial(timer.measure, layout, kind="cpu", op="read", nbytes=nbytes)
    rows = [
        measure(name="linumpy read_volume (CPU)", run=lambda: read_volume(path), check=same),
        measure(name="zarr CPU read", run=lambda: _zarr_read(path), check=same),
    ]
    for name, module, read in (
        ("tensorstore read", "tensorstore", _tensorstore_read),
        ("zarr with the zarrs codec pipeline", "zarrs", _zarrs_read),
    ):
        if _installed(module):
            rows.append(measure(name=name, run=functools.partial(read, path), check=same))
        else:
            note = f"skipped: {module} not installed (the bench extra)"
            rows.append(timer.skip(layout, name, "cpu", "read", note))
    return rows


def _equals(volume: np.ndarray, result: Any) -> bool:
    return isinstance(result, np.ndarray) and np.array_equal(result, volume)


def _equals_on_device(device_volume: Any, result: Any) -> bool:
    import cupy

    return isinstance(result, cupy.ndarray) and bool(cupy.array_equal(result, device_volume))


def gpu_read_rows(timer: Timer, layout: str, path: Path, device_volume: Any) -> list[Row]:
    """Time the GPU reads of the array at ``path``, each checked against ``device_volume``."""
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
    """Time zarr's CPU write of ``volume`` to ``path`` in ``layout`` (it leaves the array the
    reads read; written once, untimed, with ``timed=False``), linumpy's write engine and, given
    ``device_volume``, the GPU writes. Those go to a scratch array beside ``path``, read back on
    the CPU to check them, then removed. Each run writes new files: the last run's are removed
    first, untimed."""
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
