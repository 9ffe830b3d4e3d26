#!/usr/bin/env python3
"""Concurrent streamed completions against a running `ft serve` (or any OpenAI-compatible server that
takes token-id prompts): the numbers issue 37 asks for through the server, in one run.

Each of --streams threads sends one POST /v1/completions with `prompt` as --prompt-tokens random token
ids (distinct per stream and round, so no request hits another's prefix), `max_tokens` --max-tokens,
greedy, `ignore_eos`, `stream: true`; all threads start together. Per request it records the time to
the first streamed token (TTFT) and the decode rate after it; per round the aggregate rate (all
completion tokens / the round's wall time). Prints one table row per round and a JSON line with every
figure. Standard library only.

    bench/serve_load.py --port 8080 --streams 16 --prompt-tokens 200 --max-tokens 256
    bench/serve_load.py --port 8080 --streams 1 --prompt-tokens 512 --max-tokens 128 --rounds 3
"""
import argparse
import json
import random
import statistics
import threading
import time
import urllib.request


def one_request(url, ids, max_tokens, out, i):
    body = {"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.time()
    first = last = None
    chunks = 0
    usage = None
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                d = json.loads(line[6:])
                if d.get("usage"):
                    usage = d["usage"]
                for c in d.get("choices", []):
                    if c.get("text"):
                        now = time.time()
                        first = first or now
                        last = now
                        chunks += 1
        tokens = usage["completion_tokens"] if usage else chunks
        out[i] = {"t0": t0, "ttft_s": (first - t0) if first else None, "end": last or time.time(),
                  "tokens": tokens, "decode_tok_s": (tokens - 1) / (last - first) if first and last - first > 1e-3 else None}
    except Exception as e:  # a failed request is reported, not hidden
        out[i] = {"error": str(e)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn from [100, vocab)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    url = f"http://{a.host}:{a.port}/v1/completions"
    rng = random.Random(a.seed)
    print(f"{'round':>5} {'streams':>7} {'prompt':>6} {'TTFT med s':>10} {'TTFT max s':>10} "
          f"{'decode/stream':>13} {'aggregate tok/s':>15}")
    report = []
    for rnd in range(a.rounds):
        out = [None] * a.streams
        prompts = [[rng.randrange(100, a.vocab) for _ in range(a.prompt_tokens)] for _ in range(a.streams)]
        threads = [threading.Thread(target=one_request, args=(url, prompts[i], a.max_tokens, out, i))
                   for i in range(a.streams)]
        start = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [o["error"] for o in out if "error" in o]
        ok = [o for o in out if "error" not in o]
        if errors:
            print(f"round {rnd}: {len(errors)} of {a.streams} requests failed: {errors[0]}")
        if not ok:
            continue
        wall = max(o["end"] for o in ok) - start
        ttft = [o["ttft_s"] for o in ok if o["ttft_s"] is not None]
        dec = [o["decode_tok_s"] for o in ok if o["decode_tok_s"]]
        agg = sum(o["tokens"] for o in ok) / wall
        row = {"round": rnd, "streams": a.streams, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
               "ttft_median_s": statistics.median(ttft) if ttft else None, "ttft_max_s": max(ttft) if ttft else None,
               "decode_tok_s_per_stream": statistics.median(dec) if dec else None, "aggregate_tok_s": agg,
               "failed": len(errors)}
        report.append(row)
        fmt = lambda v, p: f"{v:.{p}f}" if v is not None else "-"
        print(f"{rnd:>5} {a.streams:>7} {a.prompt_tokens:>6} {fmt(row['ttft_median_s'], 3):>10} "
              f"{fmt(row['ttft_max_s'], 3):>10} {fmt(row['decode_tok_s_per_stream'], 1):>13} {agg:>15.1f}")
    print(json.dumps({"serve_load": report}))


if __name__ == "__main__":
    main()
