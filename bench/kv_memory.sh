#!/usr/bin/env bash
# Issue 39's GPU acceptance in one call: qwen3-30b-a3b with BF16 weights (synthetic: --dummy-weights, written
# once as a GGUF file so that `ft serve` can load it; the same bytes `ft bench --model-preset ... --dummy-weights`
# makes) under --gpu-memory-limit 24, KV in BF16 against FP8.
#
#   bench/kv_memory.sh FT_BIN [OUT_DIR]        (OUT_DIR default /tmp/ft-kv; every run's logs and JSON there)
#   DEVICE=cpu bench/kv_memory.sh build-cpu/ft  (smoke test of the logic: tiny-moe, small token counts)
#
# 1. fit: the context that fits. Under offload/hybrid the expert cache takes whatever the KV cache leaves
#    (--moe-cache-auto), so "fits" is read as: the largest `ft serve -c` (--kv-tokens: the KV pool over all
#    requests) the memory plan accepts with the default flags, where the expert cache shrinks to its
#    legal minimum (2 x 128 slots: prefill streams two layers). Found from the plan's own refusals: a start
#    with --kv-reserve-tokens 1e9 says how many KV tokens fit beside the resident weights ("about R"), a
#    start at R says how far to lower for the smallest cache; that figure, in whole pages, is then started
#    for real (its /v1/stats memory rows kept: KV bytes a token, slots) and one page more must be refused.
#    Decoding at that point would miss nearly every expert: it is the memory ceiling, not a serving
#    recommendation; what FP8 buys at a usable context is the slot count at 32k in part 2.
# 2. decode: `ft bench --prompt-tokens CTX --gen-tokens GEN --batch 1` per KV dtype (default CTX 32768): bs1
#    decode tok/s at 32k context, the 32k prefill's tok/s (the bench prefills twice: warm-up and timed) and
#    the expert-cache slots the plan left beside 32k tokens of KV (moe_cache_slots).
# 3. turns: time to first token of turn 2 of a TURN1-token agent conversation (default 30000, turn 2 = turn 1
#    + 500 new tokens) after fillers evicted turn 1 from the device KV (-c KV_TOKENS, default 32768),
#    `ft serve --kv-host-gib HOST_GIB` (the pages come back from host memory) against no host tier (turn 1
#    recomputed); also turn 1's cold TTFT and a device hit for reference. bench/kv_turns.py is the client;
#    cached_tokens and /v1/stats kv.tiers hit pages prove which tier served. KV dtype TURN_KV (bf16).
# Every server gets --max-prefill-tokens CHUNK (8192): at ft serve's default of 512 each prompt chunk of
# a 30k prompt would stream every offloaded expert again (60 times instead of 4).
#
# Environment (GPU defaults; DEVICE=cpu switches to the smoke defaults in brackets):
#   DEVICE cuda [cpu]; PRESET qwen3-30b-a3b [tiny-moe]; WEIGHT_TYPE bf16; LAYERS (--dummy-layers, empty: all);
#   GPU_LIMIT 24 [0.03] GiB; KV_DTYPES "bf16 fp8" ["f32 fp8": the CPU backend keeps no bf16 KV];
#   CTX 32768 [1024]; GEN 64 [8]; TURN1 30000 [1500]; NEW 500 [100]; KV_TOKENS 32768 [2048];
#   TURN_KV bf16 [f32]; HOST_GIB 8 [0.05]; CHUNK 8192 [512]; PARTS "decode fit turns";
#   GGUF /dev/shm/ft-kv-PRESET-TYPE.gguf [OUT_DIR/...] (reused when present; one this script wrote is removed
#   at the end unless KEEP_GGUF=1);
#   LIMIT 300 s per run; BUDGET 450 s for the whole script (runs get what is left; parts past it skipped).
# Expected wall time on an H100/H200 (16 cores), an estimate before the first run: 4-6 minutes (GGUF write
# ~1 min, decode ~1, fit ~1, turns ~1-1.5); BUDGET keeps it under 8. Needs python3 (standard library) and
# ~58 GiB free in /dev/shm for the GGUF (57 GiB; generating it takes as much memory again, once).
set -uo pipefail
if [ $# -lt 1 ]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"
  exit 2
fi
FT=$(realpath "$1")
OUT_DIR=${2:-/tmp/ft-kv}
HERE=$(cd "$(dirname "$0")" && pwd)
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cpu ]; then
  S_PRESET=tiny-moe S_LIMIT=0.03 S_KV="f32 fp8" S_CTX=1024 S_GEN=8 S_T1=1500 S_NEW=100 S_KVT=2048 S_TKV=f32
  S_HOST=0.05 S_CHUNK=512
