"""Option types and options shared by the ``linum-*`` scripts.

Bad values stop the parser with ``PROG: error: argument --OPTION: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from linumpy.settings import DEFAULT_ZSTD_LEVEL, ZSTD_LEVELS

__all__ = [
    "NGFF_VERSIONS",
    "STITCH_DTYPES",
    "add_blending_args",
    "add_layout_args",
    "add_ngff_version_arg",
    "add_registration_args",
    "add_zstd_level_arg",
    "layout_shards",
    "number",
    "png_name",
    "positive_int",
    "stitch_options",
]


def number(
    kind: type, low: float, high: float | None = None, *, strict: bool = False
) -> Callable[[str], Any]:
    """An argparse ``type``: a finite ``kind`` (int or float) from ``low`` (above it if
    ``strict``) to ``high``.

    Examples
    --------
    >>> import contextlib, sys
    >>> from linumpy.cli import build_parser
    >>> from linumpy.cli.options import number
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> _ = parser.add_argument("--overlap", type=number(float, 0, 1), default=0.2)
    >>> parser.parse_args(["--overlap", "0.5"]).overlap
    0.5
    >>> try:
    ...     with contextlib.redirect_stderr(sys.stdout):
    ...         parser.parse_args(["--overlap", "nan"])
    ... except SystemExit as exc:
    ...     print("exit status", exc.code)
    linum-demo: error: argument --overlap: must be from 0 to 1, got nan
    exit status 2
    """

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if strict and not value > low:
            raise argparse.ArgumentTypeError(f"must be more than {low}, got {text}")
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {span}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value" messages
    return parse


#: An argparse ``type``: an integer of 1 or more.
positive_int = number(int, 0, strict=True)


def add_zstd_level_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--zstd-level`` (1 to 22), with ``--level``, its old name, kept as an alias; without
    it, None: the writers' ``zstd_level`` setting (``LINUMPY_ZSTD_LEVEL``, 2 by default).

    Examples
    --------
    >>> from linumpy.cli import build_parser
    >>> from linumpy.cli.options import add_zstd_level_arg
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_zstd_level_arg(parser)
    >>> for argv in ([], ["--zstd-level", "9"], ["--level", "5"]):
    ...     print(parser.parse_args(argv).zstd_level)
    None
    9
    5
    """
    parser.add_argument(
        "--zstd-level",
        "--level",
        dest="zstd_level",
        type=number(int, *ZSTD_LEVELS),
        default=None,
        metavar="N",
        help=f"zstd compression level, 1 to 22 (--level: its old name, deprecated) "
        f"[{DEFAULT_ZSTD_LEVEL}, or LINUMPY_ZSTD_LEVEL].",
    )


#: The OME-NGFF versions the scripts write: those of :mod:`linumpy.io.formats` (not imported
#: here: a script's parser loads no zarr).
NGFF_VERSIONS = ("0.4", "0.5")


def add_ngff_version_arg(parser: argparse.ArgumentParser, help: str = "OME-NGFF version") -> None:
    """Add ``--ngff-version`` (:data:`NGFF_VERSIONS`, the last by default).

    Examples
    --------
    >>> from linumpy.cli import build_parser
    >>> from linumpy.cli.options import add_ngff_version_arg
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_ngff_version_arg(parser, "OME-NGFF version of the output")
    >>> [parser.parse_args(argv).ngff_version for argv in ([], ["--ngff-version", "0.4"])]
    ['0.5', '0.4']
    """
    parser.add_argument(
        "--ngff-version",
        choices=NGFF_VERSIONS,
        default=NGFF_VERSIONS[-1],
        help=f"{help} [%(default)s].",
    )


def add_registration_args(parser: argparse.ArgumentParser) -> None:
    """Add the tile registration's ``--tile-shape H W`` and ``--min-score``.

    Examples
    --------
    >>> from linumpy.cli import build_parser
    >>> from linumpy.cli.options import add_registration_args
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_registration_args(parser)
    >>> args = parser.parse_args(["--tile-shape", "64", "96"])
    >>> args.tile_shape, args.min_score
    ([64, 96], 0.3)
    """
    parser.add_argument(
        "--tile-shape",
        nargs=2,
        type=positive_int,
        metavar=("H", "W"),
        help="Tile height and width in pixels (default: from the image).",
    )
    parser.add_argument(
        "--min-score",
        type=number(float, 0, 1),
        default=0.3,
        help="Smallest overlap correlation of a pair that is used [%(default)s].",
    )


