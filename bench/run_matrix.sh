#!/usr/bin/env bash
# Runs the benchmark matrices of the CUDA-backend and expert-offload issues in one call and prints
# one summary line per run (decode tok/s at each batch, ms/step, prefill tok/s, and for offloaded
# experts the hit rate, fetched bytes, CPU experts and the fraction of the hit-rate ceiling), so a
# short lease of the GPU machine yields the whole table. Every run writes its JSON and log to
# $OUT_DIR (default /tmp/ft-matrix) and has its own time limit, so one stuck run loses only itself.
#
#   bench/run_matrix.sh SET [SET...]
#     fused       qwen3-30b-a3b q4_k and bf16, all experts on the GPU: decode at batch 1,8,32
#                 (prompt 512, gen 256) and a 4k-token prefill            (issue 6)
#     offload     qwen3-30b-a3b bf16 under --gpu-memory-limit 24: offload and hybrid at router skew 0
#                 and 1, cpu at skew 0, an 8k-token prefill under offload  (issue 7)
#     235b        qwen3-235b-a22b q4_k under --gpu-memory-limit 24 on one GPU: offload at skew 0 and
#                 1, hybrid and cpu at skew 0. All 94 layers need ~126 GiB of host RAM (the two-GPU
#                 machine); LAYERS=64 keeps the first 64 (~86 GiB) for a 128 GiB host
#     quick       one fused and one offload run, to check a build
#     families    deepseek-v3 (DS_LAYERS, default 18: ~93 GiB of q4_k), glm-4.5-air (GLM_LAYERS, default
#                 0: all 46, ~72 GiB) and minimax-m2 (MM_LAYERS, default 48: ~93 GiB) in q4_k: fused
#                 with no memory limit, then offload, hybrid and cpu under --gpu-memory-limit 24; each
#                 run a PROMPT-token prefill (default 4096) then GEN batch-1 decode steps  (issue 33)
#     arch4       issue 42's presets under --gpu-memory-limit 24, offload and hybrid at router skew SKEW
#                 (default 1): bs1 and 16-stream decode (prompt 512, GEN steps) and an 8k prefill (gen 0).
#                 deepseek-v4-flash: FP8 dense weights, MXFP4 experts (as released), DS4_LAYERS (default
#                 24: ~83 GiB of host banks) of its 43 layers; qwen3.8-flash-next: Q4_K, QN_LAYERS (default
#                 16, the PLE layer's n-gram table included: Q8_0, 51 GiB) of 48. Fewer layers would give
#                 each layer more of the 24 GiB, so the expert cache is held at the fraction of the experts
#                 the whole model gets: DS4_RATE 0.1 ~ (24 GiB - 9.27 GiB dense of 43 layers + 0.99 GiB
#                 token embedding moved to the host - ~1 GiB KV and buffers) / 137.2 GiB of experts = 0.107,
#                 less the KV the default --kv-reserve-tokens 8192 keeps (2.25 GiB at 24 layers; 0.107 was
#                 refused 378 MiB short on an H100, session 40), in slots of 12.76 MiB; QN_RATE 0.24 = (24 - 3.2 GiB dense - ~1 GiB) / 82 GiB of experts
#                 (3.42 MiB slots). The dense sizes are `ft bench`'s own counts at 1-3 layers. PREFILL8K=0
#                 skips the prefill runs; PRESETS4 picks presets (default "deepseek-v4-flash qwen3.8-flash-next"),
#                 STRATS4 the strategies (default "offload hybrid"; "cpu" gives the per-strategy rows' third).
#     gptoss      issue 34: gpt-oss-120b (MXFP4 experts, BF16 dense) under --gpu-memory-limit 24, batch 1
#                 (prompt 256, GEN steps) at router skew SKEWS (default "0 1") for STRATS (default
#                 "auto offload hybrid")
#
# FT selects the binary (default build/ft), GEN the decode steps of the offload sets (default 64),
# DEVICE the device (default cuda), LAYERS30 the layers of the qwen3-30b-a3b runs (default all; a
# smoke test on a CPU machine: DEVICE=cpu LAYERS30=2 bench/run_matrix.sh quick). Needs python3.
set -uo pipefail
FT=${FT:-build/ft}
OUT_DIR=${OUT_DIR:-/tmp/ft-matrix}
GEN=${GEN:-64}
LAYERS=${LAYERS:-94}
DEVICE=${DEVICE:-cuda}
LAYERS30=${LAYERS30:-}
DS_LAYERS=${DS_LAYERS:-18}
MM_LAYERS=${MM_LAYERS:-48}
GLM_LAYERS=${GLM_LAYERS:-0}
PROMPT=${PROMPT:-4096}
mkdir -p "$OUT_DIR"
if [ $# -lt 1 ]; then
  sed -n '2,39p' "$0"
  exit 2
fi

# summary NAME: one line from $OUT_DIR/NAME.json
summary() {
  python3 - "$OUT_DIR/$1.json" "$1" <<'PY'
import json, sys
path, name = sys.argv[1], sys.argv[2]
try:
    j = json.load(open(path))
except Exception as e:
    print(f"{name:28} no result ({e.__class__.__name__})")
    sys.exit(0)
def f(v, fmt):
    return "-" if v is None else format(v, fmt)
parts = []
for r in j["results"]:
    s = f"b{r['batch']} {f(r['decode_tokens_per_s'], '.1f')} tok/s {f(r['ms_per_step'], '.2f')} ms"
    m = r.get("moe_cache")
    if m:
        ceil = m.get("ceiling_tokens_per_s")
        pct = 100 * r["decode_tokens_per_s"] / ceil if ceil and r["decode_tokens_per_s"] else None
        fetched = m.get("fetched_bytes_per_step")  # null (like the others) for prefill-only runs
        s += (f" hit {f(m.get('hit_rate') and 100 * m['hit_rate'], '.1f')}% fetched/step "
              f"{f(fetched and fetched / 2**30, '.2f')} GiB cpu/step {f(m.get('cpu_experts_per_step'), '.1f')} "
              f"cpu ms/step {f(m.get('cpu_ms_per_step'), '.2f')} pf/step {f(m.get('prefetched_per_step'), '.1f')} "
              f"ceiling {f(ceil, '.1f')} ({f(pct, '.1f')}%)")
        hc = m.get("host_ceiling_tokens_per_s")
        if hc:
            s += f" host ceiling {hc:.1f} ({100 * r['decode_tokens_per_s'] / hc:.1f}%, {j.get('host_read_bandwidth_gbs') or 0:.1f} GB/s)"
    parts.append(s)
pre = j["results"][0]["prefill_tokens_per_s"]
print(f"{name:28} prefill {pre:,.0f} tok/s | " + " | ".join(parts) + f" | {j.get('moe_plan', '')[:60]}")
PY
}

# bench NAME LIMIT_S ARGS...: one ft bench run with a time limit
bench() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$FT" bench --json "$@" > "$OUT_DIR/$name.json" 2> "$OUT_DIR/$name.log"
  local rc=$?
  [ $rc -ne 0 ] && echo "$name: rc $rc ($(tail -c 300 "$OUT_DIR/$name.log" | tr '\n' ' '))"
  summary "$name"
}

