"""Print what linumpy's GPU I/O would use here: the GPU, driver and runtime, the cupy, nvCOMP and
kvikio versions, whether GPUDirect Storage is live or kvikio runs in compatibility mode, the I/O
settings in force (linumpy.settings, LINUMPY_* variables), and, for a given zarr array or
OME-Zarr image, which path read_volume(path, gpu=True) takes and why.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from linumpy.cli import build_parser, check_input, fail_on_errors, parse_args
from linumpy.cli.options import number
from linumpy.errors import LinumpyError

_ROUTES = {
    "fast": "fast path: batched reads, nvCOMP batch decode, scatter kernel",
    "zarr": "zarr's own GPU path (gpu_zarr_context)",
    "unavailable": "none: read_volume(gpu=True) raises GPUUnavailableError",
}


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = build_parser(__doc__, prog="linum-gpu-info", overwrite=False)
    parser.add_argument("path", type=Path, nargs="?", help="A zarr array or OME-Zarr image.")
    parser.add_argument(
        "--level",
        type=number(int, 0),
        default=0,
        help="Multiscale (pyramid) level of an OME-Zarr image [%(default)s].",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run ``linum-gpu-info`` (see the module docstring)."""
    parser = _build_arg_parser()
    args = parse_args(parser, argv)
    with fail_on_errors(parser):
        import linumpy.settings
        from linumpy.gpu.zarr_io import describe_gpu, gpu_read_route
        from linumpy.io import open_array

        array = None
        if args.path is not None:  # a bad image or level ends the run before any report
            check_input(parser, args.path)
            try:
                array = open_array(args.path, args.level)
            except LinumpyError as exc:
                if args.level != 0 and open_array(args.path, 0) is not None:  # level 0 opens
                    parser.error(f"argument --level: {exc}")
                raise
        settings = linumpy.settings.get()
        info = describe_gpu()
        width = max(map(len, info))
        for key, value in info.items():
            print(f"{key:>{width}}: {value}")
        print(
            f"{'settings':>{width}}: {settings.io_threads} I/O threads, scratch "
            f"{settings.scratch_bytes / 2**20:.0f} MiB, fetch {settings.fetch}"
        )
        if array is None:
            return
        route = gpu_read_route(array)
    print(f"\nread_volume({str(args.path)!r}, level={args.level}, gpu=True) takes:")
    print(f"  {_ROUTES.get(route.path, route.path)}")
    if route.reader is not None:
        print(f"  file reader: {route.reader} ({route.reason})")
        print(f"  chunks: {route.n_reads} to read, {route.n_missing} known empty")
    else:
        print(f"  because: {route.reason}")


if __name__ == "__main__":
    main()
