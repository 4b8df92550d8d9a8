#!/usr/bin/env bash
# Run every `gpu`-marked test on a GPU host, one pytest process per test file, so that a CUDA
# error that poisons one process's context cannot fail the files after it. Each file's log goes
# under OUTDIR; the summary table and every failure's one-line reason (pytest -rfE) are printed
# last.
# Usage: bash benchmarks/gpu_suite.sh OUTDIR [per-file timeout s] [extra pytest args]
# PYTHON names the interpreter (default: .venv/bin/python when present, else python3);
# GPU_TEST_FILES the files to consider (default: tests/test_*.py).
out=${1:?usage: bash benchmarks/gpu_suite.sh OUTDIR [per-file timeout s] [extra pytest args]}
limit=${2:-150}; shift 2 2>/dev/null || shift $#
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
mkdir -p "$out"
# the script tests run linum-* commands as `python -m linumpy.scripts.NAME`
"$PYTHON" -c "import linumpy.scripts" 2>/dev/null || {
  echo "linumpy.scripts is not importable: install linumpy (pip install -e .), or on a host without" \
       "pip access link it: ln -s ../scripts linumpy/scripts" >&2; exit 2; }
printf '| file | result | seconds |\n| --- | --- | --- |\n' > "$out/summary.md"
# shellcheck disable=SC2086  # GPU_TEST_FILES is a list of paths or globs
for f in $(grep -l "mark\.gpu" ${GPU_TEST_FILES:-tests/test_*.py}); do
  name=$(basename "$f" .py); t0=$(date +%s)
  timeout "$limit" "$PYTHON" -m pytest -q -rfE -m gpu -p no:cacheprovider "$f" "$@" \
    > "$out/$name.log" 2>&1
  rc=$?; line=$(grep -E "passed|failed|error|skipped|deselected" "$out/$name.log" | tail -1)
  [ $rc -eq 124 ] && line="TIMEOUT after ${limit}s; $(grep -cE 'PASSED|passed' "$out/$name.log") lines"
  printf '| %s | %s | %s |\n' "$name" "$line" "$(( $(date +%s) - t0 ))" >> "$out/summary.md"
done
grep -hE "^(FAILED|ERROR) " "$out"/test_*.log > "$out/failures.txt"
cat "$out/summary.md"
[ -s "$out/failures.txt" ] && { echo; echo "failures:"; cat "$out/failures.txt"; }
exit 0
