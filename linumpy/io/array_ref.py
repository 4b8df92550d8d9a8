"""Arrays as dask tasks read them: opened once on the client (:func:`array_ref`), pickled to
the tasks with their store and parsed metadata, read without opening anything again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from linumpy.io.omezarr import open_array
from linumpy.io.reader import read_opened
from linumpy.io.stores import SourceLike, describe, parse_source
from linumpy.parallel.task_inputs import check_same_input, input_digest, task_path

__all__: list[str] = []


@dataclass(frozen=True, slots=True)
class ArrayRef:
    """An array opened on the client, for tasks to read (see the module)."""

    array: zarr.Array
    source: str
    path: str = ""
    digest: str | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return tuple(self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype."""
        return np.dtype(self.array.dtype)

    def read(
        self,
        region: slice | Sequence[slice] | None = None,
        *,
        gpu: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> Any:
        """``read_volume`` of the array's ``region`` (numpy, or cupy with ``gpu``), opening
        nothing; the first read of a worker process checks that it sees the client's files."""
        check_same_input(self.path, self.digest)
        destination = "gpu" if gpu else "cpu"
        return read_opened(destination, self.array, self.source, region=region, settings=settings)

    def __dask_tokenize__(self) -> tuple[Any, ...]:
        """What names the array in dask's graph: its name, store path, digest and layout."""
        layout = (self.shape, self.dtype.str, str(self.array.store_path))
        return ("ArrayRef", self.source, self.path, self.digest, layout)


def array_ref(
    path: SourceLike | ArrayRef,
    level: int = 0,
    *,
    storage_options: Mapping[str, Any] | None = None,
    opened: zarr.Array | None = None,
) -> ArrayRef:
    """Open ``path``'s level once, for tasks to read (as :func:`~linumpy.io.open_array`; an
    :class:`ArrayRef` is returned as it is): a local path made absolute, with its metadata's digest
    for the workers' check; ``opened`` is the level opened already."""
    if isinstance(path, ArrayRef):
        return path
    options = dict(storage_options) if storage_options is not None else None
    local = parse_source(path, options).local
    if local is None:
        array = opened if opened is not None else open_array(path, level, storage_options=options)
        return ArrayRef(array, f"{describe(path)} (level {level})")
    absolute = task_path(local)
    array = opened if opened is not None else open_array(absolute, level)
    source = f"{describe(absolute)} (level {level})"
    return ArrayRef(array, source, absolute, input_digest(absolute))