#: The ``--dtype`` choices of the stitch (:data:`linumpy.mosaic.stitch.OUTPUT_DTYPES`, kept here
#: so that building a parser imports no numpy).
STITCH_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32")


def add_blending_args(parser: argparse.ArgumentParser, image: str = "the output") -> None:
    """Add the stitch's ``--blending``, ``--dtype`` (of ``image``) and ``--n-levels`` (its
    pyramid).

    Examples
    --------
    >>> from linumpy.cli import build_parser
    >>> from linumpy.cli.options import add_blending_args
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_blending_args(parser)
    >>> args = parser.parse_args(["--blending", "average"])
    >>> args.blending, args.dtype, args.n_levels
    ('average', None, 3)
    >>> parser.parse_args(["--dtype", "float32"]).dtype
    'float32'
    """
    parser.add_argument(
        "--blending",
        choices=("none", "average", "linear"),
        default="linear",
        help="How overlapping tiles are combined [%(default)s].",
    )
    parser.add_argument(
        "--dtype",
        choices=STITCH_DTYPES,
        default=None,
        help=f"dtype of {image} (default: the tiles', float32 for float64 tiles). Blended in "
        "float32, rounded to the nearest integer for an integer dtype; float32 stores about "
        "1.7x the bytes of uint16.",
    )
    parser.add_argument(
        "--n-levels",
        type=positive_int,
        default=3,
        help=f"Pyramid levels of {image} [%(default)s].",
    )


def add_layout_args(
    parser: argparse.ArgumentParser,
    *,
    chunks_help: str = "(Inner) chunk shape (default: about 1 MiB each).",
    shards_help: str = "Shard shape, a multiple of the chunks (default: slabs of whole planes).",
) -> None:
    """Add ``--chunks``, and ``--shards`` or ``--no-shards``: the output's layout (read them
    back with :func:`layout_shards`).

    Examples
    --------
    >>> from linumpy.cli import build_parser
    >>> parser = build_parser("Demo.", prog="linum-demo")
    >>> add_layout_args(parser)
    >>> args = parser.parse_args(["--chunks", "8", "8", "--no-shards"])
    >>> args.chunks, layout_shards(args)
    ([8, 8], None)
    """
    parser.add_argument("--chunks", nargs="+", type=positive_int, help=chunks_help)
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument("--shards", nargs="+", type=positive_int, help=shards_help)
    shards.add_argument("--no-shards", action="store_true", help="One file per chunk.")


def layout_shards(args: argparse.Namespace) -> list[int] | str | None:
    """The ``shards`` argument of linumpy's writers from :func:`add_layout_args`'s options:
    None for ``--no-shards``, the shape given, else ``"auto"`` (the default layout).

    Examples
    --------
    >>> import argparse
    >>> layout_shards(argparse.Namespace(shards=None, no_shards=False))
    'auto'
    """
    return None if args.no_shards else args.shards or "auto"


def stitch_options(args: argparse.Namespace) -> dict[str, Any]:
    """The stitch's keyword arguments (``stitch_omezarr``, ``run_mosaic_job``) from the options
    of :func:`add_blending_args`, :func:`add_layout_args` and :func:`add_zstd_level_arg`.

    Examples
    --------
    >>> import argparse
    >>> args = argparse.Namespace(blending="linear", dtype=None, n_levels=3, chunks=None,
    ...                           shards=None, no_shards=True, zstd_level=None)
    >>> stitch_options(args)["shards"] is None
    True
    """
    return {
        "blending": args.blending,
        "dtype": args.dtype,
        "n_levels": args.n_levels,
        "chunks": args.chunks,
        "shards": layout_shards(args),
        "zstd_level": args.zstd_level,
    }


def png_name(text: str) -> str:
    """An argparse ``type``: a file name ending in ``.png``.

    Examples
    --------
    >>> from linumpy.cli.options import png_name
    >>> png_name("preview.PNG")
    'preview.PNG'
    >>> png_name("preview.jpg")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: a PNG file name ending in .png is needed, got 'preview.jpg'
    """
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"a PNG file name ending in .png is needed, got {text!r}")
    return text