else
  S_PRESET=qwen3-30b-a3b S_LIMIT=24 S_KV="bf16 fp8" S_CTX=32768 S_GEN=64 S_T1=30000 S_NEW=500 S_KVT=32768 S_TKV=bf16
  S_HOST=8 S_CHUNK=8192
fi
PRESET=${PRESET:-$S_PRESET} WEIGHT_TYPE=${WEIGHT_TYPE:-bf16} LAYERS=${LAYERS:-} GPU_LIMIT=${GPU_LIMIT:-$S_LIMIT}
KV_DTYPES=${KV_DTYPES:-$S_KV} CTX=${CTX:-$S_CTX} GEN=${GEN:-$S_GEN} TURN1=${TURN1:-$S_T1} NEW=${NEW:-$S_NEW}
KV_TOKENS=${KV_TOKENS:-$S_KVT} TURN_KV=${TURN_KV:-$S_TKV} HOST_GIB=${HOST_GIB:-$S_HOST} CHUNK=${CHUNK:-$S_CHUNK}
PARTS=${PARTS:-decode fit turns} LIMIT=${LIMIT:-300} BUDGET=${BUDGET:-450}
PAGE=64  # --page-size's default: -c counts in whole pages
mkdir -p "$OUT_DIR"
export FT_CACHE_DIR=${FT_CACHE_DIR:-$OUT_DIR/cache}  # one planner calibration file for all starts of a plan
[ "$DEVICE" = cpu ] && G_DIR=$OUT_DIR || G_DIR=/dev/shm
GGUF=${GGUF:-$G_DIR/ft-kv-$PRESET-$WEIGHT_TYPE${LAYERS:+-${LAYERS}L}.gguf}
T_START=$SECONDS

