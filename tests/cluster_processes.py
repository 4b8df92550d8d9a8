"""A dask scheduler and workers as separate processes on 127.0.0.1, each in a working directory of
its own with its own ``--local-directory``, as on a cluster's nodes: for the cluster tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: Seconds a process may take to start (imports on a loaded machine).
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackCluster:
    """A scheduler (``python -m distributed.cli.dask_scheduler``) and workers (``dask_worker``,
    no nanny: a killed worker stays dead), each started in ``root / NAME``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler = self._spawn(
            "scheduler",
            "distributed.cli.dask_scheduler",
            ["--host", "127.0.0.1", "--port", str(self.port), "--no-dashboard"],
        )
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                break
            if time.monotonic() > deadline or self.scheduler.poll() is not None:
                self.close()
                raise RuntimeError(f"the scheduler did not start: {self.log('scheduler')}")
            time.sleep(0.1)

    def folder(self, name: str) -> Path:
        return self.root / name

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-2000:]

    def _spawn(self, name: str, module: str, args: list[str]) -> subprocess.Popen[bytes]:
        folder = self.folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - the process writes it
        # the tests' own task functions (below) are importable there, as linumpy's are
        path = os.pathsep.join(
            filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
        return subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=folder, stdout=log, stderr=log, env=env
        )

    def start_worker(self, name: str, *, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start a worker of 1 thread and 2 GiB in ``root / name`` (its working directory)."""
        args = [self.address, "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny"]
        args += ["--memory-limit", "2GiB", "--name", name, "--no-dashboard"]
        args += ["--local-directory", str(self.folder(name) / "dask-local")]
        self.folder(name).mkdir(parents=True, exist_ok=True)
        process = self._spawn(name, "distributed.cli.dask_worker", args)
        self.workers[name] = process
        if wait:
            self.wait_for(name)
        return process

    def wait_for(self, name: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "Registered to" not in self.log(name) and "Starting established" not in self.log(
            name
        ):
            if time.monotonic() > deadline or self.workers[name].poll() is not None:
                raise RuntimeError(f"worker {name} did not start: {self.log(name)}")
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        self.workers[name].send_signal(signal.SIGKILL)
        self.workers[name].wait()

    def close(self) -> None:
        for process in [*self.workers.values(), self.scheduler]:
            if process.poll() is None:
                process.terminate()
        for process in [*self.workers.values(), self.scheduler]:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def slow_or_failing(block: np.ndarray, marker: str) -> np.ndarray:
    """A task that fails if it is the job's first to run (it creates ``marker``), else takes a
    second."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        time.sleep(1.0)
        return block
    raise ValueError("the first task found a corrupt chunk")


def sleep_a_second(block: np.ndarray) -> np.ndarray:
    """A task that takes a second."""
    time.sleep(1.0)
    return block
