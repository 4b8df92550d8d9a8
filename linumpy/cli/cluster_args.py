"""The dask options of the ``linum-*`` scripts that run out of core: ``--memory-limit``,
``--scheduler`` and ``--gpus``, and the :class:`~linumpy.parallel.Cluster` they ask for."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from linumpy.errors import LinumpyError
from linumpy.parallel import Cluster, dask_cluster, parse_size

__all__ = ["add_cluster_args", "cluster_from_args"]


def _size_arg(value: str) -> str:
    try:
        parse_size(value)
    except LinumpyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--memory-limit SIZE``, ``--scheduler ADDRESS`` and ``--gpus N`` (see
    :func:`linumpy.parallel.dask_cluster`).

    Examples
    --------
    >>> import argparse
    >>> from linumpy.cli.cluster_args import add_cluster_args
    >>> parser = argparse.ArgumentParser(prog="linum-demo")
    >>> add_cluster_args(parser)
    >>> args = parser.parse_args(["--memory-limit", "2GiB", "--gpus", "2"])
    >>> args.memory_limit, args.scheduler, args.gpus
    ('2GiB', None, 2)
    """
    group = parser.add_argument_group("out of core and parallel (dask)")
    group.add_argument(
        "--memory-limit",
        type=_size_arg,
        metavar="SIZE",
        help="Working set per worker, e.g. 2GiB: blocks are sized to fit it (with local threads, "
        "fewer threads run when needed) [128MiB per task].",
    )
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="Run on an existing dask.distributed scheduler (e.g. tcp://host:8786); its workers "
        "must see the input and output paths.",
    )
    where.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="Start a dask-cuda cluster with one worker per GPU on N GPUs (implies --use-gpu).",
    )


@contextmanager
def cluster_from_args(args: argparse.Namespace) -> Iterator[Cluster]:
    """:func:`~linumpy.parallel.dask_cluster` from the options :func:`add_cluster_args` adds.

    Examples
    --------
    >>> import argparse
    >>> from linumpy.cli.cluster_args import cluster_from_args
    >>> args = argparse.Namespace(memory_limit="1GiB", scheduler=None, gpus=None)
    >>> with cluster_from_args(args) as cluster:
    ...     cluster.client is None, cluster.memory_limit
    (True, 1073741824)
    """
    with dask_cluster(
        memory_limit=args.memory_limit, scheduler=args.scheduler, gpus=args.gpus
    ) as cluster:
        yield cluster
