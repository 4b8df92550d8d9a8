"""crc32c checked on the GPU before nvCOMP decodes (linumpy.gpu.crc_device), and the corruption
fuzz of benchmarks/gpu_fuzz.py (its CPU smoke run here; the GPU run is a benchmark)."""

from __future__ import annotations

import importlib.util
import json
import sys
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import numpy as np
import pytest
from zarr_layouts import SHAPE, make_array, sample_data

from linumpy.errors import ChunkDecodeError
from linumpy.gpu.crc_device import standin_frame
from linumpy.io.engine.codecs import zstd
from linumpy.io.engine.crc import crc32c
from linumpy.io.engine.fetch import chunk_sizes
from linumpy.io.engine.plan import plan_read

ROOT = Path(__file__).resolve().parent.parent
CHUNKS = (8, 16, 16)
LAYOUTS = ("v3", "v3-sharded")
# One group (every chunk in one nvCOMP call), or many small groups on several streams.
ONE_GROUP: dict[str, Any] = {"where": "device"}
SMALL_GROUPS = {"where": "device", "pinned": 8192, "settings": {"scratch_bytes": 65536}}
ON_THE_CPU = {"where": "cpu"}


def _read(path: Path, case: dict[str, Any], **kwargs: Any) -> Any:
    """``read_zarr_to_gpu(path)`` with the crc32c checked where ``case`` says, in its groups
    (on the CPU: as where nvCOMP has no CRC32)."""
    from linumpy.gpu import pinned_buffers, read_checks
    from linumpy.gpu.zarr_io import read_zarr_to_gpu

    with ExitStack() as stack:
        if case["where"] == "cpu":
            no_crc = mock.patch.object(read_checks, "crc32c_unavailable_reason", lambda: "none")
            stack.enter_context(no_crc)
        if "pinned" in case:
            stack.enter_context(mock.patch.object(pinned_buffers, "_FIXED_BYTES", case["pinned"]))
        return read_zarr_to_gpu(path, settings=case.get("settings"), **kwargs)


def _fuzz() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_fuzz", ROOT / "benchmarks" / "gpu_fuzz.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  # its dataclasses look it up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_standin_frame_decodes_to_zeros_of_the_chunk_size() -> None:
    for nbytes in (1, 4096, 3 * 2**20 + 5):
        frame = standin_frame(zstd, nbytes)
        decoded = zstd.decode(frame, key="standin", expected_size=nbytes)
        assert decoded.nbytes == nbytes and not decoded.any()
        assert frame.nbytes < 64 + nbytes // 1000


def test_fuzz_on_the_cpu_reads_nothing_wrong(tmp_path: Path) -> None:
    """The fuzz's CPU smoke run: every corruption of checksummed data raises, naming its chunk."""
    report = tmp_path / "fuzz.json"
    argv = ["--cpu", "--n", "8", "--shape", "128", "256", "256", "--shard", "128", "256", "256"]
    assert _fuzz().main([*argv, "--json", str(report), "--workdir", str(tmp_path)]) == 0
    counts = json.loads(report.read_text())
    assert len(counts["layouts"]) == 4
    for layout, outcome in counts["layouts"].items():
        assert outcome["error"] == 8, (layout, outcome)  # each kind twice, each one caught
        assert {outcome[kind] for kind in ("flip", "truncate", "append", "swap")} == {2}
    assert not any(counts["total"].values()), counts["total"]


def test_fuzz_finds_wrong_reads_without_checksums(tmp_path: Path) -> None:
    """The same fuzz on plain zstd (no checksums): flipped bytes read back wrong, and it says so."""
    report = tmp_path / "fuzz.json"
    argv = ["--cpu", "--n", "24", "--shape", "128", "256", "256", "--layouts", "1"]
    status = _fuzz().main([*argv, "--no-checksums", "--json", str(report)])
    assert status == 1
    assert json.loads(report.read_text())["total"]["WRONG read"] > 0


