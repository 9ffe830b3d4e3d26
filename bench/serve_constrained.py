# Decode speed through `ft serve` with and without a structured-output constraint (issue 38): each
# request streamed, tokens/s from the chunks' arrival times. Usage: python3 serve_constrained.py PORT N MAX_TOKENS
import json, sys, time, urllib.request
port, n, max_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
schema = {"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "string"}},
          "count": {"type": "integer"}}, "required": ["notes", "count"]}
kinds = {
    "unconstrained": {"ignore_eos": True},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}},
    "json_object": {"response_format": {"type": "json_object"}},
}
for kind, extra in kinds.items():
    for i in range(n):
        body = {"messages": [{"role": "user", "content": f"Request {i}: write notes."}], "max_tokens": max_tokens,
                "temperature": 1.0, "seed": 100 + i, "stream": True, "stream_options": {"include_usage": True}}
        body.update(extra)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        t0 = time.time(); times = []; usage = None; text = ""; fin = None
        with urllib.request.urlopen(req, timeout=300) as r:
            for line in r:
                line = line.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]": continue
                d = json.loads(line[6:])
                if d.get("usage"): usage = d["usage"]
                if d.get("choices"):
                    c = d["choices"][0]
                    if c.get("finish_reason"): fin = c["finish_reason"]
                    if c["delta"].get("content") is not None:
                        times.append(time.time()); text += c["delta"]["content"]
        n_tok = usage["completion_tokens"] if usage else len(times)
        dec = (n_tok - 1) / (times[-1] - times[0]) if len(times) > 1 else 0
        ok = "-"
        if kind != "unconstrained":
            try: json.loads(text); ok = "valid JSON"
            except Exception: ok = "INVALID JSON"
        print(f"  {kind:14s} req {i}: {n_tok} tokens, first token {times[0]-t0:.3f} s, decode {dec:.1f} tok/s, "
              f"finish {fin}, {ok}")