# left: seconds of BUDGET left; tlim: a run's time limit (LIMIT, at most what is left less a margin)
left() { echo $((BUDGET - (SECONDS - T_START))); }
tlim() {
  local l
  l=$(($(left) - 5))
  [ $l -gt "$LIMIT" ] && l=$LIMIT
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
say() { echo "[$((SECONDS - T_START)) s] $*"; }
has_part() { [[ " $PARTS " == *" $1 "* ]]; }

# preset_col NAME: the preset's column NAME in `ft bench --list-presets` (the size column is "<TYPE> GiB")
preset_col() {
  "$FT" bench --list-presets --weight-type "$WEIGHT_TYPE" ${LAYERS:+--dummy-layers $LAYERS} 2>/dev/null |
    awk -v p="$PRESET" -v want="$1" 'NR == 1 { for (i = 1; i <= NF; i++) { if ($i == want) c = i; if ($i == "GiB") g = i - 1 } }
      $1 == p { print (want == "GiB" ? $g : $(c - (c > g ? 1 : 0))) }'
}
VOCAB=$(preset_col vocab)
say "device $DEVICE, $PRESET $WEIGHT_TYPE${LAYERS:+ ($LAYERS layers)}, --gpu-memory-limit $GPU_LIMIT, KV ${KV_DTYPES// / vs }, vocab $VOCAB, out $OUT_DIR"
[ "$DEVICE" = cuda ] && command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

# 0. the model file (serve loads files only): written once, reused while present.
if [ ! -s "$GGUF" ]; then
  need=$(preset_col GiB)
  free_k=$(df -k --output=avail "$(dirname "$GGUF")" | tail -1 | tr -d ' ')
  say "writing $GGUF ($need GiB; $((free_k / 1048576)) GiB free there)"
  if python3 -c "import sys; sys.exit(0 if $free_k / 2**20 < $need + 0.5 else 1)"; then
    say "not enough room for the GGUF in $(dirname "$GGUF"): set GGUF=PATH elsewhere (a file system with $need GiB free)"
    exit 1
  fi
  timeout "$(tlim)" "$FT" bench --model-preset "$PRESET" --dummy-weights --weight-type "$WEIGHT_TYPE" \
    ${LAYERS:+--dummy-layers $LAYERS} --write-gguf "$GGUF" > "$OUT_DIR/gguf.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    say "writing the GGUF failed (rc $rc): $(tail -c 300 "$OUT_DIR/gguf.log" | tr '\n' ' ')"
    rm -f "$GGUF"
    exit 1
  fi
  say "written: $(tail -1 "$OUT_DIR/gguf.log")"
  [ "${KEEP_GGUF:-0}" = 1 ] || trap 'rm -f "$GGUF"' EXIT
fi
DEV_ARGS=(--device "$DEVICE" --gpu-memory-limit "$GPU_LIMIT")

# start_server NAME ARGS...: `ft serve` on the GGUF in the background (SERVER_PID); returns 0 once it listens
# (PORT set), 1 when it exited first (its error in OUT_DIR/NAME.err). The server's time limit is tlim's.
start_server() {
  local name=$1
  shift
  PORT=
  timeout "$(tlim)" "$FT" serve --model "$GGUF" --port 0 --no-webui "${DEV_ARGS[@]}" "$@" \
    > "$OUT_DIR/$name.out" 2> "$OUT_DIR/$name.err" &
  SERVER_PID=$!
  while kill -0 "$SERVER_PID" 2> /dev/null; do
    PORT=$(grep -so 'listening on http://127.0.0.1:[0-9]*' "$OUT_DIR/$name.out" | grep -o '[0-9]*$')
    [ -n "$PORT" ] && return 0
    sleep 0.5
  done
  wait "$SERVER_PID"
  return 1
}
stop_server() {
  kill "$SERVER_PID" 2> /dev/null
  wait "$SERVER_PID" 2> /dev/null
}
# err_num NAME REGEX: the number in the first match of REGEX (one group of digits) in NAME's error
err_num() { grep -so "$2" "$OUT_DIR/$1.err" | head -1 | grep -o '[0-9][0-9]*' | tail -1; }
err_line() { grep -sm1 '^error' "$OUT_DIR/$1.err" | cut -c1-400; }

# 2. bs1 decode at CTX tokens of context, per KV dtype. --kv-reserve-tokens 0: the expert cache is sized beside
# exactly the bench's own KV (CTX + GEN + 5 tokens, as a server at that -c), not beside max(that, 8192).
if has_part decode; then
  for d in $KV_DTYPES; do
    [ "$(left)" -lt 20 ] && { say "decode $d: skipped (budget spent)"; continue; }
    say "decode $d: ft bench --prompt-tokens $CTX --gen-tokens $GEN --batch 1"
    timeout "$(tlim)" "$FT" bench --model "$GGUF" "${DEV_ARGS[@]}" --kv-cache-dtype "$d" --kv-reserve-tokens 0 \
      --prompt-tokens "$CTX" --gen-tokens "$GEN" --batch 1 --json > "$OUT_DIR/decode-$d.json" 2> "$OUT_DIR/decode-$d.log" ||
      say "decode $d: rc $? ($(tail -c 300 "$OUT_DIR/decode-$d.log" | tr '\n' ' '))"
  done
fi

# 1. the largest -c the plan accepts, per KV dtype (see the header).
if has_part fit; then
  for d in $KV_DTYPES; do
    [ "$(left)" -lt 30 ] && { say "fit $d: skipped (budget spent)"; continue; }
    a=(--kv-cache-dtype "$d" --max-prefill-tokens "$CHUNK")
    rm -f "$OUT_DIR/fit-$d.json" "$OUT_DIR/fit-$d.stats.json"
    if start_server "fit-$d-room" "${a[@]}" -c $PAGE --kv-reserve-tokens 1000000000; then
      stop_server
      say "fit $d: a reserve of 1e9 KV tokens was accepted: no limit to find"
      continue
    fi
    room=$(err_num "fit-$d-room" 'about [0-9]* KV tokens fit')
    if [ -z "$room" ]; then
      say "fit $d: no 'about N KV tokens fit' in the refusal: $(err_line "fit-$d-room")"
      continue
    fi
    x=$room
    if ! start_server "fit-$d-min" "${a[@]}" -c $PAGE --kv-reserve-tokens "$room"; then
      x=$(err_num "fit-$d-min" 'lower [-/a-z]* to [0-9]*')
      [ -z "$x" ] && { say "fit $d: no hint in: $(err_line "fit-$d-min")"; continue; }
    else
      stop_server
    fi
    say "fit $d: $room KV tokens fit beside the resident weights; $x with the smallest expert cache (plan's hints)"
    m=$((x / PAGE * PAGE)) ok=
    for _ in 1 2 3 4; do  # started for real: the workspace grows with the pool, so the hint may be a little high
      [ $m -lt $PAGE ] && break
      if start_server "fit-$d-c$m" "${a[@]}" -c $m; then
        python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())" \
          "http://127.0.0.1:$PORT/v1/stats" > "$OUT_DIR/fit-$d.stats.json"
        stop_server
        ok=1
        break
      fi
      x=$(err_num "fit-$d-c$m" 'lower [-/a-z]* to [0-9]*')
      [ -z "$x" ] && { say "fit $d: -c $m refused: $(err_line "fit-$d-c$m")"; break; }
      m=$((x / PAGE * PAGE))
    done
    [ -z "$ok" ] && { say "fit $d: no -c found that starts"; continue; }
    next=refused
    if start_server "fit-$d-next" "${a[@]}" -c $((m + PAGE)); then
      stop_server
      next=accepted
    fi
    say "fit $d: -c $m starts; -c $((m + PAGE)) $next"
    echo "{\"dtype\": \"$d\", \"room_tokens\": $room, \"max_c\": $m, \"next_page\": \"$next\"}" > "$OUT_DIR/fit-$d.json"
  done
