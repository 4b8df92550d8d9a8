"""Print what linumpy's GPU I/O would use here: the GPU, driver and runtime, the cupy, nvCOMP and
kvikio versions, whether GPUDirect Storage is live or kvikio runs in compatibility mode, and, for
a given zarr array or OME-Zarr image, which path read_volume(path, gpu=True) takes and why.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from linumpy.errors import LinumpyError
from linumpy.gpu.zarr_io import GpuReadSettings, describe_gpu, gpu_read_route
from linumpy.io import open_array

_ROUTES = {
    "fast": "fast path: batched reads, nvCOMP batch decode, scatter kernel",
    "zarr": "zarr's own GPU path (gpu_zarr_context)",
    "unavailable": "none: read_volume(gpu=True) raises GPUUnavailableError",
}


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("path", type=Path, nargs="?", help="a zarr array or OME-Zarr image")
    parser.add_argument("--level", type=int, default=0, help="OME-Zarr level [%(default)s]")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _build_arg_parser().parse_args(argv)
    info = describe_gpu()
    width = max(map(len, info))
    for key, value in info.items():
        print(f"{key:>{width}}: {value}")
    settings = GpuReadSettings.from_env()
    print(
        f"{'settings':>{width}}: {settings.io_threads} I/O threads, pinned "
        f"{settings.pinned_bytes / 2**20:.0f} MiB, scratch {settings.scratch_bytes / 2**20:.0f} "
        f"MiB, fetch {settings.fetch}"
    )
    if args.path is None:
        return
    try:
        route = gpu_read_route(open_array(args.path, args.level), settings=settings)
    except LinumpyError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"\nread_volume({str(args.path)!r}, level={args.level}, gpu=True) takes:")
    print(f"  {_ROUTES[route.path]}")
    if route.reader is not None:
        print(f"  file reader: {route.reader} ({route.reason})")
        print(f"  chunks: {route.n_reads} to read, {route.n_missing} known empty")
    else:
        print(f"  because: {route.reason}")


if __name__ == "__main__":
    main()
