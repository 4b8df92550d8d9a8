"""Add a benchmark run's JSON to benchmarks/results/ as the current result of its kind and machine.

The result file is the run's JSON with the machine (in words), the date, the linumpy commit and
the command line added, named ``KIND-YYYY-MM-DD-MACHINE.json``: ``benchmark-io`` for
``linum-benchmark-io``'s ``benchmark_io.json``, ``pipeline`` for ``linum-benchmark-pipeline``'s
``benchmark_pipeline.json``, or ``--kind`` for the other maintained benchmarks. Older result files
of the same kind and machine are deleted (they live in git history); commit the change. The
documentation's Benchmarks page renders the files at build time
(``docs/_ext/benchmark_results.py``).

    python benchmarks/add_result.py OUT/benchmark_io.json --machine "my-host (2 cores)"
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: The kind of a run's JSON, by its ``benchmark`` field.
KINDS = {"linum-benchmark-io": "benchmark-io", "linum-benchmark-pipeline": "pipeline"}
_NAME = re.compile(r"^(?P<kind>[a-z0-9-]+?)-(?P<date>\d{4}-\d{2}-\d{2})-(?P<rest>.+)\.json$")


def slug(machine: str) -> str:
    """The machine's name as a file name: lower case, words joined by ``-``.

    >>> slug("nvidia-h200 (1x H200, 16 cores)")
    'nvidia-h200-1x-h200-16-cores'
    """
    return re.sub(r"[^a-z0-9]+", "-", machine.lower()).strip("-")


def checkout_commit(root: Path = ROOT) -> str:
    """The checkout's short commit, with `` (with changes)`` when files differ from it."""
    git = ["git", "-C", str(root)]
    try:
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if commit.returncode != 0:
        return ""
    return commit.stdout.strip() + (" (with changes)" if dirty.stdout.strip() else "")


def add_result(
    run: dict[str, Any],
    machine: str,
    *,
    kind: str | None = None,
    command: str | None = None,
    commit: str | None = None,
    date: str | None = None,
    results: Path = RESULTS,
) -> Path:
    """Write ``run`` as the result of its kind on ``machine``; delete the older ones.

    Raises
    ------
    ValueError
        When the kind is unknown or the date is not ``YYYY-MM-DD``.
    """
    kind = kind or KINDS.get(str(run.get("benchmark")))
    if not kind or not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", kind):
        raise ValueError(f"kind {kind!r}: give --kind (lower-case words joined by -)")
    recorded = run.get("machine") if isinstance(run.get("machine"), dict) else {}
    date = date or str(recorded.get("date", ""))[:10] or datetime.date.today().isoformat()
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        raise ValueError(f"date {date!r} is not YYYY-MM-DD") from None
    payload = {
        "kind": kind,
        "date": date,
        "commit": commit if commit is not None else checkout_commit(),
        "command": command or str(recorded.get("command", "")),
        **{k: v for k, v in run.items() if k not in ("kind", "date", "commit", "command")},
    }
    if isinstance(payload.get("machine"), dict):
        payload["machine"] = {"name": machine, **payload["machine"]}
    else:
        payload["machine"] = machine
    results.mkdir(parents=True, exist_ok=True)
    target = results / f"{kind}-{date}-{slug(machine)}.json"
    for old in results.glob(f"{kind}-*.json"):
        match = _NAME.match(old.name)
        same = match and match["kind"] == kind and match["rest"].startswith(slug(machine))
        if same and old != target:
            old.unlink()
    target.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    """Run the command line; 0 on success, 2 with a one-line message otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="The run's JSON (OUT/benchmark_io.json, ...).")
    parser.add_argument("--machine", required=True, help="The machine, in words.")
    parser.add_argument("--kind", help="The result's kind [from the run's benchmark field].")
    parser.add_argument("--command", help="The command that ran [as the run recorded it].")
    parser.add_argument("--commit", help="The commit that ran [the checkout's].")
    parser.add_argument("--date", help="YYYY-MM-DD [as the run recorded it].")
    parser.add_argument("--results", type=Path, default=RESULTS, help="[benchmarks/results]")
    args = parser.parse_args(argv)
    try:
        run = json.loads(args.run.read_text())
    except (OSError, ValueError) as exc:
        print(f"add_result: {args.run}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(run, dict):
        print(f"add_result: {args.run}: not a JSON object", file=sys.stderr)
        return 2
    try:
        target = add_result(
            run,
            args.machine,
            kind=args.kind,
            command=args.command,
            commit=args.commit,
            date=args.date,
            results=args.results,
        )
    except ValueError as exc:
        print(f"add_result: {args.run}: {exc}", file=sys.stderr)
        return 2
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
