#!/usr/bin/env bash
# Dev: what the sixth session left for the next GPU session, as parts that each fit one
# `run` call (10 min) on the x2 host. Logs under OUTDIR; a short table last.
# Usage: bash benchmarks/gpu_next.sh OUTDIR PART      PART: suite | stitch | cpu | writes
#   suite   every gpu test file (benchmarks/gpu_suite.sh), ~4 min
#   stitch  1- and 2-GPU stitch with the task stream (1.67x in s6), ~2 min
#   cpu     CPU reader on all cores, with the reused-output reader and page faults, ~3 min
#   writes  64^3 and sharded 64^3 write rows, with and without checksums, as the benchmark
#           now writes (last output deleted and os.sync() before each run, ceiling at the
#           array's own paths: not yet run on a GPU host), ~5 min
out=${1:?OUTDIR}; part=${2:?PART}; mkdir -p "$out"
case "$part" in
  suite) bash benchmarks/gpu_suite.sh "$out/suite" 150 ;;
  stitch) timeout 300 python3 benchmarks/dask_gpu.py --gpus 2 --stitch-only --folder /tmp \
      --json "$out/dask_stitch.json" > "$out/dask_stitch.log" 2>&1; tail -6 "$out/dask_stitch.log" ;;
  cpu) timeout 400 python3 benchmarks/cpu_read.py --mib 1024 --rounds 5 \
      > "$out/cpu_read.log" 2>&1; tail -12 "$out/cpu_read.log" ;;
  writes) timeout 560 python3 -c "import sys; from linumpy.cli.linum_benchmark_io import main; \
sys.argv = ['linum-benchmark-io', '$out/bio', '-f', '--checksum', 'both', \
'--chunks', '64', '--row-budget', '1.0', '--workdir', '/tmp/bv']; sys.exit(main())" \
      > "$out/bio.log" 2>&1; grep -i "write" "$out/bio.log" | tail -12 ;;
  *) echo "unknown part: $part" >&2; exit 2 ;;
esac
