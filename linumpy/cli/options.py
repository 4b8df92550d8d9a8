"""Option types and options shared by the ``linum-*`` scripts (bad values: exit status 2)."""

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
    ``strict``) to ``high``."""

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
    """Add ``--zstd-level``; None without it: the writers' ``zstd_level`` setting."""
    parser.add_argument(
        "--zstd-level",
        dest="zstd_level",
        type=number(int, *ZSTD_LEVELS),
        default=None,
        metavar="N",
        help=f"zstd compression level, 1 to 22 [{DEFAULT_ZSTD_LEVEL}, or LINUMPY_ZSTD_LEVEL].",
    )


#: The OME-NGFF versions the scripts write (:mod:`linumpy.io.formats`'s; a parser loads no zarr).
NGFF_VERSIONS = ("0.4", "0.5")


def add_ngff_version_arg(parser: argparse.ArgumentParser, help: str = "OME-NGFF version") -> None:
    """Add ``--ngff-version`` (:data:`NGFF_VERSIONS`, the last by default)."""
    parser.add_argument(
        "--ngff-version",
        choices=NGFF_VERSIONS,
        default=NGFF_VERSIONS[-1],
        help=f"{help} [%(default)s].",
    )


def add_registration_args(parser: argparse.ArgumentParser) -> None:
    """Add the tile registration's ``--tile-shape H W`` and ``--min-score``."""
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


#: The stitch's ``--dtype`` choices (``linumpy.mosaic.stitch.OUTPUT_DTYPES``, without numpy).
STITCH_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32")


def add_blending_args(parser: argparse.ArgumentParser, image: str = "the output") -> None:
    """Add the stitch's ``--blending``, ``--dtype`` and ``--n-levels`` (of ``image``)."""
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
    """Add ``--chunks``, and ``--shards`` or ``--no-shards`` (read by :func:`layout_shards`)."""
    parser.add_argument("--chunks", nargs="+", type=positive_int, help=chunks_help)
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument("--shards", nargs="+", type=positive_int, help=shards_help)
    shards.add_argument("--no-shards", action="store_true", help="One file per chunk.")


def layout_shards(args: argparse.Namespace) -> list[int] | str | None:
    """The writers' ``shards``: None for ``--no-shards``, the shape given, else ``"auto"``."""
    return None if args.no_shards else args.shards or "auto"


def stitch_options(args: argparse.Namespace) -> dict[str, Any]:
    """The stitch's keyword arguments from the options of :func:`add_blending_args`,
    :func:`add_layout_args` and :func:`add_zstd_level_arg`."""
    return {
        "blending": args.blending,
        "dtype": args.dtype,
        "n_levels": args.n_levels,
        "chunks": args.chunks,
        "shards": layout_shards(args),
        "zstd_level": args.zstd_level,
    }


def png_name(text: str) -> str:
    """An argparse ``type``: a file name ending in ``.png``."""
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"a PNG file name ending in .png is needed, got {text!r}")
    return text
