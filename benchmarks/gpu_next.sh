#!/usr/bin/env bash
# Dev: GPU-host measurements as parts that each fit one `run` call (10 min) on the x2 host
# (all ran in the seventh session: docs/dev/runs/s7). Logs under OUTDIR; a short table last.
# Usage: bash benchmarks/gpu_next.sh OUTDIR PART
#   PART: suite|stitch|shm|share|cpu|writes|encode|wphases
#   suite   every gpu test file (benchmarks/gpu_suite.sh), ~4 min
#   stitch  1- and 2-GPU stitch with the task stream (1.67x in s6), ~2 min
#   cpu     CPU reader on all cores, with the reused-output reader and page faults, ~3 min;
#           against .whl/cpu_before.py when present (s6: `git show ecede4f:linumpy/io/engine/
#           cpu.py > .whl/cpu_before.py`, the back end before the runs of chunks)
#   shm     the stitch of `stitch` with its output on /dev/shm: if the 2-GPU ratio reaches
#           1.8x there, the file system under two writers is what the workers share, ~2 min
#   share   128^3 GPU reads with part of the frames decoded by libzstd on the 32 cores
#           (LINUMPY_GPU_CPU_SHARE 0, 0.15, 0.3; issue 10's 128^3 target), ~8 min
#   writes  64^3 and sharded 64^3 write rows, with and without checksums, as the benchmark
#           now writes (last output deleted and os.sync() before each run, ceiling at the
#           array's own paths), ~5 min
#   encode  one nvCOMP encode call against its batch size, two streams at once, ~15 s
#   wphases GPU write engine phases with scratch 2048/512/8192 MiB, encode ceiling, ~1 min
out=${1:?OUTDIR}; part=${2:?PART}; mkdir -p "$out"
case "$part" in
  suite) bash benchmarks/gpu_suite.sh "$out/suite" 150 ;;
  stitch) timeout 300 python3 benchmarks/dask_gpu.py --gpus 2 --stitch-only --folder /tmp \
      --json "$out/dask_stitch.json" > "$out/dask_stitch.log" 2>&1; tail -6 "$out/dask_stitch.log" ;;
  cpu) base=""; [ -f .whl/cpu_before.py ] && base="--baseline .whl/cpu_before.py"
    timeout 400 python3 benchmarks/cpu_read.py --mib 1024 --rounds 5 $base \
      > "$out/cpu_read.log" 2>&1; tail -12 "$out/cpu_read.log" ;;
  shm) timeout 300 python3 benchmarks/dask_gpu.py --gpus 2 --stitch-only --folder /tmp \
      --out-folder /dev/shm --json "$out/dask_stitch_shm.json" > "$out/dask_stitch_shm.log" 2>&1
    tail -4 "$out/dask_stitch_shm.log" ;;
  share) for f in 0 0.15 0.3; do LINUMPY_GPU_CPU_SHARE=$f timeout 170 python3 -c "import sys; \
from linumpy.scripts.linum_benchmark_io import main; sys.argv = ['linum-benchmark-io', '$out/share$f', \
'-f', '--no-shard', '--chunks', '128', '--no-writes', '--row-budget', '1.0', '--workdir', \
'/tmp/bs']; sys.exit(main())" > "$out/share$f.log" 2>&1; echo "share $f"
      grep -E "read_volume\(gpu=True\)|nvCOMP" "$out/share$f/benchmark_io.md" | tail -3; done ;;
  writes) timeout 560 python3 -c "import sys; from linumpy.scripts.linum_benchmark_io import main; \
sys.argv = ['linum-benchmark-io', '$out/bio', '-f', '--checksum', 'both', \
'--chunks', '64', '--row-budget', '1.0', '--workdir', '/tmp/bv']; sys.exit(main())" \
      > "$out/bio.log" 2>&1; grep -i "write" "$out/bio.log" | tail -12 ;;
  encode) timeout 120 python3 benchmarks/encode_calls.py > "$out/encode_calls.log" 2>&1
    tail -12 "$out/encode_calls.log" ;;
  wphases) timeout 300 python3 benchmarks/write_phases.py --workdir /tmp/wp \
      > "$out/write_phases.log" 2>&1; tail -21 "$out/write_phases.log" ;;
  *) echo "unknown part: $part" >&2; exit 2 ;;
esac
