"""The benchmarks users run on their own machine: ``linum-benchmark-io`` (reads and writes of zstd
zarr volumes beside the same run's ceilings: file read, decode) and ``linum-benchmark-pipeline``
(the ``linum-*`` commands on demo mosaics beside ``linum-rechunk``, :mod:`linumpy.bench.pipeline`).

:func:`run_benchmark` runs the first from Python. The GPU rows and ceilings import cupy and
nvCOMP only when they run.
"""

from linumpy.bench.ceilings import cpu_decode_ceiling, file_read_ceiling, gpu_ceilings, host_buffer
from linumpy.bench.files import (
    BenchInputError,
    StoredFiles,
    array_directory,
    read_files,
    stored_files,
)
from linumpy.bench.report import ceilings_of, summary_table
from linumpy.bench.rows import Layout, cpu_read_rows, gpu_read_rows, write_rows, write_volume
from linumpy.bench.run import BenchConfig, BenchResult, run_benchmark
from linumpy.bench.timing import Row, Timer
from linumpy.bench.volume import oct_volume

__all__ = [
    "BenchConfig",
    "BenchInputError",
    "BenchResult",
    "Layout",
    "Row",
    "StoredFiles",
    "Timer",
    "array_directory",
    "ceilings_of",
    "cpu_decode_ceiling",
    "cpu_read_rows",
    "file_read_ceiling",
    "gpu_ceilings",
    "gpu_read_rows",
    "host_buffer",
    "oct_volume",
    "read_files",
    "run_benchmark",
    "stored_files",
    "summary_table",
    "write_rows",
    "write_volume",
]
