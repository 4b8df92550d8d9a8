"""The paths a user takes to read and write a zarr volume, timed as benchmark rows.

CPU reads: linumpy's ``read_volume``, zarr's own read, tensorstore and zarr with the ``zarrs``
codec pipeline (each when installed; otherwise the row says so). GPU reads:
``read_volume(gpu=True)`` (the fast path), zarr inside ``gpu_zarr_context`` (the nvCOMP codec),
``zarr.config.enable_gpu()`` alone. Writes: zarr's CPU write, and the GPU write (nvCOMP encode
inside ``gpu_zarr_context``). Every read is checked against the volume.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import zarr

from linumpy.bench.files import drop_page_cache
from linumpy.bench.timing import Row, Timer
from linumpy.io import read_volume

__all__ = [
    "Layout",
    "cpu_read_rows",
    "gpu_read_rows",
    "interleaved_read_rows",
    "write_rows",
    "write_volume",
]

ZARRS_PIPELINE = "zarrs.ZarrsCodecPipeline"
#: Names of checksummed layouts end with this (:meth:`Layout.cubic`).
CHECKSUM_SUFFIX = ", checksums"
#: A row of a checksummed layout only: the same path with the crc32c checked on the CPU.
CPU_CHECK_SUFFIX = ", crc32c on the CPU"
#: The CPU reads of a layout with and without checksums, timed in turn
#: (:func:`interleaved_read_rows`).
INTERLEAVED_READ = "linumpy read_volume (CPU), with and without checksums in turn"
#: The same for the GPU reads (with a GPU).
INTERLEAVED_GPU_READ = "read_volume(gpu=True), with and without checksums in turn"
#: Their ``op``: they are left out of the tables and charts of reads, which they repeat.
INTERLEAVED_OP = "read in turn"


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


def cpu_read_rows(
    timer: Timer, layout: str, path: Path, volume: np.ndarray, *, cold: bool = False
) -> list[Row]:
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
    if cold:
        rows.append(
            measure(
                name="linumpy read_volume (CPU), cold",
                run=lambda: read_volume(path),
                check=same,
                before=functools.partial(drop_page_cache, path),
                warmup=0,
                cold=True,
                note="cold cache (posix_fadvise DONTNEED)",
            )
        )
    return rows


def _equals(volume: np.ndarray, result: Any) -> bool:
    return isinstance(result, np.ndarray) and np.array_equal(result, volume)


def _equals_on_device(device_volume: Any, result: Any) -> bool:
    import cupy

    return isinstance(result, cupy.ndarray) and bool(cupy.array_equal(result, device_volume))


def interleaved_read_rows(
    timer: Timer,
    plain: tuple[str, Path],
    checked: tuple[str, Path],
    volume: np.ndarray,
    device_volume: Any = None,
) -> list[Row]:
    """Time the CPU reads of a layout without checksums and of the same with them in turn
    (:meth:`Timer.measure_interleaved`): a row for each, named :data:`INTERLEAVED_READ` (``op``
    :data:`INTERLEAVED_OP`), whose ratio is the checksums' cost even on a machine whose speed
    drifts between rows. With ``device_volume`` (the volume on the GPU), the GPU reads too, in
    rows named :data:`INTERLEAVED_GPU_READ`.

    ``plain`` and ``checked`` are each a layout's name and its array's path.

    Examples
    --------
    >>> import tempfile, zarr
    >>> from pathlib import Path
    >>> from linumpy.bench import Layout, Timer, oct_volume, write_volume
    >>> from linumpy.bench.rows import interleaved_read_rows
    >>> volume, root = oct_volume((16, 16, 16)), Path(tempfile.mkdtemp())
    >>> for name, checksum in (("a", False), ("b", True)):
    ...     write_volume(root / name, volume, Layout.cubic(8, 3),
    ...                  zarr.codecs.ZstdCodec(checksum=checksum))
    >>> rows = interleaved_read_rows(Timer(warmup=0, repeats=2), ("8^3", root / "a"),
    ...                              ("8^3, checksums", root / "b"), volume)
    >>> [(row.layout, row.runs, row.matches) for row in rows]
    [('8^3', 2, True), ('8^3, checksums', 2, True)]
    """
    pair = (plain, checked)
    cases = [(name, functools.partial(read_volume, path)) for name, path in pair]
    same = functools.partial(_equals, volume)
    rows = timer.measure_interleaved(
        cases, INTERLEAVED_READ, "cpu", INTERLEAVED_OP, nbytes=volume.nbytes, check=same
    )
    if device_volume is not None:
        cases = [(name, functools.partial(read_volume, path, gpu=True)) for name, path in pair]
        rows += timer.measure_interleaved(
            cases,
            INTERLEAVED_GPU_READ,
            "gpu",
            INTERLEAVED_OP,
            nbytes=volume.nbytes,
            check=functools.partial(_equals_on_device, device_volume),
        )
    return rows


def _report_note(row: Row) -> None:
    """Attach the fast path's own report of its last read to ``row``."""
    from linumpy.gpu.zarr_io import last_read_report

    report = last_read_report()
    if report is None or not row.runs:
        return
    row.extra = asdict(report) if is_dataclass(report) else {"report": repr(report)}
    extra = row.extra
    parts = [f"{extra.get('path')} path, reader {extra.get('reader')}"]
    if "n_batches" in extra:
        parts.append(f"{extra['n_batches']} batches")
    if "device_extra_bytes" in extra:
        parts.append(
            f"device memory beyond the output {extra['device_extra_bytes'] / 2**20:.0f} MiB"
        )
    phases = extra.get("phases")
    if isinstance(phases, dict) and phases:
        parts.append("last run, ms: " + ", ".join(f"{k} {1e3 * v:.1f}" for k, v in phases.items()))
    row.note = "; ".join([row.note, *parts] if row.note else parts)


