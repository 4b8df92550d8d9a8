"""The dask options of the ``linum-*`` scripts that run out of core: ``--memory-limit``,
``--scheduler``, ``--cluster-timeout`` and ``--gpus``, the :class:`~linumpy.parallel.Cluster`
they ask for, and whether its tasks run on GPUs (asked of the workers under ``--scheduler``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from linumpy.cli.options import number
from linumpy.errors import ClusterError, LinumpyError
from linumpy.parallel import Cluster, dask_cluster, parse_size
from linumpy.parallel.workers import DEFAULT_CLUSTER_TIMEOUT_S

__all__ = ["add_cluster_args", "cluster_from_args", "cluster_gpu"]


def _size_arg(value: str) -> str:
    try:
        parse_size(value)
    except LinumpyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--memory-limit SIZE``, ``--scheduler ADDRESS``, ``--cluster-timeout SECONDS`` and
    ``--gpus N`` (see :func:`linumpy.parallel.dask_cluster`).

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
        "must see the input and output paths (docs/cluster.md).",
    )
    group.add_argument(
        "--cluster-timeout",
        type=number(float, 0, strict=True),
        default=DEFAULT_CLUSTER_TIMEOUT_S,
        metavar="SECONDS",
        help="With --scheduler: how long to wait for a first worker, and for another when all "
        "are lost mid-job, before failing [%(default)g].",
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
    timeout = getattr(args, "cluster_timeout", DEFAULT_CLUSTER_TIMEOUT_S)
    with dask_cluster(
        memory_limit=args.memory_limit, scheduler=args.scheduler, gpus=args.gpus, timeout=timeout
    ) as cluster:
        yield cluster


def cluster_gpu(args: argparse.Namespace, cluster: Cluster) -> bool:
    """Whether the job's tasks run on GPUs: ``--use-gpu`` (or ``--gpus``) and a usable GPU.

    With ``--scheduler`` the workers are asked, not this process (a login node may have no
    GPU): a worker without one is an error naming it. Otherwise
    :func:`linumpy.cli.resolve_gpu` decides here (no usable GPU: a warning, the CPU path).

    Raises
    ------
    ClusterError
        Under ``--scheduler`` and ``--use-gpu``, for a worker without a usable GPU.

    Examples
    --------
    >>> import argparse
    >>> from linumpy.cli.cluster_args import cluster_gpu
    >>> from linumpy.parallel import Cluster
    >>> cluster_gpu(argparse.Namespace(use_gpu=False, gpus=None), Cluster())
    False
    """
    from linumpy.cli.parser import gpu_reason, resolve_gpu

    wanted = bool(getattr(args, "use_gpu", False)) or getattr(args, "gpus", None) is not None
    if not wanted or cluster.client is None or getattr(args, "gpus", None) is not None:
        return resolve_gpu(wanted)
    answers = cluster.client.run(gpu_reason)
    missing = {worker: why for worker, why in sorted(answers.items()) if why is not None}
    if missing:
        worker, why = next(iter(missing.items()))
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ClusterError(
            f"--use-gpu: dask worker {worker}{more} has no usable GPU: {why}; start the "
            "workers on GPU nodes (dask cuda worker) or leave --use-gpu out"
        )
    return True
