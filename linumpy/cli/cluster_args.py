"""The dask options of the ``linum-*`` scripts that run out of core: ``--memory-limit``,
``--scheduler``, ``--cluster-timeout`` and ``--gpus``, the :class:`~linumpy.parallel.Cluster`
they ask for, and whether its tasks run on GPUs (asked of the workers under ``--scheduler``)."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager

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
    """Add ``--memory-limit``, ``--scheduler``, ``--cluster-timeout`` and ``--gpus``."""
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


def cluster_from_args(args: argparse.Namespace) -> AbstractContextManager[Cluster]:
    """:func:`~linumpy.parallel.dask_cluster` from the options :func:`add_cluster_args` adds."""
    return dask_cluster(
        memory_limit=args.memory_limit,
        scheduler=args.scheduler,
        gpus=args.gpus,
        timeout=args.cluster_timeout,
    )


def cluster_gpu(args: argparse.Namespace, cluster: Cluster) -> bool:
    """Whether the job's tasks run on GPUs: ``--use-gpu`` (or ``--gpus``) and a usable GPU.
    Under ``--scheduler`` the workers are asked, not this process (a login node may have no
    GPU), and a worker without one is a :class:`ClusterError` naming it."""
    from linumpy.cli.parser import gpu_reason, resolve_gpu

    wanted = args.use_gpu or args.gpus is not None
    if not wanted or cluster.client is None or args.gpus is not None:
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
