#!/usr/bin/env bash
# A/B of two `ft` binaries (or one binary under two environments) on the decode runs of issues 6 and 7,
# interleaved in one call so that both see the same machine: each case runs A, B, A, B, ... (ROUNDS
# pairs), then one line per case gives every run's decode tok/s and the ratio of the means, B / A.
# The host CPU, clocks and even the GPU differ between leases of the same machine kind, so only
# numbers from one call compare.
#
#   bench/ab.sh A_BIN B_BIN [CASE...]
#     q4k-b1 bf16-b1    qwen3-30b-a3b, all experts on the GPU, batch 1 (prompt 512, gen GEN)
#     q4k-b8 q4k-b32    the same, q4_k, batch 8 and 32
#     q4k-4k            q4_k, batch 1 after a 4096-token prompt
#     offload-skew1 hybrid-skew0 cpu-skew0
#                       bf16 under --gpu-memory-limit 24 (issue 7's runs; prompt 256, gen 64)
#   Default cases: q4k-b1 bf16-b1 q4k-b8 q4k-4k.
#
# A_ENV / B_ENV: environment assignments for A's / B's runs (e.g. B_ENV="FT_CUDA_PDL=0" with the same
# binary twice). ROUNDS (default 2), GEN (default 128), OUT_DIR (default /tmp/ft-ab), DEVICE (default
# cuda), LAYERS30 (default all; DEVICE=cpu LAYERS30=1 GEN=4 makes a smoke test on a CPU machine).
# Every run has a time limit (LIMIT seconds, default 300). Needs python3.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,20p' "$0"
  exit 2
fi
A=$1 B=$2
shift 2
CASES=("$@")
[ ${#CASES[@]} -eq 0 ] && CASES=(q4k-b1 bf16-b1 q4k-b8 q4k-4k)
ROUNDS=${ROUNDS:-2} GEN=${GEN:-128} OUT_DIR=${OUT_DIR:-/tmp/ft-ab} DEVICE=${DEVICE:-cuda} LIMIT=${LIMIT:-300}
LAYERS30=${LAYERS30:-}
A_ENV=${A_ENV:-} B_ENV=${B_ENV:-}
mkdir -p "$OUT_DIR"
Q30="--model-preset qwen3-30b-a3b --dummy-weights --device $DEVICE${LAYERS30:+ --dummy-layers $LAYERS30}"
OFF="$Q30 --weight-type bf16 --gpu-memory-limit 24 --prompt-tokens 256 --gen-tokens 64 --batch 1"

# args CASE: the ft bench arguments of a case
args() {
  case $1 in
    q4k-b1) echo "$Q30 --weight-type q4_k --prompt-tokens 512 --gen-tokens $GEN --batch 1" ;;
    bf16-b1) echo "$Q30 --weight-type bf16 --prompt-tokens 512 --gen-tokens $GEN --batch 1" ;;
    q4k-b8) echo "$Q30 --weight-type q4_k --prompt-tokens 512 --gen-tokens $GEN --batch 8" ;;
    q4k-b32) echo "$Q30 --weight-type q4_k --prompt-tokens 512 --gen-tokens $GEN --batch 32" ;;
    q4k-4k) echo "$Q30 --weight-type q4_k --prompt-tokens 4096 --gen-tokens $GEN --batch 1" ;;
    offload-skew1) echo "$OFF --moe-strategy offload --dummy-router-skew 1" ;;
    hybrid-skew0) echo "$OFF --moe-strategy hybrid --dummy-router-skew 0" ;;
    cpu-skew0) echo "$OFF --moe-strategy cpu --dummy-router-skew 0" ;;
    *) return 1 ;;
  esac
}

for c in "${CASES[@]}"; do
  if ! a=$(args "$c"); then
    echo "unknown case '$c'"
    exit 2
  fi
  for ((r = 1; r <= ROUNDS; ++r)); do
    for side in A B; do
      bin=$A env_=$A_ENV
      [ $side = B ] && bin=$B env_=$B_ENV
      # shellcheck disable=SC2086  # word splitting of the argument and environment lists is meant
      env $env_ timeout "$LIMIT" "$bin" bench --json $a > "$OUT_DIR/$c-$side-$r.json" 2> "$OUT_DIR/$c-$side-$r.log" ||
        echo "$c $side run $r: rc $? ($(tail -c 200 "$OUT_DIR/$c-$side-$r.log" | tr '\n' ' '))"
    done
  done
  python3 - "$OUT_DIR" "$c" "$ROUNDS" <<'PY'
import json, sys
out, case, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def tok(side, r):
    try:
        return json.load(open(f"{out}/{case}-{side}-{r}.json"))["results"][0]["decode_tokens_per_s"]
    except Exception:
        return None
runs = {s: [tok(s, r) for r in range(1, rounds + 1)] for s in "AB"}
def fmt(v):
    return "-" if v is None else f"{v:.1f}"
def mean(v):
    v = [x for x in v if x]
    return sum(v) / len(v) if v else None
ma, mb = mean(runs["A"]), mean(runs["B"])
ratio = f"{mb / ma:.3f}" if ma and mb else "-"
print(f"{case:14} A {' / '.join(fmt(v) for v in runs['A']):24} B {' / '.join(fmt(v) for v in runs['B']):24} B/A {ratio}")
PY
done