fi

# 3. turn 2's TTFT with the host tier against recompute.
if has_part turns; then
  for cfg in host recompute; do
    [ "$(left)" -lt 40 ] && { say "turns $cfg: skipped (budget spent)"; continue; }
    h=$HOST_GIB
    [ $cfg = recompute ] && h=0
    rm -f "$OUT_DIR/turns-$cfg.json"
    say "turns $cfg: ft serve -c $KV_TOKENS --kv-cache-dtype $TURN_KV --kv-host-gib $h"
    if ! start_server "turns-$cfg" -c "$KV_TOKENS" --kv-cache-dtype "$TURN_KV" --kv-host-gib "$h" \
      --max-prefill-tokens "$CHUNK"; then
      say "turns $cfg: the server did not start: $(err_line "turns-$cfg")"
      continue
    fi
    grep -E "expert slots|KV cache|KV host|moe:" "$OUT_DIR/turns-$cfg.out" | head -4
    timeout "$(tlim)" python3 "$HERE/kv_turns.py" run --port "$PORT" --vocab "$VOCAB" --turn1 "$TURN1" --new "$NEW" \
      --gen 16 --label "$cfg" --out "$OUT_DIR/turns-$cfg.json" > "$OUT_DIR/turns-$cfg.client.log" 2>&1 ||
      say "turns $cfg: client rc $? ($(tail -c 300 "$OUT_DIR/turns-$cfg.client.log" | tr '\n' ' '))"
    stop_server
  done
fi

# The summary (also OUT_DIR/summary.txt).
{
  echo "== $PRESET, $WEIGHT_TYPE weights, --gpu-memory-limit $GPU_LIMIT GiB, device $DEVICE ($((SECONDS - T_START)) s)"
  python3 - "$OUT_DIR" "$KV_DTYPES" "$CTX" <<'PY'
import json, sys
out, dtypes, ctx = sys.argv[1], sys.argv[2].split(), sys.argv[3]
def load(name):
    try:
        return json.load(open(f"{out}/{name}"))
    except Exception:
        return None
print(f"{'kv':5} {'bytes/tok':>9} {'max -c':>9} {'+1 page':>8} {'slots':>6} {'KV GiB':>7} | "
      f"{'@' + ctx + ': slots':>13} {'prefill tok/s':>13} {'decode tok/s':>12} {'strategy':10}")
for d in dtypes:
    fit, st, dec = load(f"fit-{d}.json"), load(f"fit-{d}.stats.json"), load(f"decode-{d}.json")
    bpt = st["kv"]["bytes_per_token"] if st else None
    slots = kvb = None
    if st and st.get("memory"):
        for r in st["memory"]["rows"]:
            if r["name"] == "expert slots":
                slots = r["detail"].split()[0].replace(",", "")
            if r["name"] == "KV cache":
                kvb = r["device_bytes"] / 2**30
    res = (dec or {}).get("results") or [{}]
    f = lambda v, spec: "-" if v is None else format(v, spec)
    print(f"{d:5} {f(bpt, 'd'):>9} {f(fit and fit['max_c'], 'd'):>9} {(fit or {}).get('next_page', '-'):>8} "
          f"{slots or ('all' if st else '-'):>6} {f(kvb, '.2f'):>7} | {f(dec and dec.get('moe_cache_slots'), 'd'):>13} "
          f"{f(res[0].get('prefill_tokens_per_s'), '.0f'):>13} {f(res[0].get('decode_tokens_per_s'), '.1f'):>12} "
          f"{(dec or {}).get('moe_strategy', '-'):10}")
print("max -c: the largest ft serve -c the plan accepts (expert cache at its minimum), started; +1 page: "
      "one page more must be refused. slots: that server's expert slots ('all': fused).")
PY
  if has_part turns; then
    echo "== turn 2 TTFT: host tier (--kv-host-gib $HOST_GIB) vs recompute, -c $KV_TOKENS, $TURN_KV KV"
    python3 "$HERE/kv_turns.py" table "$OUT_DIR/turns-host.json" "$OUT_DIR/turns-recompute.json"
  fi
} | tee "$OUT_DIR/summary.txt"
