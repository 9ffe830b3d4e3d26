#!/usr/bin/env python3
"""The agent-conversation half of bench/kv_memory.sh (issue 39): time to first token of turn 2 of a long
conversation against a running `ft serve`, when turn 1's KV pages were pushed out of the device's KV cache.

  kv_turns.py run --port P --vocab V --turn1 N --new M [--gen G] [--seed S] [--fill F] [--label L] --out FILE
  kv_turns.py table FILE...

`run` sends, over /v1/completions with token-id prompts (random ids in [16, V - 16), distinct per request,
so no two requests share a page of prefix by chance; greedy, ignore_eos, streamed with usage):
  1. turn 1: N tokens, G generated;
  2. a device hit for reference: turn 1 + M other tokens, while turn 1 is still in the device KV;
  3. fillers: distinct prompts of as many tokens, together F x the KV pool (/v1/stats kv.tokens_total) plus
     4 pages, each at most the context limit, one at a time: the pool is LRU, so every page older than
     them (turn 1's, the reference's) is evicted (to the host tier when --kv-host-gib is on, else dropped);
  4. turn 2: turn 1 + M new tokens, streamed; TTFT = seconds from sending to the first chunk with text.
For each timed request it reads usage.prompt_tokens_details.cached_tokens and the change of /v1/stats
kv.tiers.{device,host}.hit_pages and totals.prompt_tokens_computed across it, which say which tier served
the prefix. Writes one JSON object to --out and prints it. Python 3 standard library only.
`table` prints the runs' rows side by side.
"""
import argparse
import json
import math
import random
import sys
import time
import urllib.request

TIMEOUT_S = 600  # one request at most (the shell's timeout bounds the whole run)


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
        return json.load(r)


def stats_point(port):
    """The /v1/stats counters a request's tier is read from."""
    s = get(port, "/v1/stats")
    t = s["kv"]["tiers"]
    return {
        "device_hit_pages": t["device"]["hit_pages"],
        "host_hit_pages": (t.get("host") or {}).get("hit_pages", 0),
        "host_pages": (t.get("host") or {}).get("pages", 0),
        "host_bytes_read": (t.get("host") or {}).get("bytes_read", 0),
        "prompt_tokens_computed": s["totals"]["prompt_tokens_computed"],
        "device_pages_cached": s["kv"]["pages_cached"],
    }


