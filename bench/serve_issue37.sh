#!/usr/bin/env bash
# Issue 37's targets through `ft serve` with default flags, on a GPU host, in one call: writes the
# qwen3-30b-a3b preset (WEIGHT, default bf16; dummy weights, router skew SKEW) as a GGUF file, serves it with only
# --gpu-memory-limit LIMIT, and runs bench/serve_load.py against it:
#   bs1      1 stream, 512-token prompt, 128 tokens, 2 rounds: time to first token of 512 tokens
#            (round 0 right after start, round 1 warm) and the bs1 decode rate
#   streams  16 concurrent streams, 200-token prompts, 256 tokens each, 2 rounds: the aggregate rate
#            (round 0 meets the fresh server's first prefill shapes)
#   8k       1 stream, an 8000-token prompt, 8 tokens: time to first token of 8k tokens (the default
#            context, 8192 tokens, holds it)
# then stops the server and deletes the file (~57 GiB: DIR needs the room; /dev/shm would hold it
# in RAM next to the server's pinned expert banks, so a disk folder is the default).
#
#   FT=.gpu/ft SKEW=0 bench/serve_issue37.sh            (SKEW=1: Zipf-1.0 routing; CASES="bs1" to pick)
#   FT=.gpu/ft WEIGHT=q4_k LIMIT= CASES=streams bench/serve_issue37.sh   (the resident Q4_K 16-stream case)
# WRITE_ARGS adds `ft bench` arguments to the model's (a smoke test on a CPU machine:
# FT=build/ft WRITE_ARGS="--dummy-layers 1" LIMIT= CASES=bs1 bench/serve_issue37.sh; LIMIT empty: no limit).
set -uo pipefail
FT=${FT:-build/ft}
DIR=${DIR:-/tmp/ft-serve37}
SKEW=${SKEW:-0}
WEIGHT=${WEIGHT:-bf16}
LIMIT=${LIMIT:-24}
PORT=${PORT:-18437}
CASES=${CASES:-bs1 streams 8k}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DIR"
M=$DIR/qwen3-30b-a3b-$WEIGHT-skew$SKEW.gguf
t0=$(date +%s)
"$FT" bench --model-preset qwen3-30b-a3b --dummy-weights --weight-type "$WEIGHT" --dummy-router-skew "$SKEW" \
  ${WRITE_ARGS:-} --write-gguf "$M" > "$DIR/write.log" 2>&1 || { tail -3 "$DIR/write.log"; exit 1; }
echo "wrote $M ($(du -h "$M" | cut -f1)) in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
"$FT" serve --model "$M" ${LIMIT:+--gpu-memory-limit "$LIMIT"} --port "$PORT" ${SERVE_ARGS:-} > "$DIR/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$M"' EXIT
until curl -sf "localhost:$PORT/health" > /dev/null; do
  kill -0 $pid 2>/dev/null || { echo "ft serve exited:"; tail -5 "$DIR/serve.log"; exit 1; }
  sleep 1
done
echo "serving after $(( $(date +%s) - t0 )) s: $(grep -m1 -o 'moe: strategy [^,]*' "$DIR/serve.log")"
for c in $CASES; do
  case $c in
    bs1) python3 "$HERE/serve_load.py" --port "$PORT" --streams 1 --prompt-tokens 512 --max-tokens 128 --rounds 2 ;;
    streams) python3 "$HERE/serve_load.py" --port "$PORT" --streams 16 --prompt-tokens 200 --max-tokens 256 --rounds 2 ;;
    8k) python3 "$HERE/serve_load.py" --port "$PORT" --streams 1 --prompt-tokens 8000 --max-tokens 8 ;;
    *) echo "unknown case '$c' (bs1, streams, 8k)"; exit 2 ;;
  esac
done
