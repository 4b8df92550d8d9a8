"""The workers of a ``dask.distributed`` scheduler, checked before a job ships: one joined, and
all (and the scheduler) run the client's package versions; each check fails in one line naming
the scheduler or the worker (the GPU check is :func:`linumpy.cli.cluster_args.cluster_gpu`'s)."""

from __future__ import annotations

from typing import Any

from linumpy.errors import ClusterError, ClusterLostError

__all__ = ["CHECKED_PACKAGES", "DEFAULT_CLUSTER_TIMEOUT_S", "check_workers"]

#: Seconds to wait for a first worker (``--cluster-timeout``), and for another after all left.
DEFAULT_CLUSTER_TIMEOUT_S = 60.0
#: Packages the client and every worker must have in the same version: the tasks are linumpy's
#: functions over zarr and numpy, pickled by dask.
CHECKED_PACKAGES = ("linumpy", "zarr", "numpy", "dask", "distributed")


def version_mismatches(versions: dict[str, Any], packages: tuple[str, ...]) -> list[str]:
    """One phrase per worker (or the scheduler, which reads the tasks too) whose version of one of
    ``packages`` differs from the client's, from ``distributed.Client.get_versions``' answer."""
    client = versions.get("client", {}).get("packages", {})
    found = []
    others = {"the scheduler": versions.get("scheduler", {})}
    others.update(
        (f"worker {worker}", info) for worker, info in sorted(versions.get("workers", {}).items())
    )
    for name, info in others.items():
        theirs = info.get("packages", {}) if isinstance(info, dict) else {}
        for package in packages:
            mine, other = client.get(package), theirs.get(package)
            if mine != other:
                found.append(f"{name} has {package} {other or 'missing'}, the client {mine}")
    return found


def check_workers(client: Any, address: str, timeout: float) -> None:
    """Wait for a first worker (:class:`ClusterLostError` after ``timeout`` seconds), then raise
    :class:`ClusterError` when a worker's versions of :data:`CHECKED_PACKAGES` are not the
    client's."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise ClusterLostError(
            f"no dask worker joined the scheduler at {address!r} within {timeout:g} s "
            "(--cluster-timeout); are the workers' jobs running?"
        ) from None
    versions = client.get_versions(packages=list(CHECKED_PACKAGES))
    found = version_mismatches(versions, CHECKED_PACKAGES)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ClusterError(
            f"{found[0]}{more} on the scheduler {address!r}: the workers need the client's "
            f"versions of {', '.join(CHECKED_PACKAGES)}"
        )
