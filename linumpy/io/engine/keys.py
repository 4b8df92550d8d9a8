"""Store keys of chunks: the file of each chunk of a zarr array, and the names of a read plan's
entries in errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__: list[str] = []


def chunk_keys(metadata: Any, coords: np.ndarray, prefix: str = "") -> list[str]:
    """``prefix`` + the store key of each chunk in ``coords`` (one row per chunk).

    zarr's two standard key encodings are built here from each axis' numbers written once
    (asking zarr's ``encode_chunk_key`` chunk by chunk would be most of a read's planning); any
    other encoding is asked chunk by chunk.
    """
    encoding = getattr(metadata, "chunk_key_encoding", None)
    # The standard encodings are told apart by their JSON name, as zarr's metadata spells them.
    name = encoding.to_dict().get("name") if encoding is not None else None
    if encoding is None:  # zarr v2 metadata: its dimension separator between the numbers
        separator, start = metadata.dimension_separator, ""
    elif name in ("default", "v2"):
        separator = encoding.separator
        start = "c" + separator if name == "default" else ""
    else:
        return [prefix + metadata.encode_chunk_key(tuple(c)) for c in coords.tolist()]
    if coords.shape[1] == 0:  # a 0-d array: one chunk, keyed "c" (default) or "0" (v2)
        return [prefix + (start[:1] or "0")] * len(coords)
    columns = []
    for column in coords.T:  # each distinct number written once (a far region: few of them)
        values, inverse = np.unique(column, return_inverse=True)
        names = [str(v) for v in values.tolist()]
        columns.append([names[i] for i in inverse.reshape(-1).tolist()])
    start = prefix + start
    return [start + separator.join(parts) for parts in zip(*columns)]


@dataclass(frozen=True, slots=True)
class EntryKeys:
    """The names of some plan entries, made only when an error asks for one
    (``keys[i]`` or ``keys(i)``: the name of ``entries[i]``).
    """

    plan: Any  # a ReadPlan
    entries: np.ndarray

    def __getitem__(self, i: int) -> str:
        return self.plan.key(int(self.entries[i]))

    __call__ = __getitem__
