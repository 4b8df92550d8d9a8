"""Writing OME-Zarr images block by block, then the pyramid (:class:`OmeZarrWriter`); a
replacement is staged beside the old image and swapped in once complete.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import numpy as np
import zarr
from zarr.storage import LocalStore

from linumpy import phases, settings
from linumpy.errors import LinumpyError
from linumpy.io.block_write import store_block
from linumpy.io.downsample import downsample_mean
from linumpy.io.durable import flush_folder, flush_tree
from linumpy.io.formats import writable_format
from linumpy.io.layout import SHARD_BYTES, ShardsArg, default_layout, slab_shards
from linumpy.io.metadata import (
    Axis,
    NgffVersion,
    check_chunk_count,
    image_attrs,
    level_translation,
    make_axes,
    parse_voxel_size,
)
from linumpy.io.ngff_validation import validate_image_attrs
from linumpy.io.remote import is_url
from linumpy.io.staging import StagedWrite, flushed_on_commit, recover_staging
from linumpy.io.stores import UrlPath, open_store, parse_source

__all__ = ["OmeZarrWriter"]


logger = logging.getLogger(__name__)


def _levels(
    shape: tuple[int, ...], n_levels: int, shrink: Sequence[bool]
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each level's shape and downsampling factor: space axes halve while longer than 1."""
    levels = [(shape, (1,) * len(shape))]
    for _ in range(n_levels - 1):
        last, factor = levels[-1]
        halved = [k and n > 1 for n, k in zip(last, shrink)]
        next_shape = tuple(-(-n // 2) if h else n for n, h in zip(last, halved))
        levels.append((next_shape, tuple(f * 2 if h else f for f, h in zip(factor, halved))))
    return levels


AxesArg = str | Sequence[str | Axis | Mapping[str, Any]] | None


class OmeZarrWriter:
    """Write an OME-Zarr image block by block, then build its pyramid.

    The image and every level's array are created up front (with the multiscales metadata);
    ``writer[region] = block`` writes full-resolution data; :meth:`finalize` computes levels
    1 to ``n_levels - 1`` by 2x mean downsampling of the space axes. Writes whose regions align
    with the chunks (or with the shards, when sharded) are the fast ones: a partial chunk or shard
    is read back and rewritten.

    Replacing an existing image is atomic: the new image is written in a staging directory beside
    it (:attr:`path`) and swapped in at :meth:`commit` (called by :meth:`finalize` and at the end
    of a ``with`` block); until then the old image stays readable and intact, and an exception in
    the ``with`` block, a kill or a writer never committed leaves it as it was (see
    :mod:`linumpy.io.staging`). A new image is written in place (``path`` is the target; it is
    deleted on an exception in the ``with`` block), or staged too with ``always_stage``.

    Parameters
    ----------
    path
        The image's top-level directory.
    shape, dtype
        Shape and dtype of the full-resolution data (2 to 5 axes).
    voxel_size
        Size of a voxel along each axis, in its unit (1 for time and channel axes).
    chunks
        (Inner) chunk shape; by default about 1 MiB per chunk, shaped by the dtype
        (:func:`linumpy.io.layout.inner_chunks`; within ``shards`` when those are given).
        Shapes cutting the image into millions of tiny chunks are refused
        (:func:`~linumpy.io.metadata.check_chunk_count`).
    shards
        Shard shape (NGFF 0.5 only), a multiple of ``chunks``; ``"auto"`` (the default): slabs
        of whole planes up to 128 MiB (:func:`linumpy.io.layout.slab_shards`, computed for each
        level), none for NGFF 0.4; None: one file per chunk.
    n_levels
        Number of pyramid levels, full resolution included.
    zstd_level
        zstd compression level; by default ``linumpy.settings.get().zstd_level``
        (``LINUMPY_ZSTD_LEVEL``).
    overwrite
        Replace an existing ``path``; without it an existing path is an error.
    ngff_version
        ``"0.5"`` (zarr v3) or ``"0.4"`` (zarr v2, for older tools).
    unit
        Unit of the space axes named in ``axes`` without a unit of their own.
    fill_value
        Value of regions never written.
    axes
        Axis names (``"cyx"``), or :class:`~linumpy.io.metadata.Axis` entries with types and
        units (as :func:`~linumpy.io.omezarr.read_axes` returns them); by default the last
        axes of ``tczyx``.
    always_stage
        Stage a new image too, so that nothing appears under ``path`` before :meth:`commit` (an
        interrupted write of a new image then leaves nothing under its name). The caller must
        commit: :meth:`finalize`, :meth:`commit` or the end of a ``with`` block.
    storage_options
        For an ``s3://`` or ``gs://`` path: the remote store's options (see
        :func:`linumpy.io.remote.object_store`). Such an image is written in place (object
        stores cannot swap one in): an old image's metadata is deleted first, the new chunks
        written, the new metadata last at :meth:`commit`, so that an interrupted write never
        reads as an image (:mod:`linumpy.io.remote_write`); deleted if the write fails;
        ``http(s)://`` is refused.
    checksum
        Store a zstd content checksum (XXH64) in every chunk, verified on every read; by default
        ``linumpy.settings.get().write_checksum`` (True unless ``LINUMPY_ZSTD_CHECKSUM=0``).
    translation
        Position of the first voxel along each axis, in its unit (NGFF ``translation``); none
        by default. Pyramid levels get theirs moved to their first voxel's centre.
    shard_bytes
        Largest shard of ``shards="auto"`` (:data:`linumpy.io.layout.SHARD_BYTES`, 128 MiB):
        writers under a memory limit pass less, so that a task holds a shard.

    Attributes
    ----------
    target
        The image's final path.
    path
        Where the image is being written: ``target``, or its staging copy until :meth:`commit`.

    Examples
    --------
    >>> import numpy as np, tempfile
    >>> path = tempfile.mkdtemp() + "/tiles.ome.zarr"
    >>> with OmeZarrWriter(path, (8, 16, 16), np.uint8, voxel_size=(1, 1, 1),
    ...                    chunks=(8, 8, 8), n_levels=2) as writer:
    ...     writer[:, :8, :8] = np.full((8, 8, 8), 3, np.uint8)
    >>> from linumpy.io import read_omezarr
    >>> read_omezarr(path, level=1)[0].shape
    (4, 8, 8)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        shape: Sequence[int],
        dtype: np.typing.DTypeLike,
        *,
        voxel_size: Sequence[float],
        chunks: Sequence[int] | None = None,
        shards: ShardsArg = "auto",
        n_levels: int = 1,
        zstd_level: int | None = None,
        overwrite: bool = False,
        ngff_version: NgffVersion = "0.5",
        unit: str = "micrometer",
        fill_value: Any = 0,
        axes: AxesArg = None,
        checksum: bool | None = None,
        always_stage: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        shard_bytes: int = SHARD_BYTES,
        translation: Sequence[float] | None = None,
    ) -> None:
        # Object stores (s3://, gs://) have no rename: an image is written there in place.
        remote = is_url(path)
        source = parse_source(path, storage_options) if remote else None
        self._remote = open_store(source, writable=True) if source is not None else None
        self.target = UrlPath(os.fspath(path).rstrip("/")) if remote else Path(path)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "biufc":  # strings, objects, dates: zarr cannot read them back
            raise ValueError(f"{self.target}: dtype {self.dtype} is not a number type")
        if 0 in self.shape:
            raise ValueError(f"{self.target}: shape {self.shape} has an empty axis (no voxel)")
        self.format = writable_format(ngff_version)
        self.ngff_version: NgffVersion = self.format.version  # type: ignore[assignment]
        self.voxel_size = parse_voxel_size(voxel_size, len(self.shape))
        self.axes = make_axes(len(self.shape), axes, unit)
        self.translation = None if translation is None else tuple(float(v) for v in translation)
        if self.translation is not None and (
            len(self.translation) != len(self.shape) or not all(np.isfinite(self.translation))
        ):
            ndim = len(self.shape)
            raise ValueError(f"translation must hold {ndim} finite numbers, got {translation}")
        self.checksum = settings.get().write_checksum if checksum is None else bool(checksum)
        if zstd_level is None:
            zstd_level = settings.get().zstd_level
        space = [i for i, axis in enumerate(self.axes) if axis.type == "space"]
        auto_shards = isinstance(shards, str)
        chunks, shards = default_layout(
            self.shape,
            self.dtype,
            chunks=chunks,
            shards=shards,
            ngff_version=self.ngff_version,
            space=space,
            what=str(self.target),
        )
        self._shard_bytes = int(shard_bytes)
        if auto_shards and self.format.sharding:
            shards = "auto"  # computed for each level's shape
        if not isinstance(n_levels, int) or n_levels < 1:
            raise ValueError(f"n_levels must be a positive integer, got {n_levels!r}")
        useful = 1 + max(
            (math.ceil(math.log2(n)) for n, a in zip(self.shape, self.axes) if a.type == "space"),
            default=0,
        )
        if n_levels > useful:  # more would be copies of a 1-voxel level
            logger.warning(
                "%s: n_levels %d: the image is 1 voxel wide at level %d; writing %d levels",
                self.target,
                n_levels,
                useful - 1,
                useful,
            )
            n_levels = useful
        check_chunk_count(self.shape, chunks, self.dtype.itemsize)
        self._staged: StagedWrite | None = None
        self._finalized = self._committed = self._created = False
        if self._remote is not None:
            from linumpy.io.remote import holds_zarr

            exists = holds_zarr(self._remote.store, self.target)
        else:
            recover_staging(self.target)
            exists = self.target.exists() or self.target.is_symlink()
        if exists and not overwrite:
            raise LinumpyError(f"{self.target} exists; pass overwrite=True to replace it")
        self.path = self.target
        try:  # from the staging folder's creation on, an interrupt aborts the write
            if self._remote is None and (exists or always_stage):
                self._staged = StagedWrite(self.target)
                self.path = self._staged.path
            self.arrays = self._create(chunks, shards, n_levels, zstd_level, fill_value)
        except BaseException:
            self.abort()
            raise

    def _create(
        self,
        chunks: tuple[int, ...],
        shards: tuple[int, ...] | str | None,
        n_levels: int,
        zstd_level: int,
        fill_value: Any,
    ) -> list[zarr.Array]:
        zarr_format = self.format.zarr_format
        if self._remote is not None:  # an image there may go: overwrite was checked
            from linumpy.io.remote_write import MetadataLastStore, remove_image

            # the old image stops being one before anything else; the new one's metadata
            # waits for commit(), after its chunks (linumpy.io.remote_write)
            remove_image(self._remote.store, str(self.target))
            self._deferred = MetadataLastStore(self._remote)
            group = zarr.open_group(store=self._deferred, mode="w", zarr_format=zarr_format)
        else:
            group = zarr.open_group(store=LocalStore(self.path), mode="w-", zarr_format=zarr_format)
        self._created = True  # from here on, abort() deletes what was written in place
        shrink = [axis.type == "space" for axis in self.axes]
        arrays: list[zarr.Array] = []
        scales: list[list[float]] = []
        translations: list[list[float]] = []
        for index, (level_shape, factor) in enumerate(_levels(self.shape, n_levels, shrink)):
            level_chunks = tuple(min(c, s) for c, s in zip(chunks, level_shape))
            level_shards = None
            if shards == "auto":
                space = [i for i, k in enumerate(shrink) if k]
                level_shards = slab_shards(
                    level_shape,
                    level_chunks,
                    self.dtype,
                    space=space,
                    shard_bytes=self._shard_bytes,
                )
            elif shards is not None:
                level_shards = tuple(
                    min(sh, -(-s // c) * c) for sh, s, c in zip(shards, level_shape, level_chunks)
                )
            arrays.append(
                group.create_array(
                    str(index),
                    shape=level_shape,
                    dtype=self.dtype,
                    chunks=level_chunks,
                    shards=level_shards,
                    fill_value=fill_value,
                    **self.format.array_options(
                        zstd_level, self.checksum, [a.name for a in self.axes]
                    ),
                )
            )
            scales.append([v * f for v, f in zip(self.voxel_size, factor)])
            if self.translation is not None:
                translations.append(level_translation(self.translation, self.voxel_size, factor))
        attrs = image_attrs(
            self.target.name,
            self.axes,
            scales,
            self.format,
            translations if self.translation is not None else None,
        )
        group.attrs.update(attrs)
        try:
            validate_image_attrs(group.attrs.asdict(), zarr_format, self.target)
        except LinumpyError as exc:
            raise LinumpyError(f"{exc}: written by linumpy, this is a bug in linumpy") from None
        return arrays

    @property
    def array(self) -> zarr.Array:
        """The full-resolution array."""
        return self.arrays[0]

    def __setitem__(self, region: Any, block: Any) -> None:
        store_block(self.arrays[0], region, block)

    def finalize(self) -> None:
        """Build pyramid levels 1 and up, each from the level above, then :meth:`commit`.

        Levels are computed block by block (a target shard, or chunk, at a time) in a thread
        pool, so memory stays bounded by a few blocks whatever the image's size. Only the space
        axes are downsampled.
        """
        space = [i for i, axis in enumerate(self.axes) if axis.type == "space"]
        for source, target in zip(self.arrays, self.arrays[1:]):
            _downsample_level(source, target, space)
        self._finalized = True
        self.commit()

    def commit(self) -> None:
        """Move a replacement into place (the old image is deleted); a new image written in place
        is flushed to disk (unless the ``durable`` setting is off).

        For callers that write every pyramid level themselves; :meth:`finalize` commits too.
        """
        if self._remote is not None:  # written in place: the metadata last, nothing to move
            if not self._committed:
                self._deferred.flush()
        elif self._staged is not None and not self._committed:
            self._staged.commit()
            self.path = self.target
            self.arrays = [
                zarr.open_array(store=self.path / a.path, mode="r+") for a in self.arrays
            ]
        elif (
            not self._committed
            and self._created
            and settings.get().durable
            and not flushed_on_commit(self.path)  # a script's staged output: flushed on its swap
        ):
            flush_tree(self.path)
            flush_folder(self.path.parent)
        self._committed = True

    def abort(self) -> None:
        """Throw away what was written: a replacement's staging copy, or a new image entirely."""
        if self._committed:
            return
        if self._remote is not None and self._created:
            from linumpy.io.remote import delete_all

            delete_all(self._remote.store, self.target)
        elif self._staged is not None:
            self._staged.abort()
        elif self._created:
            shutil.rmtree(self.path, ignore_errors=True)
        self._committed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._finalized:
            self.finalize()
        else:
            self.commit()


@phases.recorded("pyramid")
def _downsample_level(source: zarr.Array, target: zarr.Array, axes: Sequence[int]) -> None:
    factors = [2 if size > 1 and i in axes else 1 for i, size in enumerate(source.shape)]
    block = target.shards or target.chunks

    def build(origin: tuple[int, ...]) -> None:
        out = tuple(slice(o, min(o + b, n)) for o, b, n in zip(origin, block, target.shape))
        value = downsample_mean(
            source[tuple(slice(s.start * f, s.stop * f) for s, f in zip(out, factors))], axes
        )
        store_block(target, out, value, settings={"io_threads": 1})  # the pool is out here

    starts = itertools.product(*(range(0, n, b) for n, b in zip(target.shape, block)))
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
        for _ in pool.map(build, starts):
            pass