def _crc32c_on_the_cpu(run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` with GPU reads checking stored crc32c on the reading threads, not the device."""
    from linumpy.gpu import read_checks

    def checked() -> Any:
        before, read_checks.CRC32C_WHERE = read_checks.CRC32C_WHERE, "cpu"
        try:
            return run()
        finally:
            read_checks.CRC32C_WHERE = before

    return checked


def gpu_read_rows(
    timer: Timer,
    layout: str,
    path: Path,
    device_volume: Any,
    *,
    fetch: Sequence[str] = ("auto",),
    cold: bool = False,
    checksum: bool = False,
) -> list[Row]:
    """Time the GPU reads of the array at ``path``, each checked against ``device_volume``.

    ``fetch`` lists the file readers of the fast path to time (``"auto"``: the settings in
    force; ``"pread"``, ``"kvikio"``: passed as ``settings={"fetch": ...}``). With
    ``checksum`` (the array stores crc32c), the fast path is also timed with the crc32c checked
    on the CPU (:data:`~linumpy.gpu.read_checks.CRC32C_WHERE` ``"cpu"``), beside the default
    (on the device where nvCOMP can).

    Examples
    --------
    >>> rows = gpu_read_rows(timer, "64^3", path, device_volume)  # doctest: +SKIP
    >>> [row.name for row in rows]  # doctest: +SKIP
    ['read_volume(gpu=True)', 'gpu_zarr_context (nvCOMP codec in zarr)', 'zarr enable_gpu()']
    """
    from linumpy.gpu.zarr_io import gpu_zarr_context

    same = functools.partial(_equals_on_device, device_volume)
    nbytes = int(device_volume.nbytes)
    measure = functools.partial(timer.measure, layout, kind="gpu", op="read", nbytes=nbytes)

    def fast(fetch: str, **more: str) -> Callable[[], Any]:
        settings = ({} if fetch == "auto" else {"fetch": fetch}) | more
        return lambda: read_volume(path, gpu=True, settings=settings or None)

    rows = []
    for reader in fetch:
        name = "read_volume(gpu=True)" + ("" if reader == "auto" else f", fetch={reader}")
        rows.append(measure(name=name, run=fast(reader), check=same))
        _report_note(rows[-1])
        if checksum:
            run = _crc32c_on_the_cpu(fast(reader))
            rows.append(measure(name=name + CPU_CHECK_SUFFIX, run=run, check=same))
            _report_note(rows[-1])

    def in_context() -> Any:
        with gpu_zarr_context():
            return _zarr_read(path)

    def enable_gpu() -> Any:
        with zarr.config.enable_gpu():
            return _zarr_read(path)

    rows.append(measure(name="gpu_zarr_context (nvCOMP codec in zarr)", run=in_context, check=same))
    name = "zarr enable_gpu() (CPU decode, copy per chunk)"
    rows.append(measure(name=name, run=enable_gpu, check=same))
    if cold:
        rows.append(
            measure(
                name="read_volume(gpu=True), cold",
                run=fast("auto"),
                check=same,
                before=functools.partial(drop_page_cache, path),
                warmup=0,
                cold=True,
                note="cold cache (posix_fadvise DONTNEED)",
            )
        )
        _report_note(rows[-1])
    return rows


@contextlib.contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remover(path: Path) -> Callable[[], None]:
    """Untimed, before each run of a write row: the last run's output goes, so that every run
    writes new files (as the write ceiling does) and none pays for deleting the one before."""
    return functools.partial(shutil.rmtree, path, ignore_errors=True)


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
    beside ``path``, read back on the CPU to check them, then removed.

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
    rows = [
        timer.measure(
            layout.name,
            "zarr CPU write",
            "cpu",
            "write",
            lambda: write_volume(path, volume, layout, cpu_codec),
            nbytes=volume.nbytes,
            warmup=0,
            before=_remover(path),
        )
    ]

    def checked(row: Row, target: Path) -> Row:
        if row.runs:
            row.matches = bool(np.array_equal(_zarr_read(target), volume))
            row.note = "; ".join(filter(None, [row.note, "checked by reading it back on the CPU"]))
        return row

    with _scratch(path.with_name(path.name + ".engine-write")) as target:
        name = "linumpy CPU write (write engine)"
        run = functools.partial(_engine_write, target, volume, layout, cpu_codec)
        rows.append(
            checked(
                timer.measure(
                    layout.name,
                    name,
                    "cpu",
                    "write",
                    run,
                    nbytes=volume.nbytes,
                    before=_remover(target),
                ),
                target,
            )
        )
    if device_volume is None:
        return rows
    from linumpy.gpu.nvcomp_zstd import NvcompZstdCodec
    from linumpy.gpu.zarr_io import gpu_zarr_context

    with _scratch(path.with_name(path.name + ".gpu-engine-write")) as target:
        name = "linumpy GPU write (nvCOMP, write engine)"
        run = functools.partial(_engine_write, target, device_volume, layout, cpu_codec)
        row = timer.measure(
            layout.name, name, "gpu", "write", run, nbytes=volume.nbytes, before=_remover(target)
        )
        rows.append(checked(row, target))

    def gpu_write() -> None:
        with gpu_zarr_context():
            codec = _codecs(NvcompZstdCodec, zstd_level, layout.checksum)
            write_volume(target, device_volume, layout, codec)

    with _scratch(path.with_name(path.name + ".gpu-write")) as target:
        name = "GPU write (nvCOMP encode in gpu_zarr_context)"
        row = timer.measure(
            layout.name,
            name,
            "gpu",
            "write",
            gpu_write,
            nbytes=volume.nbytes,
            before=_remover(target),
        )
        rows.append(checked(row, target))
    return rows
