"""The read engine: ``plan -> fetch -> validate -> decode -> scatter``, each stage written once.

========== ======================================= =============================================
stage      module                                  what it does
========== ======================================= =============================================
plan       :mod:`~linumpy.io.engine.plan`          chunks (or inner chunks of shards) of a region
fetch      :mod:`~linumpy.io.engine.fetch`         file reads: shard indexes, merged byte ranges
validate   :mod:`~linumpy.io.engine.frames`        zstd frame and block headers, on the CPU
run        :mod:`~linumpy.io.engine.run`           groups, fetched ahead while the back end works
decode,    :mod:`~linumpy.io.engine.cpu`,          libzstd threads and numpy, or nvCOMP and a
scatter    :mod:`linumpy.gpu.backend`              CUDA kernel
========== ======================================= =============================================

Imports run one way: ``plan`` uses ``fetch``; ``run`` uses ``plan``, ``fetch`` and ``frames``;
the back ends use ``run``. Nothing here imports cupy, nvCOMP or kvikio.
"""
