#!/usr/bin/env bash
# Dev: run every `gpu`-marked test on a GPU host, one pytest process per test file, so a CUDA
# error that poisons one process's context cannot fail the files after it. Logs under $1; the
# summary table and every failure's one-line reason (pytest -rfE) are printed last, since only a
# few of the logs come back from the device.
# Usage: bash benchmarks/gpu_suite.sh OUTDIR [per-file timeout s] [extra pytest args]
out=${1:?OUTDIR}; limit=${2:-150}; shift 2 2>/dev/null; mkdir -p "$out"
printf '| file | result | seconds |\n| --- | --- | --- |\n' > "$out/summary.md"
for f in $(grep -l "pytest.mark.gpu\|mark.gpu" tests/test_*.py); do
  name=$(basename "$f" .py); t0=$(date +%s)
  timeout "$limit" python3 -m pytest -q -rfE -m gpu -p no:cacheprovider "$f" "$@" > "$out/$name.log" 2>&1
  rc=$?; line=$(grep -E "passed|failed|error|skipped" "$out/$name.log" | tail -1)
  [ $rc -eq 124 ] && line="TIMEOUT after ${limit}s; $(grep -cE 'PASSED|passed' "$out/$name.log") lines"
  printf '| %s | %s | %s |\n' "$name" "$line" "$(( $(date +%s) - t0 ))" >> "$out/summary.md"
done
grep -hE "^(FAILED|ERROR) " "$out"/test_*.log > "$out/failures.txt"
cat "$out/summary.md"
[ -s "$out/failures.txt" ] && { echo; echo "failures:"; cat "$out/failures.txt"; }
exit 0
