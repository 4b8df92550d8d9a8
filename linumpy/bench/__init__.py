"""I/O benchmark of linumpy: read and write paths of zstd zarr volumes against the same run's
ceilings (file reads, host-to-device copy, numcodecs and nvCOMP decode, file writes).

``linum-benchmark-io`` is its command line; :func:`run_benchmark` runs it from Python. The GPU
rows and ceilings import cupy and nvCOMP only when they run.
"""

from linumpy.bench.ceilings import (
    cpu_decode_ceiling,
    file_read_ceiling,
    file_write_ceiling,
    gpu_ceilings,
    host_buffer,
)
from linumpy.bench.files import (
    BenchInputError,
    StoredFiles,
    array_directory,
    drop_page_cache,
    read_files,
    stored_files,
    write_files,
)
from linumpy.bench.report import bar_chart, ceilings_of, details_table, summary_table
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
    "bar_chart",
    "ceilings_of",
    "cpu_decode_ceiling",
    "cpu_read_rows",
    "details_table",
    "drop_page_cache",
    "file_read_ceiling",
    "file_write_ceiling",
    "gpu_ceilings",
    "gpu_read_rows",
    "host_buffer",
    "oct_volume",
    "read_files",
    "run_benchmark",
    "stored_files",
    "summary_table",
    "write_files",
    "write_rows",
    "write_volume",
]
