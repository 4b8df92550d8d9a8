"""The benchmarks users run on their own machine: ``linum-benchmark-io`` (reads and writes of zstd
zarr volumes beside the same run's ceilings, :mod:`linumpy.bench.run`) and
``linum-benchmark-pipeline`` (the ``linum-*`` commands on demo mosaics beside ``linum-rechunk``,
:mod:`linumpy.bench.pipeline`). The GPU rows import cupy and nvCOMP only when they run."""
