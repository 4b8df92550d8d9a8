"""Corruption fuzz over what linumpy writes (zstd frames with content checksums, the default):
random byte flips, truncations and appended bytes in chunk and shard files never read back as
wrong values. Each read of a corrupted image raises ChunkDecodeError or LinumpyError, or returns
exactly the original data.

``LINUMPY_FUZZ_N`` sets the corruptions per layout (default 200).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from zarr_layouts import sample_data

from linumpy.errors import ChunkDecodeError, LinumpyError
from linumpy.io import read_volume, save_omezarr

N_CORRUPTIONS = int(os.environ.get("LINUMPY_FUZZ_N", "200"))
LAYOUTS = {
    "chunks-3d": dict(chunks=(16, 16, 16), shards=None),
    "sharded": dict(chunks=(8, 16, 16), shards=(16, 32, 32)),
    "v2": dict(chunks=(16, 16, 16), ngff_version="0.4"),
}


def corrupt(raw: bytes, kind: str, rng: np.random.Generator) -> bytes:
    """``raw`` with 1 to 3 bytes flipped, cut short, or with 1 to 64 random bytes appended."""
    if kind == "flip":
        data = bytearray(raw)
        for position in rng.choice(
            len(data), size=min(len(data), rng.integers(1, 4)), replace=False
        ):
            data[position] ^= int(rng.integers(1, 256))
        return bytes(data)
    if kind == "truncate":
        return raw[: int(rng.integers(0, len(raw)))]
    return raw + rng.integers(0, 256, size=int(rng.integers(1, 65)), dtype=np.uint8).tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_corrupted_checksummed_writes_never_read_wrong(tmp_path: Path, layout: str) -> None:
    data = sample_data((32, 48, 48), "uint16")
    path = tmp_path / "img.ome.zarr"
    save_omezarr(data, path, voxel_size=(1, 1, 1), **LAYOUTS[layout])
    files = sorted(p for p in (path / "0").rglob("*") if p.is_file() and p.name.isdigit())
    assert len(files) >= 4
    rng = np.random.default_rng(12)
    outcomes: Counter[str] = Counter()
    wrong = []
    for trial in range(N_CORRUPTIONS):
        kind = ("flip", "truncate", "append")[trial % 3]
        chunk = files[int(rng.integers(len(files)))]
        raw = chunk.read_bytes()
        chunk.write_bytes(corrupt(raw, kind, rng))
        try:
            result = read_volume(path)
        except (ChunkDecodeError, LinumpyError):
            outcomes[f"{kind}: error"] += 1
        else:
            same = np.array_equal(result, data)
            outcomes[f"{kind}: {'original' if same else 'WRONG'}"] += 1
            if not same:
                wrong.append((trial, kind, chunk.relative_to(path).as_posix()))
        finally:
            chunk.write_bytes(raw)
    assert not wrong, f"wrong reads (trial, corruption, file): {wrong}; all: {dict(outcomes)}"
    assert sum(outcomes.values()) == N_CORRUPTIONS
    # the corruptions were real: nearly all of them are caught
    errors = sum(n for key, n in outcomes.items() if key.endswith("error"))
    assert errors >= 0.9 * N_CORRUPTIONS, dict(outcomes)
    np.testing.assert_array_equal(read_volume(path), data)
    print(f"{layout}: {dict(sorted(outcomes.items()))}")
