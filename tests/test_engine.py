"""The read engine's CPU stages (linumpy.io.engine): plan, fetch, frames, groups, run.

Real zarr arrays and real files throughout; the GPU back end shares everything here but the
decode and scatter (tests/test_zarr_io.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr_layouts import (
    CHUNKS,
    DTYPES,
    LAYOUTS,
    REGIONS,
    SHAPE,
    make_array,
    read_plan,
    sample_data,
    skippable_frame,
    without_content_size,
    zarr_read,
    zstd_frame,
)

from linumpy.errors import ChunkDecodeError
from linumpy.io.engine.backend import GroupBudget
from linumpy.io.engine.codecs.protocol import FRAME_CHECKSUM, FRAME_GPU, FRAME_NEEDS_CHECK
from linumpy.io.engine.codecs.zstd import check_frames, inspect_chunk
from linumpy.io.engine.cpu import CpuBackend
from linumpy.io.engine.fetch import (
    ALIGN,
    MERGE_GAP,
    align_up,
    chunk_sizes,
    layout_group,
    read_group,
)
from linumpy.io.engine.fetch_kvikio import kvikio_unusable_reason
from linumpy.io.engine.keys import chunk_keys
from linumpy.io.engine.plan import ReadPlan, plan_read
from linumpy.io.engine.run import Fetched, Stats, make_groups, run

READERS = [
    "pread",
    pytest.param(
        "kvikio",
        marks=pytest.mark.skipif(
            kvikio_unusable_reason() is not None, reason=str(kvikio_unusable_reason())
        ),
    ),
]


def _file_bytes(path: str, offset: int, nbytes: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(nbytes)


# --- plan ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("region", REGIONS[:4], ids=["all", "inner", "edges", "thin"])
def test_plan_entries_cover_the_region_once(tmp_path: Path, layout: str, region: object) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks never written
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    plan = plan_read(array, region)  # type: ignore[arg-type]
    covered = np.zeros(plan.shape, dtype=np.int64)
    out_start, out_stop, chunk_start = plan.bounds()
    assert np.all((out_start >= 0) & (out_stop <= np.array(plan.shape)))
    assert np.all(chunk_start + out_stop - out_start <= np.array(plan.chunk_shape))
    for start, stop in zip(out_start.tolist(), out_stop.tolist()):
        covered[tuple(slice(a, b) for a, b in zip(start, stop))] += 1
    assert np.all(covered == 1)


ENCODINGS = [
    (3, None),
    (3, {"name": "default", "separator": "."}),
    (3, {"name": "v2", "separator": "."}),
    (3, {"name": "v2", "separator": "/"}),
    (2, None),
    (2, {"name": "v2", "separator": "/"}),
]


@pytest.mark.parametrize(("zarr_format", "encoding"), ENCODINGS)
@pytest.mark.parametrize(
    ("shape", "chunks"), [((), ()), ((30,), (2,)), ((4, 4), (2, 2)), ((3, 4, 25), (1, 2, 2))]
)
def test_chunk_keys_are_zarrs(
    tmp_path: Path, zarr_format: int, encoding: dict | None, shape: tuple, chunks: tuple
) -> None:
    """The keys built an axis at a time are the ones zarr's metadata encodes, chunk by chunk."""
    options: dict = {"chunks": chunks} if chunks else {}
    if encoding is not None:
        options["chunk_key_encoding"] = encoding
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=shape, dtype="u1", zarr_format=zarr_format, **options
    )
    counts = [-(-s // c) for s, c in zip(shape, chunks)]
    grid = np.indices(counts).reshape(len(shape), -1).T if shape else np.zeros((1, 0), int)
    expected = ["p/" + array.metadata.encode_chunk_key(tuple(c)) for c in grid.tolist()]
    assert chunk_keys(array.metadata, grid, "p/") == expected


# --- the frame check ----------------------------------------------------------------------------

DATA = sample_data((40, 64, 64), "uint16").ravel()  # several 128 KiB blocks per frame


def _frame(data: np.ndarray = DATA, checksum: bool = False) -> bytes:
    return zstd_frame(data, checksum)


def _cases() -> list[bytes]:
    good = _frame()
    with_checksum = _frame(checksum=True)
    half = len(DATA) // 2
    cases = [
        good,
        with_checksum,
        _frame(DATA[:half]) + _frame(DATA[half:]),  # two frames
        skippable_frame(b"meta") + good,
        good + skippable_frame(b""),
        without_content_size(good),
        _frame(DATA[:-1]),  # declares another size
        b"",
        b"\x28\xb5\x2f\xfd",
        good[:-1],
        good[:9],
        good + b"\x00",
        b"\x00" * 64,
        bytes([*good[:4], good[4] | 0x08, *good[5:]]),  # reserved bit
        bytes([*good[:4], good[4] | 0x01, 0, *good[5:]]),  # dictionary id field (zero)
    ]
    rng = np.random.default_rng(1)
    for _ in range(60):  # bit flips in headers and data, and truncations
        damaged = bytearray(good if rng.random() < 0.5 else with_checksum)
        if rng.random() < 0.5:
            position = int(rng.integers(0, min(len(damaged), 400)))
            damaged[position] ^= 1 << int(rng.integers(0, 8))
        else:
            damaged = damaged[: int(rng.integers(1, len(damaged)))]
        cases.append(bytes(damaged))
    return cases


def _packed(cases: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cases in one buffer at aligned offsets: (buffer, offsets, sizes)."""
    offsets = np.cumsum([0] + [align_up(len(c)) for c in cases[:-1]])
    buffer = np.zeros(int(offsets[-1]) + align_up(len(cases[-1])) + 16, dtype=np.uint8)
    for offset, case in zip(offsets, cases, strict=True):
        buffer[offset : offset + len(case)] = np.frombuffer(case, dtype=np.uint8)
    return buffer, offsets, np.array([len(c) for c in cases])


def test_check_frames_accepts_only_what_inspect_chunk_sends_to_nvcomp() -> None:
    cases = _cases()
    buffer, offsets, sizes = _packed(cases)
    verdicts = check_frames(buffer, offsets, sizes, DATA.nbytes)
    assert verdicts[0] == FRAME_GPU
    assert verdicts[1] == FRAME_CHECKSUM
    assert set(verdicts[2:15]) == {FRAME_NEEDS_CHECK}
    for case, verdict in zip(cases, verdicts, strict=True):
        try:
            info = inspect_chunk(case, key="c", expected_size=DATA.nbytes)
        except ChunkDecodeError:
            info = None
        if verdict != FRAME_NEEDS_CHECK:
            assert info is not None and info.gpu_decodable
            assert (info.checksum is not None) == (verdict == FRAME_CHECKSUM)
    # The verdict of a chunk does not depend on its neighbours in the buffer.
    reversed_buffer, reversed_offsets, reversed_sizes = _packed(cases[::-1])
    again = check_frames(reversed_buffer, reversed_offsets, reversed_sizes, DATA.nbytes)
    assert again[::-1].tolist() == verdicts.tolist()


# --- fetch: sizes, layouts, file reads ----------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
def test_chunk_sizes(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks never written
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    plan = plan_read(array)
    sizes = chunk_sizes(plan)
    assert sizes.shape == (plan.n_entries,)
    assert np.count_nonzero(sizes < 0) == 3 * 3  # the first slab of chunks
    for i in range(plan.n_entries):
        path = plan.files[plan.file_index[i]]
        if layout == "v3-sharded":
            expected = int(plan.nbytes[i]) if plan.stored[i] else -1
        else:
            expected = os.path.getsize(path) if os.path.exists(path) else -1
        assert sizes[i] == expected


def _stored_layout(plan: ReadPlan) -> tuple[np.ndarray, np.ndarray, object]:
    """The stored entries of a plan in file order, their sizes, and their layout."""
    sizes = chunk_sizes(plan)
    order = np.flatnonzero(sizes >= 0)
    order = order[np.lexsort((plan.offsets[order], plan.file_index[order]))]
    layout = layout_group(plan.files, plan.file_index[order], plan.offsets[order], sizes[order])
    return order, sizes[order], layout


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_read_group_gets_the_stored_bytes(
    tmp_path: Path, layout: str, threads: int, reader: str
) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # chunks never written
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    plan = plan_read(array, REGIONS[1])
    order, sizes, layout_ = _stored_layout(plan)
    buffer = np.zeros(layout_.nbytes, dtype=np.uint8)  # type: ignore[attr-defined]
    with ThreadPoolExecutor(threads) as pool:
        read_group(
            buffer, layout_, lambda i: plan.key(int(order[i])), reader=reader, pool=pool,
            threads=threads,
        )  # fmt: skip
    for i, entry in enumerate(order.tolist()):
        at = int(layout_.offsets[i])  # type: ignore[attr-defined]
        path = plan.files[plan.file_index[entry]]
        expected = _file_bytes(path, int(plan.offsets[entry]), int(sizes[i]))
        assert buffer[at : at + sizes[i]].tobytes() == expected


@pytest.mark.parametrize("threads", [1, 4])
def test_read_group_splits_long_runs_between_threads(tmp_path: Path, threads: int) -> None:
    """A shard of several MiB is one run; the pread reader cuts it into pieces for its threads."""
    payload = np.random.default_rng(5).integers(0, 256, 10 * 2**20 + 123, dtype=np.uint8)
    path = tmp_path / "shard"
    path.write_bytes(payload.tobytes())
    starts = np.array([0, 3 * 2**20, 6 * 2**20 + 7, 9 * 2**20])
    ends = np.array([3 * 2**20, 6 * 2**20 + 7, 9 * 2**20, payload.size])
    layout = layout_group([str(path)], np.zeros(4, np.int64), starts, ends - starts)
    assert len(layout.runs) == 1
    buffer = np.zeros(layout.nbytes, dtype=np.uint8)
    with ThreadPoolExecutor(threads) as pool:
        read_group(buffer, layout, str, reader="pread", pool=pool, threads=threads)
    assert buffer.tobytes() == payload.tobytes()


@pytest.mark.parametrize("layout", ["v3", "v2"])
def test_read_group_names_a_short_file(tmp_path: Path, layout: str) -> None:
    array = make_array(tmp_path / "a.zarr", layout, sample_data(SHAPE, "uint16"), chunks=CHUNKS)
    plan = plan_read(array)
    order, sizes, layout_ = _stored_layout(plan)
    victim = 4
    path = plan.files[plan.file_index[order[victim]]]
    size = int(sizes[victim])
    with open(path, "r+b") as f:  # shortened after it was sized, as by a concurrent writer
        f.truncate(size // 2)
    buffer = np.zeros(layout_.nbytes, dtype=np.uint8)  # type: ignore[attr-defined]
    for threads in (1, 3):
        with (
            ThreadPoolExecutor(threads) as pool,
            pytest.raises(ChunkDecodeError, match=f"file ends after {size // 2} of {size}") as info,
        ):
            read_group(
                buffer, layout_, lambda i: plan.key(int(order[i])), reader="pread", pool=pool,
                threads=threads,
            )  # fmt: skip
        assert info.value.key == path == plan.key(int(order[victim]))


def test_read_group_names_a_truncated_shard(tmp_path: Path) -> None:
    array = make_array(
        tmp_path / "a.zarr", "v3-sharded", sample_data(SHAPE, "uint16"), chunks=CHUNKS
    )
    plan = plan_read(array)  # the shard indexes are read here
    order, sizes, layout_ = _stored_layout(plan)
    shard = plan.files[0]
    last = max(
        (i for i, e in enumerate(order.tolist()) if plan.file_index[e] == 0),
        key=lambda i: plan.offsets[order[i]],
    )
    with open(shard, "r+b") as f:
        f.truncate(int(plan.offsets[order[last]]) + 1)
    buffer = np.zeros(layout_.nbytes, dtype=np.uint8)  # type: ignore[attr-defined]
    with pytest.raises(ChunkDecodeError, match="file ends after") as info:
        read_group(
            buffer, layout_, lambda i: plan.key(int(order[i])), reader="pread", pool=None,
            threads=1,
        )  # fmt: skip
    assert info.value.key.startswith(f"{shard} [inner chunk ")


def _random_chunks(
    rng: np.random.Generator, n_files: int, n_chunks: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint byte ranges in files: back to back, small gaps (merged) and large gaps."""
    file_index = np.sort(rng.integers(0, n_files, n_chunks))
    offsets = np.zeros(n_chunks, dtype=np.int64)
    sizes = rng.integers(1, 3000, n_chunks)
    position = {}
    for i, f in enumerate(file_index.tolist()):
        gap = int(rng.choice([0, 0, 0, 5, MERGE_GAP, MERGE_GAP + 1, 20_000]))
        offsets[i] = position.get(f, int(rng.integers(0, 100))) + gap
        position[f] = int(offsets[i] + sizes[i])
    shuffle = rng.permutation(n_chunks)  # groups come in any order
    return file_index[shuffle], offsets[shuffle], sizes[shuffle]


@pytest.mark.parametrize("seed", range(6))
def test_layout_group_invariants_and_bytes(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_files = int(rng.integers(1, 6))
    file_index, offsets, sizes = _random_chunks(rng, n_files, int(rng.integers(1, 60)))
    files = [str(tmp_path / f"f{k}") for k in range(n_files)]
    contents = []
    for k, path in enumerate(files):
        used = offsets[file_index == k] + sizes[file_index == k]
        content = rng.integers(0, 256, int(used.max(initial=0)) + 50, dtype=np.uint8).tobytes()
        Path(path).write_bytes(content)
        contents.append(content)
    layout = layout_group(files, file_index, offsets, sizes)

    ends = layout.offsets + sizes
    assert np.all((layout.offsets >= 0) & (ends <= layout.nbytes))
    runs = sorted(layout.runs, key=lambda run: run[3])
    for (_, _, nbytes, at, _), following in zip(runs, runs[1:] + [None]):
        assert at % ALIGN == 0
        assert at + nbytes <= (following[3] if following else layout.nbytes)  # disjoint
    assert runs[-1][3] + runs[-1][2] == layout.nbytes
    for i in range(len(sizes)):
        path = files[file_index[i]]
        holding = [
            run for run in layout.runs if run[0] == path and run[1] <= offsets[i] < run[1] + run[2]
        ]
        assert len(holding) == 1
        _, start, nbytes, at, first = holding[0]
        assert offsets[i] + sizes[i] <= start + nbytes
        assert layout.offsets[i] == at + offsets[i] - start
        assert files[file_index[first]] == path  # a run is named by one of its chunks
    # Runs of one file are merged whenever their ranges are within MERGE_GAP bytes.
    for path in files:
        spans = sorted((run[1], run[1] + run[2]) for run in layout.runs if run[0] == path)
        assert all(b[0] - a[1] > MERGE_GAP for a, b in zip(spans, spans[1:]))
    with ThreadPoolExecutor(3) as pool:
        for threads in (1, 3):
            buffer = np.zeros(layout.nbytes, dtype=np.uint8)
            read_group(buffer, layout, str, reader="pread", pool=pool, threads=threads)
            for i in range(len(sizes)):
                content = contents[file_index[i]]
                expected = content[offsets[i] : offsets[i] + sizes[i]]
                assert buffer[layout.offsets[i] : ends[i]].tobytes() == expected


def test_layout_group_of_nothing() -> None:
    empty = np.zeros(0, dtype=np.int64)
    layout = layout_group([], empty, empty, empty)
    assert (layout.offsets.size, layout.runs, layout.nbytes) == (0, (), 0)


# --- groups -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(
    ("max_compressed", "max_total", "min_groups"),
    [
        (2**62, 2**62, 1),
        (2**62, 2**62, 4),
        (5000, 2**62, 1),
        (2**62, 12_000, 1),
        (3000, 9000, 3),
        (700, 1500, 8),  # below the largest chunk: oversize chunks go alone
    ],
)
def test_make_groups_invariants(
    seed: int, max_compressed: int, max_total: int, min_groups: int
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    sizes = rng.integers(10, 1000, n + 5)
    sizes[rng.random(n + 5) < 0.1] = -1  # not stored: not part of ``order``
    order = rng.permutation(np.flatnonzero(sizes >= 0))
    chunk_nbytes = 256
    groups = make_groups(
        order,
        sizes,
        chunk_nbytes=chunk_nbytes,
        max_compressed=max_compressed,
        max_total=max_total,
        min_groups=min_groups,
    )
    assert all(len(g) for g in groups)
    flat = np.concatenate(groups) if groups else np.zeros(0, np.int64)
    assert flat.tolist() == order.tolist()  # every stored entry once, in order
    weights = sizes[order] + chunk_nbytes
    for group in groups:
        compressed = int(sizes[group].sum())
        if len(group) > 1:  # budgets hold, except for a chunk alone
            assert (
                compressed <= max_compressed and compressed + chunk_nbytes * len(group) <= max_total
            )
    fewest = max(
        min(min_groups, len(order)),
        -(-int(weights.sum()) // max_total),
        -(-int(sizes[order].sum()) // max_compressed),
    )
    assert len(groups) >= fewest
    slack_total = weights.sum() / fewest + weights.max() <= max_total
    slack_compressed = sizes[order].sum() / fewest + sizes[order].max() <= max_compressed
    if slack_total and slack_compressed:
        # each group is within a chunk of its even share: no budget cuts one short
        assert len(groups) == fewest
    if len(groups) == fewest and max_total == max_compressed == 2**62:
        # no budget binds: every group within one chunk of the even share
        share = weights.sum() / len(groups)
        totals = [int(weights[np.isin(order, g)].sum()) for g in groups]
        assert all(abs(t - share) <= weights.max() for t in totals)


def test_make_groups_leave_no_small_group_behind() -> None:
    """256 chunks that fill four budgets but for a few: four even groups, not 4 full and 1 small.

    The fifth group of the greedy split ran on the first GPU stream after the first group and
    cost a whole nvCOMP call for four 128^3 chunks (128^3 reads: 5 groups on 4 streams).
    """
    sizes = np.random.default_rng(0).integers(600, 700, 256)  # like 128^3: 4 MiB, ~2.5 stored
    groups = make_groups(
        np.arange(256), sizes, chunk_nbytes=1000, max_compressed=2**62, max_total=108_000,
        min_groups=4,
    )  # fmt: skip
    assert [len(g) for g in groups] == [64, 64, 64, 64]


def test_make_groups_of_nothing() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert make_groups(empty, empty, chunk_nbytes=8, max_compressed=1, max_total=1) == []


# --- run() with the CPU back end ----------------------------------------------------------------


class RecordingBackend(CpuBackend):
    """The CPU back end, recording the groups that run() hands it; grouped by ``budget`` and
    read in ``size_order`` when given."""

    def __init__(
        self,
        plan: ReadPlan,
        *,
        threads: int,
        budget: GroupBudget | None = None,
        size_order: bool = False,
    ) -> None:
        super().__init__(plan, threads=threads)
        self.submitted: list[Fetched] = []
        self._budget = budget
        self.size_order = size_order

    def budget(self, sizes: np.ndarray) -> GroupBudget:
        return super().budget(sizes) if self._budget is None else self._budget

    def submit(self, fetched: Fetched) -> None:
        self.submitted.append(fetched)
        super().submit(fetched)


def _run(
    plan: ReadPlan,
    *,
    threads: int = 2,
    group: int | None = None,
    min_groups: int = 1,
    tail: float = 0.0,
    best_compressed_first: bool = False,
) -> tuple[np.ndarray, Stats, RecordingBackend]:
    """run() through the CPU back end; ``group`` caps each group's compressed bytes."""
    budget = None if group is None else GroupBudget(group, 2**62, min_groups, tail)
    backend = RecordingBackend(
        plan, threads=threads, budget=budget, size_order=best_compressed_first
    )
    try:
        stats = run(plan, backend, reader="pread", threads=threads)
    finally:
        backend.close()
    return backend.out, stats, backend


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_run_matches_zarr(tmp_path: Path, layout: str, dtype: str) -> None:
    data = sample_data(SHAPE, dtype)
    data[:8] = 0  # missing chunks
    make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    array = zarr.open_array(tmp_path / "a.zarr", mode="r")
    for region in REGIONS:
        plan = plan_read(array, region)
        expected = zarr_read(tmp_path / "a.zarr", region)
        for group, threads, tail in ((None, 2, 0.0), (3000, 1, 0.0), (3000, 3, 0.3)):
            if plan.out_nbytes == 0:
                continue
            out, stats, backend = _run(plan, threads=threads, group=group, tail=tail)
            assert out.dtype == expected.dtype
            assert out.tobytes() == expected.tobytes()
            assert stats.n_groups == len(backend.submitted)
            if group is not None:
                assert all(
                    int(f.sizes.sum()) <= group or len(f.group.entries) == 1
                    for f in backend.submitted
                )
        # read_plan is run() with the CPU back end's own budgets.
        assert read_plan(plan, threads=2)[0].tobytes() == expected.tobytes()


@pytest.mark.parametrize("tail", [0.0, 0.25, 1.0])
def test_run_puts_the_tail_of_the_read_in_groups_of_its_own(tmp_path: Path, tail: float) -> None:
    """The back end's tail share: the last chunks read come last, in groups marked ``tail``
    (the GPU back end decodes those with libzstd); the others keep ``min_groups``."""
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", "v3", data, chunks=CHUNKS)
    plan = plan_read(array)
    out, _, backend = _run(plan, group=2**40, min_groups=3, tail=tail)
    assert out.tobytes() == zarr_read(tmp_path / "a.zarr", None).tobytes()
    marks = [f.group.tail for f in backend.submitted]
    assert marks == sorted(marks)  # no head group after a tail group
    n_tail = sum(len(f.group.entries) for f in backend.submitted if f.group.tail)
    assert n_tail == int(plan.n_entries * tail)
    read_order = np.concatenate([f.group.entries for f in backend.submitted])
    assert sorted(read_order.tolist()) == list(range(plan.n_entries))
    assert marks.count(False) == (3 if tail < 1 else 0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_run_reads_the_best_compressed_chunks_first_when_asked(tmp_path: Path, layout: str) -> None:
    """``best_compressed_first``: chunks in order of compressed size across groups, the first
    group holding the smallest; the same output as in file order."""
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # missing chunks
    data[16:] = 5  # the last slab of chunks compresses best
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    plan = plan_read(array)
    sizes = chunk_sizes(plan)
    expected = zarr_read(tmp_path / "a.zarr", None).tobytes()
    orders = {}
    for first in (False, True):
        out, _, backend = _run(plan, group=2**40, min_groups=3, best_compressed_first=first)
        assert out.tobytes() == expected
        assert len(backend.submitted) == 3
        orders[first] = [sizes[f.group.entries].tolist() for f in backend.submitted]
    by_size = [size for group in orders[True] for size in group]
    in_groups = [sorted(group) for group in orders[True]]
    assert [s for group in in_groups for s in group] == sorted(by_size)
    assert max(orders[True][0]) < min(orders[False][0])  # the file order starts elsewhere


@pytest.mark.parametrize("layout", LAYOUTS)
def test_run_reads_each_stored_chunk_once(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # missing chunks
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS)
    plan = plan_read(array)
    sizes = chunk_sizes(plan)
    _, stats, backend = _run(plan, group=2500, min_groups=3)
    read = np.concatenate([f.group.entries for f in backend.submitted])
    assert sorted(read.tolist()) == np.flatnonzero(sizes >= 0).tolist()
    assert stats.n_groups == len(backend.submitted) >= 3
    assert stats.compressed_bytes == int(sizes[sizes >= 0].sum())
    assert stats.n_fill == int((sizes < 0).sum()) == 3 * 3


@pytest.mark.parametrize("layout", ["v3", "v2"])
def test_run_counts_missing_chunk_files_as_fills_only(tmp_path: Path, layout: str) -> None:
    data = sample_data(SHAPE, "uint16")
    data[:8] = 0  # 9 chunk files never written
    plan = plan_read(make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS))
    _, stats, _ = _run(plan)
    assert (stats.n_reads, stats.n_fill) == (27 - 9, 9)


def test_sharded_arrays_are_read_in_whole_shard_runs(tmp_path: Path) -> None:
    data = sample_data((32, 64, 64), "uint16")
    data[..., :8] += 1  # no chunk equal to the fill value: every inner chunk stored
    make_array(tmp_path / "a.zarr", "v3-sharded", data, chunks=(8, 16, 16), shards=(16, 32, 32))
    plan = plan_read(zarr.open_array(tmp_path / "a.zarr", mode="r"))
    n_shards = 2 * 2 * 2
    assert len(plan.files) == n_shards and plan.stored.all()
    out, stats, backend = _run(plan)
    assert out.tobytes() == data.tobytes()
    assert [len(f.group.layout.runs) for f in backend.submitted] == [n_shards]
    paths = [run[0] for run in backend.submitted[0].group.layout.runs]
    assert sorted(paths) == sorted(plan.files)
    for path, start, nbytes, _, _ in backend.submitted[0].group.layout.runs:
        assert start == 0  # the index is at the end: the chunks start the file
        assert nbytes == os.path.getsize(path) - (8 * 16 + 4)  # all but the index


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("damage", ["magic", "flip", "checksum"])
def test_run_raises_naming_a_corrupt_chunk(tmp_path: Path, layout: str, damage: str) -> None:
    data = sample_data(SHAPE, "uint16")
    array = make_array(tmp_path / "a.zarr", layout, data, chunks=CHUNKS, checksum=True)
    plan = plan_read(array)
    victim = 13
    path = plan.files[plan.file_index[victim]]
    start = int(plan.offsets[victim])
    size = int(chunk_sizes(plan)[victim])
    raw = bytearray(Path(path).read_bytes())
    if damage == "magic":
        raw[start : start + 4] = b"\x00\x00\x00\x00"
    elif damage == "flip":
        raw[start + size // 2] ^= 0x5A
    else:
        raw[start + size - 1] ^= 0xFF
    Path(path).write_bytes(bytes(raw))
    for group in (None, 2000):
        with pytest.raises(ChunkDecodeError) as info:
            _run(plan, group=group)
        assert info.value.key == plan.key(victim)
    # The chunks around it still read.
    region = (slice(0, 8),)
    out, _, _ = _run(plan_read(array, region))
    assert out.tobytes() == data[region].tobytes()


@pytest.mark.parametrize("fill_value", [0, 7])
def test_chunks_not_stored_read_as_the_fill_value_into_new_and_given_outputs(
    tmp_path: Path, fill_value: int
) -> None:
    """A new output of fill value 0 starts zeroed and is not filled; one the caller gives (here
    holding other values) is filled wherever no chunk is stored."""
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=(8, 16, 16), chunks=(4, 8, 8), dtype="uint16",
        fill_value=fill_value,
    )  # fmt: skip
    data = np.full(array.shape, fill_value, dtype=np.uint16)
    data[:4, :8, :8] = np.arange(256, dtype=np.uint16).reshape(4, 8, 8) + 100
    array[:4, :8, :8] = data[:4, :8, :8]  # one chunk of eight stored
    plan = plan_read(array)
    new, _, _ = _run(plan)
    np.testing.assert_array_equal(new, data)
    given = np.full(array.shape, 9999, dtype=np.uint16)
    backend = CpuBackend(plan, threads=2, out=given)
    try:
        run(plan, backend, reader="pread", threads=2)
    finally:
        backend.close()
    np.testing.assert_array_equal(given, data)
