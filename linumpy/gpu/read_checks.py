"""What a GPU read verifies, and when: the validate stage of the GPU back end.

Stored crc32c are checked before nvCOMP decodes, on the device (:mod:`linumpy.gpu.crc_device`)
where nvCOMP has a CRC32 and decodes whole frames, else on the reading threads; content
checksums are hashed on the device after the decode (:mod:`linumpy.gpu._xxhash`). Everything is
read back once, after the final synchronisation: a crc32c failure first (a failed chunk was
decoded from a stand-in), then nvCOMP's statuses and sizes, then the content checksums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from linumpy.errors import ChunkDecodeError
from linumpy.gpu.crc_device import DeviceCrc32c, crc32c_unavailable_reason
from linumpy.gpu.gpu_read import nvcomp_chunk_limit
from linumpy.io.engine.backend import Fetched, Group
from linumpy.io.engine.keys import EntryKeys
from linumpy.io.engine.plan import ReadPlan

__all__: list[str] = []


@dataclass(slots=True)
class ReadChecks:
    """One GPU read's checks (see the module docstring); made by :meth:`for_read`."""

    plan: ReadPlan
    crc: DeviceCrc32c | None = None  # None: crc32c checked on the CPU, or none stored
    statuses: list[tuple[Any, np.ndarray]] = field(default_factory=list)  # entries per call
    # device hashes, the stored checksums (uint32), their entries
    hashes: list[tuple[Any, np.ndarray, np.ndarray]] = field(default_factory=list)
    timed: dict[str, list[tuple[Any, Any]]] = field(default_factory=dict)

    @classmethod
    def for_read(cls, plan: ReadPlan, stream: Any) -> ReadChecks:
        """The checks of a read of ``plan``: its crc32c on the device where nvCOMP can."""
        if not plan.crc32c:
            return cls(plan)
        # Chunks too large for nvCOMP are all decoded on the CPU, after the CPU's check; the
        # device checks the bytes nvCOMP decodes, which must then be the whole frames.
        fits = plan.chunk_nbytes <= nvcomp_chunk_limit()
        if fits and _decodes_whole_frames(plan.codec) and crc32c_unavailable_reason() is None:
            return cls(plan, DeviceCrc32c(plan.codec, plan.chunk_nbytes, stream))
        return cls(plan)

    def on_device(self, group: Group) -> bool:
        """Whether the group's crc32c is checked on the device, before nvCOMP (not for groups
        that libzstd decodes: their frames never reach nvCOMP)."""
        return self.crc is not None and not group.tail

    def _time(self, name: str, start: Any, stream: Any) -> None:
        self.timed.setdefault(name, []).append((start, stream.record()))

    def before_decode(self, fetched: Fetched, on_gpu: np.ndarray, stream: Any) -> Any:
        """The ``before_decode`` of the group's nvCOMP call: its device crc32c check, or None."""
        if not fetched.crc32c_on_device or self.crc is None:
            return None
        largest = int(fetched.sizes[on_gpu].max())
        guard = self.crc.guard(fetched.group.entries[on_gpu], largest, stream)

        def check(sources: int, sizes: int) -> None:
            start = stream.record()
            guard(sources, sizes)
            self._time("crc32c_device", start, stream)

        return check

    def decoded(self, pending: Any, entries: np.ndarray) -> None:
        """Keep one nvCOMP call's pending statuses, for :meth:`verify`."""
        self.statuses.append((pending, entries))

    def hash_content(
        self, fetched: Fetched, checked: np.ndarray, device: Any, offsets: np.ndarray, stream: Any
    ) -> None:
        """Queue the XXH64 of the decoded chunks ``checked`` (positions in the group) that
        ``device[offsets]`` holds; their stored checksums are taken from the staging buffer now,
        before it is reused."""
        from linumpy.gpu._xxhash import xxh64_batch

        start = stream.record()
        ends = fetched.group.layout.offsets[checked] + fetched.sizes[checked]
        trailers = ends[:, None] + np.arange(-self.plan.codec.CHECKSUM_BYTES, 0)
        stored = fetched.staging[trailers].copy().view("<u4").reshape(-1)
        sizes = np.full(len(checked), self.plan.chunk_nbytes, dtype=np.int64)
        hashes = xxh64_batch(device, offsets, sizes, stream=stream)
        self.hashes.append((hashes, stored, fetched.group.entries[checked]))
        self._time("xxh64_device", start, stream)

    def verify(self, phases: dict[str, float]) -> None:
        """After every stream is synchronised: add the checks' device time to ``phases``, then
        raise for the first failure (crc32c, then nvCOMP's statuses, then content checksums)."""
        import cupy

        for name, events in self.timed.items():
            seconds = sum(cupy.cuda.get_elapsed_time(a, b) for a, b in events) / 1e3
            phases[name] = phases.get(name, 0.0) + seconds
        plan = self.plan
        if self.crc is not None:
            self.crc.raise_first(plan.key)
        for pending, entries in self.statuses:
            pending.check(EntryKeys(plan, entries))
        for hashes, stored, entries in self.hashes:
            computed = (hashes.get() & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            bad = np.flatnonzero(computed != stored)
            if len(bad):
                i = int(bad[0])
                raise ChunkDecodeError(
                    plan.key(int(entries[i])),
                    f"content checksum mismatch: the frame stores 0x{int(stored[i]):08X}, the "
                    f"decoded bytes hash to 0x{int(computed[i]):08X}",
                )


def _decodes_whole_frames(codec: Any) -> bool:
    """Whether nvCOMP decodes a compressor's whole frames (its span is the chunk)."""
    sizes = np.array([64], dtype=np.int64)
    starts, spans = codec.nvcomp_span(np.zeros(1, dtype=np.int64), sizes)
    return int(starts[0]) == 0 and int(spans[0]) == 64
