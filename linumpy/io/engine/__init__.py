"""The read engine: ``plan -> fetch -> validate -> decode -> scatter``, each stage written once.

========== ========================================= ===========================================
stage      module                                    what it does
========== ========================================= ===========================================
read       :mod:`~linumpy.io.engine.read`            the orchestrator: region, memory, fallback,
                                                     run, report, for every back end
backend    :mod:`~linumpy.io.engine.backend`         what the orchestrator and the run loop ask
                                                     of a back end (one class per destination)
plan       :mod:`~linumpy.io.engine.plan`            chunks (or inner chunks of shards) of a
                                                     region; codec chains by
                                                     :mod:`~linumpy.io.engine.codecs`
fetch      :mod:`~linumpy.io.engine.fetch`           file reads: shard indexes, merged ranges
validate   :mod:`~linumpy.io.engine.codecs`          the plan's compressor checks its frames
                                                     on the CPU (its ``check_frames``)
run        :mod:`~linumpy.io.engine.run`             groups, fetched ahead while the back end
                                                     works
decode,    :mod:`~linumpy.io.engine.cpu`,            the compressor's CPU decoder in threads and
scatter    :mod:`linumpy.gpu.backend`                numpy, or nvCOMP and a CUDA kernel
========== ========================================= ===========================================

Imports run one way: ``plan`` uses ``codecs`` and ``fetch``; ``backend`` uses ``plan`` and
``fetch``; ``run`` uses ``backend``, ``plan``, ``fetch`` and ``codecs``; ``read`` uses ``backend``
and ``plan``; the back ends use ``backend``, ``read`` and ``run``, and are handed to ``read`` by
their callers. Nothing here imports cupy, nvCOMP or kvikio.
"""