def _victims(
    tmp_path: Path, layout: str, count: int
) -> tuple[Path, np.ndarray, list[str], list[tuple[slice, ...]]]:
    """A checksummed array whose stored chunks 3, 9, ... (``count`` of them) have one payload
    byte flipped (their frame headers stay valid: only the crc32c can tell); their keys and
    their regions of the array."""
    data = sample_data(SHAPE, "uint16")
    path = tmp_path / f"{layout}.zarr"
    plan = plan_read(make_array(path, layout, data, chunks=CHUNKS, crc32c=True, checksum=True))
    sizes = chunk_sizes(plan)
    keys, regions = [], []
    for entry in np.flatnonzero(sizes > 0)[3::6][:count].tolist():
        file = Path(plan.files[plan.file_index[entry]])
        raw = bytearray(file.read_bytes())
        raw[int(plan.offsets[entry]) + int(sizes[entry]) // 2] ^= 0x20
        file.write_bytes(bytes(raw))
        keys.append(plan.key(entry))
        origin = plan.coords[entry] * np.array(CHUNKS)
        regions.append(tuple(slice(int(o), int(o) + n) for o, n in zip(origin, CHUNKS)))
    return path, data, keys, regions


@pytest.mark.gpu
def test_device_crc32c_matches_the_crc32c_package() -> None:
    import cupy

    from linumpy.gpu.crc_device import crc32c_device

    rng = np.random.default_rng(5)
    sizes = np.array([1, 3, 4, 31, 32, 33, 1000, 4096, 65_537, 333_333, 2**21 + 7])
    offsets = np.concatenate([[5], 5 + np.cumsum(sizes[:-1] + 3)])  # odd, unaligned starts
    host = rng.integers(0, 256, size=int(offsets[-1] + sizes[-1] + 9), dtype=np.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        device = cupy.asarray(host)
        table = cupy.asarray(np.stack([int(device.data.ptr) + offsets, sizes]).astype(np.int64))
        computed = cupy.empty(len(sizes), dtype=np.uint32)
    address = int(table.data.ptr)
    n = len(sizes)
    crc32c_device(
        address, address + 8 * n, n, int(computed.data.ptr), largest=int(sizes.max()), stream=stream
    )
    stream.synchronize()
    expected = [crc32c(host[o : o + n]) for o, n in zip(offsets.tolist(), sizes.tolist())]
    assert computed.get().tolist() == expected
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("settings", [ONE_GROUP, SMALL_GROUPS], ids=["one-group", "groups"])
def test_a_corrupt_chunk_among_good_ones_is_named_and_they_decode_right(
    tmp_path: Path, layout: str, settings: dict
) -> None:
    import cupy

    path, data, keys, regions = _victims(tmp_path, layout, 2)
    out = cupy.full(data.shape, 7, data.dtype)
    with pytest.raises(ChunkDecodeError, match="crc32c checksum mismatch") as info:
        _read(path, settings, out=out)
    # the first damaged chunk in read order (file order, not grid order, for shards)
    assert info.value.key in keys, (info.value.key, keys)
    assert "checked on the GPU" in info.value.reason
    # Every group was decoded before the error was raised: the damaged chunks from the
    # stand-in frame (zeros), the good ones beside them, in the same nvCOMP calls, right.
    got = cupy.asnumpy(out)
    bad = np.zeros(data.shape, bool)
    for region in regions:
        bad[region] = True
        assert not got[region].any()
    np.testing.assert_array_equal(got[~bad], data[~bad])


@pytest.mark.gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_reads_after_a_corrupt_one_succeed(tmp_path: Path, layout: str) -> None:
    import cupy

    from linumpy.gpu.zarr_io import last_read_report

    path, data, keys, _ = _victims(tmp_path, layout, 1)
    for settings in (ONE_GROUP, SMALL_GROUPS, ON_THE_CPU):
        with pytest.raises(ChunkDecodeError, match="crc32c checksum mismatch") as info:
            _read(path, settings)
        assert info.value.key == keys[0]
    good = tmp_path / "good.zarr"
    make_array(good, layout, data, chunks=CHUNKS, crc32c=True, checksum=True)
    for settings in (ONE_GROUP, SMALL_GROUPS):
        np.testing.assert_array_equal(cupy.asnumpy(_read(good, settings)), data)
        phases = last_read_report().phases
        assert phases["crc32c_device"] > 0 and phases["xxh64_device"] > 0, phases
    np.testing.assert_array_equal(cupy.asnumpy(_read(good, ONE_GROUP)), data)


@pytest.mark.gpu
def test_a_corrupt_content_checksum_is_caught_after_the_device_crc32c(tmp_path: Path) -> None:
    """A frame whose crc32c was recomputed over a changed stored content checksum: the crc32c
    passes, nvCOMP decodes the frame, and the XXH64 kernel names the chunk."""

    data = sample_data(SHAPE, "uint16")
    path = tmp_path / "a.zarr"
    plan = plan_read(make_array(path, "v3", data, chunks=CHUNKS, crc32c=True, checksum=True))
    entry = int(np.flatnonzero(chunk_sizes(plan) > 0)[2])
    file = Path(plan.files[plan.file_index[entry]])
    raw = bytearray(file.read_bytes())
    raw[-5] ^= 0x01  # the last byte of the zstd content checksum, before the crc32c
    raw[-4:] = crc32c(bytes(raw[:-4])).to_bytes(4, "little")
    file.write_bytes(bytes(raw))
    with pytest.raises(ChunkDecodeError, match="content checksum mismatch") as info:
        _read(path, ONE_GROUP)
    assert info.value.key == plan.key(entry)
