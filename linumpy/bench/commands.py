"""Running the benchmarked commands: each a process of its own with ``-f -v``, its wall time and
its ``-v`` phases read back, its output and log in folders of the benchmark's own, and a timeout
after which the command prints its threads' stacks and is killed."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from linumpy.bench.pipeline_records import KERNELS_CACHED, CommandRun

__all__ = ["STACKS_GRACE_S", "run_with_timeout"]


def script_argv(module: str) -> list[str]:
    """How to run a script: ``python -m linumpy.scripts.X`` when installed, else its file."""
    try:
        if importlib.util.find_spec(f"linumpy.scripts.{module}") is not None:
            return [sys.executable, "-m", f"linumpy.scripts.{module}"]
    except ImportError:
        pass
    # a source checkout on PYTHONPATH, not installed: the scripts folder beside the package
    return [sys.executable, str(Path(__file__).resolve().parents[2] / "scripts" / f"{module}.py")]


def files_in(folder: str | None) -> int:
    if not folder or not os.path.isdir(folder):
        return 0
    return sum(len(names) for _, _, names in os.walk(folder))


def linumpy_kernels(env: dict[str, str]) -> str | None:
    """linumpy's cubin cache (:mod:`linumpy.gpu.kernel_cache`) under ``env``'s cache home."""
    home = env.get("XDG_CACHE_HOME")
    return os.path.join(home, "linumpy", "kernels") if home else None


#: Seconds a command past its timeout has to print its threads' stacks before it is killed.
STACKS_GRACE_S = 2.0


def run_with_timeout(
    argv: list[str], env: dict[str, str] | None, timeout: float
) -> tuple[int, str, str]:
    """Run ``argv``; return its exit status, stdout and stderr.

    Past ``timeout`` seconds the command is sent SIGUSR1 (``linum-*`` commands then print every
    thread's stack to stderr), given :data:`STACKS_GRACE_S` seconds, then killed: its status is
    -9 and its stderr ends with ``timed out after ... s``.

    Examples
    --------
    >>> import sys
    >>> run_with_timeout([sys.executable, "-c", "print('done')"], None, 60)
    (0, 'done\\n', '')
    """
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
            return process.returncode, stdout, stderr
        except subprocess.TimeoutExpired:
            if hasattr(signal, "SIGUSR1"):
                process.send_signal(signal.SIGUSR1)
            try:
                stdout, stderr = process.communicate(timeout=STACKS_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
        return -9, stdout, f"{stderr}\ntimed out after {timeout:g} s"


def empty_folder(folder: Path) -> None:
    # every run writes a new output, as a first run does: replacing one costs its removal,
    # which only the runs after the first would pay
    folder.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        shutil.rmtree(item) if item.is_dir() else item.unlink()


def timed(
    argv: list[str],
    run: CommandRun,
    *,
    env: dict[str, str],
    log: Path,
    timeout: float,
) -> CommandRun:
    """Run ``argv`` with ``-f -v``; fill ``run`` with its time, phases, status and log."""
    from linumpy.phases import parse_table

    argv = [*argv, "-f", "-v", *(["--use-gpu"] if run.device == "gpu" else [])]
    caches = [env.get("CUPY_CACHE_DIR"), linumpy_kernels(env)]
    cached = sum(files_in(cache) for cache in caches)
    start = time.perf_counter()
    code, stdout, stderr = run_with_timeout(argv, env, timeout)
    run.seconds = round(time.perf_counter() - start, 3)
    log.write_text(f"$ {' '.join(argv)}\n{stdout}\n{stderr}")
    table = parse_table(stderr)
    run.phases = dict(table.seconds) if table else {}
    run.counts = {}
    if run.device == "gpu" and caches[0]:  # kernels the run added to the caches: compiled
        run.counts[KERNELS_CACHED] = sum(files_in(cache) for cache in caches) - cached
    run.returncode, run.log = code, str(log)
    if code != 0:
        run.error = (stderr.strip().splitlines() or ["failed"])[-1][:300]
    return run


def log_name(logs: Path, label: str, *parts: str) -> Path:
    return logs / "-".join([label.replace(" ", "_").replace(",", ""), *parts, "log"])
