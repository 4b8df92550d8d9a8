"""Dated results of ``linum-benchmark-io``, kept as JSON under ``benchmarks/results/``, and the
tables and chart that ``docs/benchmarks.md`` shows of them: the command line over
:mod:`linumpy.bench.result_files` (the result files), :mod:`linumpy.bench.result_page` (the
page's generated section) and :mod:`linumpy.bench.result_chart` (its charts).

A result file records one run: its date, the machine, the versions, the commit and the command,
with the run's rows as ``linum-benchmark-io`` wrote them (``OUT_DIR/benchmark_io.json``). The
documentation shows the newest result of each machine: a table of every row by layout, and a
chart of the warm reads whose PNG metadata names the JSON it was drawn from (its SHA-256), so a
test can tell a stale page or chart from a current one.

Run as ``python -m linumpy.bench.results``:

- ``add RUN_JSON --machine M --command C [--commit REV] [--date YYYY-MM-DD]`` writes a result
  file from a run's ``benchmark_io.json``;
- ``render`` rewrites the generated section of ``docs/benchmarks.md`` and the charts;
- ``check`` exits 1, saying what is stale, when the page or a chart does not match the JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from linumpy.bench.files import BenchInputError
from linumpy.bench.result_files import parse_record, record_from_run
from linumpy.bench.result_page import check_docs, render_docs

__all__ = ["main"]


def _head_commit(root: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise BenchInputError("--commit is needed outside a git checkout")
    return done.stdout.strip()


def _build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m linumpy.bench.results", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--root", type=Path, default=Path.cwd(), help="the checkout [the current directory]"
    )
    commands = parser.add_subparsers(dest="action", required=True)
    add = commands.add_parser("add", help="write a result file from a run's benchmark_io.json")
    add.add_argument("run", type=Path, help="OUT_DIR/benchmark_io.json of linum-benchmark-io")
    add.add_argument("--machine", required=True, help="the machine, in words")
    add.add_argument("--command", required=True, help="the command line of the run")
    add.add_argument("--commit", help="the linumpy commit that ran [the checkout's HEAD]")
    add.add_argument("--date", help="YYYY-MM-DD [the run's date]")
    commands.add_parser("render", help="rewrite docs/benchmarks.md's results and the charts")
    commands.add_parser("check", help="exit 1 when the page or a chart does not match the JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command line: ``add``, ``render`` or ``check`` (see the module's docstring); the exit
    status: 0, 1 for a stale page or chart, 2 for a bad input.

    Examples
    --------
    >>> from linumpy.bench.results import main
    >>> main(["--root", "no-such-checkout", "check"])  # says what is stale on stderr
    1
    """
    args = _build_arg_parser().parse_args(argv)
    root = args.root
    results = root / "benchmarks" / "results"
    page, images = root / "docs" / "benchmarks.md", root / "docs" / "images"
    try:
        if args.action == "add":
            payload = record_from_run(
                json.loads(args.run.read_text()),
                machine=args.machine,
                command=args.command,
                commit=args.commit or _head_commit(root),
                date=args.date,
            )
            record = parse_record(payload, args.run)
            target = results / f"benchmark-io-{record.date}-{record.slug}.json"
            results.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(payload, indent=1) + "\n")
            print(f"wrote {target}; now run: python -m linumpy.bench.results render")
        elif args.action == "render":
            for path in render_docs(results, page, images):
                print(f"wrote {path}")
        else:
            problems = check_docs(results, page, images)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run: python -m linumpy.bench.results render", file=sys.stderr)
                return 1
    except (BenchInputError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