def complete(port, ids, gen, stream=True):
    """Sends one completion; returns {ttft_s, first_chunk_s, total_s, prompt_tokens, cached_tokens, chunks}."""
    body = {"prompt": ids, "max_tokens": gen, "temperature": 0, "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    out = {"ttft_s": None, "first_chunk_s": None, "chunks": 0, "prompt_tokens": None, "cached_tokens": None}
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
        if not stream:
            d = json.load(r)
            usage = d.get("usage") or {}
        else:
            usage = {}
            for line in r:
                line = line.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                d = json.loads(line[5:])
                ch = d.get("choices") or []
                if ch:
                    now = time.monotonic() - t0
                    if out["first_chunk_s"] is None:
                        out["first_chunk_s"] = now
                    if ch[0].get("text") and out["ttft_s"] is None:
                        out["ttft_s"] = now
                    out["chunks"] += 1
                if d.get("usage"):
                    usage = d["usage"]
    out["total_s"] = time.monotonic() - t0
    if out["ttft_s"] is None:  # no chunk carried text (every token an incomplete UTF-8 piece): first chunk
        out["ttft_s"] = out["first_chunk_s"]
    out["prompt_tokens"] = usage.get("prompt_tokens")
    out["cached_tokens"] = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return out


def timed(port, ids, gen):
    """complete() with the /v1/stats counters' change across it."""
    before = stats_point(port)
    r = complete(port, ids, gen)
    after = stats_point(port)
    for k in ("device_hit_pages", "host_hit_pages", "host_bytes_read", "prompt_tokens_computed"):
        r[k] = after[k] - before[k]
    r["host_pages_after"] = after["host_pages"]
    return r


def served_by(r, page):
    """Which tier gave turn 2 its prefix, from the counters (not from the configuration)."""
    if r["host_hit_pages"] > 0 and r["device_hit_pages"] == 0:
        return "host tier"
    if r["device_hit_pages"] > 0 and r["host_hit_pages"] == 0:
        return "device"
    if r["host_hit_pages"] > 0:
        return "device+host"
    return "recompute" if (r["cached_tokens"] or 0) < page else "?"


def run(a):
    rng = random.Random(a.seed)
    lo, hi = 16, a.vocab - 16
    ids = lambda n: [rng.randrange(lo, hi) for _ in range(n)]
    s = get(a.port, "/v1/stats")
    page, pool, limit = s["kv"]["page_size"], s["kv"]["tokens_total"], s["context_limit"]
    if a.turn1 + a.new + a.gen > limit:
        sys.exit(f"turn 2 ({a.turn1} + {a.new} + {a.gen} generated) exceeds the server's context limit {limit}: raise -c")
    res = {"label": a.label, "turn1": a.turn1, "new": a.new, "gen": a.gen, "page_size": page, "kv_pool_tokens": pool,
           "context_limit": limit, "kv_bytes_per_token": s["kv"]["bytes_per_token"],
           "host_tier": s["kv"]["tiers"].get("host") is not None}
    t1 = ids(a.turn1)
    print(f"[{a.label}] turn 1: {a.turn1} tokens", flush=True)
    res["turn1_req"] = timed(a.port, t1, a.gen)
    print(f"[{a.label}] device hit (turn 1 + {a.new} tokens)", flush=True)
    res["device_hit_req"] = timed(a.port, t1 + ids(a.new), a.gen)
    want = int(a.fill * pool) + 4 * page
    each_max = limit - 2 - 2 * page
    n = max(1, math.ceil(want / each_max))
    each = math.ceil(want / n)
    print(f"[{a.label}] fillers: {n} x {each} tokens (KV pool {pool})", flush=True)
    t0 = time.monotonic()
    for _ in range(n):
        complete(a.port, ids(each), 1, stream=False)
    res["fillers"] = {"count": n, "tokens_each": each, "seconds": time.monotonic() - t0}
    print(f"[{a.label}] turn 2: turn 1 + {a.new} new tokens", flush=True)
    res["turn2_req"] = timed(a.port, t1 + ids(a.new), a.gen)
    res["turn2_served_by"] = served_by(res["turn2_req"], page)
    res["device_hit_served_by"] = served_by(res["device_hit_req"], page)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


def table(files):
    rows = []
    for fn in files:
        try:
            rows.append(json.load(open(fn)))
        except Exception as e:  # a run that failed left no file: say so in the table
            print(f"{fn}: no result ({e})")
    if not rows:
        return
    r0 = rows[0]
    print(f"turn 1 = {r0['turn1']} tokens, turn 2 = turn 1 + {r0['new']} new tokens, {r0['gen']} generated each; "
          f"KV pool {r0['kv_pool_tokens']} tokens of {r0['kv_bytes_per_token']} bytes")
    print(f"{'config':12} {'request':18} {'TTFT s':>8} {'cached':>7} {'dev pages':>9} {'host pages':>10} "
          f"{'computed':>8}  served by")
    for r in rows:
        for key, name in (("turn1_req", "turn 1 (cold)"), ("device_hit_req", "turn 2, in device"),
                          ("turn2_req", "turn 2, evicted")):
            q = r[key]
            by = {"turn1_req": "-", "device_hit_req": r["device_hit_served_by"], "turn2_req": r["turn2_served_by"]}[key]
            print(f"{r['label']:12} {name:18} {q['ttft_s']:8.3f} {q['cached_tokens'] or 0:7d} {q['device_hit_pages']:9d} "
                  f"{q['host_hit_pages']:10d} {q['prompt_tokens_computed']:8d}  {by}")
        f = r["fillers"]
        print(f"{r['label']:12} fillers: {f['count']} x {f['tokens_each']} tokens in {f['seconds']:.1f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--vocab", type=int, required=True, help="the model's vocabulary size (ids drawn below it)")
    r.add_argument("--turn1", type=int, required=True)
    r.add_argument("--new", type=int, required=True)
    r.add_argument("--gen", type=int, default=16)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--fill", type=float, default=1.0, help="filler tokens as a multiple of the KV pool")
    r.add_argument("--label", default="run")
    r.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    a = p.parse_args()
    if a.cmd == "run":
        run(a)
    else:
        table(a.files)


if __name__ == "__main__":
    main()
