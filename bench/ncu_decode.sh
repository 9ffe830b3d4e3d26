#!/usr/bin/env bash
# Per-kernel time of eager decode steps under Nsight Compute, the table bench/RESULTS.md and
# bench/CUDA_NOTES.md quote ("ncu, per layer"). Runs `ft bench` on a 4-layer model of a preset's shapes
# (a 512-token prompt, 40 decode steps, CUDA graphs off so each kernel is its own launch), profiles 460
# launches after the first 700 (prefill and warm-up), and prints kernels by total time: total us,
# launches, mean us, DRAM bytes read, achieved occupancy. Caches are not flushed and clocks not locked
# (ncu's defaults would inflate kernels of a few microseconds by ~30%).
#
#   bench/ncu_decode.sh [PRESET] [TYPE] [OUT_DIR]     e.g. bench/ncu_decode.sh qwen3-30b-a3b q4_k /tmp
#
# FT selects the binary (default: build/ft), NCU the profiler (default: ncu on PATH, else
# /usr/local/cuda/bin/ncu), BATCH the decode batch (default 1; 16: the 16-stream step). Divide the totals by 5 steps x 4 layers for one layer's kernels.
set -euo pipefail
preset=${1:-qwen3-30b-a3b} type=${2:-q4_k} out=${3:-.}
FT=${FT:-build/ft}
BATCH=${BATCH:-1}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
log="$out/ncu_${preset}_${type}_b${BATCH}.txt"
"$NCU" --cache-control none --clock-control none --launch-skip 700 --launch-count 460 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
  --print-summary per-kernel \
  "$FT" bench --model-preset "$preset" --dummy-weights --dummy-layers 4 --device cuda --weight-type "$type" \
  --prompt-tokens 512 --gen-tokens 40 --batch "$BATCH" --cuda-graph-max-bs 0 > "$log" 2>&1
python3 - "$log" <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
rows = []
for block in re.split(r'\n(?=  \S)', txt):
    name = re.sub(r'\(anonymous namespace\)::|unnamed>::', '', block.strip().split('\n')[0])[:90]
    inv = re.search(r'Invocations\s+(\d+)', block)
    t = re.search(r'gpu__time_duration.sum\s+(\S+)\s+[\d.,]+\s+[\d.,]+\s+([\d.,]+)', block)
    d = re.search(r'dram__bytes_read.sum\s+(\S+)\s+[\d.,]+\s+[\d.,]+\s+([\d.,]+)', block)
    w = re.search(r'sm__warps_active.avg.pct_of_peak_sustained_active\s+\S+\s+[\d.,]+\s+[\d.,]+\s+([\d.,]+)', block)
    if t and inv:
        n, mean = int(inv.group(1)), float(t.group(2).replace(',', ''))
        rows.append((n * mean, n, t.group(1), mean, (d.group(1) + ' ' + d.group(2)) if d else '-', w.group(1) if w else '-', name))
rows.sort(reverse=True)
print('total %.1f' % sum(r[0] for r in rows))
for r in rows:
    print('%9.1f %4d %s %7.2f  dram %-14s occ %6s%%  %s' % r)
PY