Q30="--model-preset qwen3-30b-a3b --dummy-weights --device $DEVICE${LAYERS30:+ --dummy-layers $LAYERS30}"
OFF="$Q30 --weight-type bf16 --gpu-memory-limit 24 --prompt-tokens 256 --gen-tokens $GEN --batch 1"
B235="--model-preset qwen3-235b-a22b --dummy-weights --dummy-layers $LAYERS --device $DEVICE --weight-type q4_k \
  --gpu-memory-limit 24 --prompt-tokens 64 --gen-tokens 16 --batch 1"

for set in "$@"; do
  case $set in
    fused)
      for wt in q4_k bf16; do
        bench "fused-$wt-decode" 300 $Q30 --weight-type $wt --prompt-tokens 512 --gen-tokens 256 --batch 1,8,32
        bench "fused-$wt-prefill4k" 200 $Q30 --weight-type $wt --prompt-tokens 4096 --gen-tokens 0 --batch 1
      done ;;
    offload)
      for skew in 0 1; do
        bench "offload-skew$skew" 120 $OFF --moe-strategy offload --dummy-router-skew $skew
        bench "hybrid-skew$skew" 150 $OFF --moe-strategy hybrid --dummy-router-skew $skew
      done
      bench "cpu-skew0" 150 $OFF --moe-strategy cpu --dummy-router-skew 0
      bench "offload-prefill8k" 200 $Q30 --weight-type bf16 --gpu-memory-limit 24 --moe-strategy offload \
        --prompt-tokens 8192 --gen-tokens 0 --batch 1 --max-prefill-tokens 8192 ;;
    235b)
      bench "235b-${LAYERS}L-offload-skew0" 240 $B235 --moe-strategy offload --dummy-router-skew 0
      bench "235b-${LAYERS}L-offload-skew1" 240 $B235 --moe-strategy offload --dummy-router-skew 1
      for s in hybrid cpu; do bench "235b-${LAYERS}L-$s-skew0" 240 $B235 --moe-strategy $s --dummy-router-skew 0; done ;;
    quick)
      bench "quick-fused-q4_k" 120 $Q30 --weight-type q4_k --prompt-tokens 512 --gen-tokens 64 --batch 1
      bench "quick-offload-skew1" 120 $OFF --moe-strategy offload --dummy-router-skew 1 ;;
    families)
      for m in "deepseek-v3 --dummy-layers $DS_LAYERS" "glm-4.5-air --dummy-layers $GLM_LAYERS" \
               "minimax-m2 --dummy-layers $MM_LAYERS"; do
        name=${m%% *}
        FAM="--model-preset $m --dummy-weights --device $DEVICE --weight-type q4_k --prompt-tokens $PROMPT \
          --gen-tokens $GEN --batch 1"
        bench "$name-fused" 400 $FAM --moe-strategy fused
        for s in offload hybrid cpu; do bench "$name-$s" 500 $FAM --gpu-memory-limit 24 --moe-strategy $s; done
      done ;;
    arch4)
      for m in "deepseek-v4-flash --dummy-layers ${DS4_LAYERS:-24} --weight-type fp8 --moe-cache-rate ${DS4_RATE:-0.1}" \
               "qwen3.8-flash-next --dummy-layers ${QN_LAYERS:-16} --weight-type q4_k --moe-cache-rate ${QN_RATE:-0.24}"; do
        name=${m%% *}
        [[ " ${PRESETS4:-deepseek-v4-flash qwen3.8-flash-next} " == *" $name "* ]] || continue
        for s in ${STRATS4:-offload hybrid}; do
          # cpu has no expert cache: no --moe-cache-rate
          A4="--model-preset $m"
          [ "$s" = cpu ] && A4="--model-preset ${m/ --moe-cache-rate*/}"
          A4="$A4 --dummy-weights --device $DEVICE --gpu-memory-limit 24 --dummy-router-skew ${SKEW:-1}"
          bench "$name-$s-decode" 300 $A4 --moe-strategy $s --prompt-tokens 512 --gen-tokens $GEN --batch 1,16
          [ "${PREFILL8K:-1}" = 1 ] && bench "$name-$s-prefill8k" 300 $A4 --moe-strategy $s --prompt-tokens 8192 \
            --gen-tokens 0 --batch 1 --max-prefill-tokens 8192
        done
      done ;;
    gptoss)
      for skew in ${SKEWS:-0 1}; do
        for s in ${STRATS:-auto offload hybrid}; do
          bench "gpt-oss-120b-$s-skew$skew" 240 --model-preset gpt-oss-120b --dummy-weights --device $DEVICE \
            --gpu-memory-limit 24 --moe-strategy $s --dummy-router-skew $skew --prompt-tokens 256 --gen-tokens $GEN --batch 1
        done
      done ;;
    *) echo "unknown set '$set' (fused, offload, 235b, quick, families, arch4, gptoss)"; exit 2 ;;
  esac
done
