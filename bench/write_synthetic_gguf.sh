#!/usr/bin/env bash
# Writes a synthetic benchmark model (real shapes of a preset, deterministic random weights) as a
# GGUF file that llama.cpp and `ft bench --model` both load; the bytes equal what
# `ft bench --model-preset PRESET --dummy-weights --weight-type TYPE` generates in memory.
#
#   bench/write_synthetic_gguf.sh PRESET TYPE OUT.gguf [--dummy-router-skew S] [--seed N] [--dummy-layers N]
#   e.g. bench/write_synthetic_gguf.sh qwen3-30b-a3b q4_k /dev/shm/qwen3-30b-a3b-q4_k.gguf
#
# FT selects the binary (default: build/ft). `ft bench --list-presets` lists the presets.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,9p' "$0"
  exit 2
fi
FT=${FT:-build/ft}
preset=$1 type=$2 out=$3
shift 3
exec "$FT" bench --model-preset "$preset" --dummy-weights --weight-type "$type" --write-gguf "$out" "$@"
