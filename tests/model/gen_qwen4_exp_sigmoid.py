#!/usr/bin/env python3
"""Writes tests/model/fixtures/qwen4_exp_sigmoid: transformers' reference for shared/fixtures/hf/qwen4_exp with
`output_gate_type: "sigmoid"` (the Gated DeltaNet output gate of Qwen3.8-Flash-Next's published config:
Qwen4ExpTextRMSNormGated multiplies the normed output by ACT2FN[output_gate_type or hidden_act](gate);
the shared fixture leaves it unset, i.e. silu).

Run where python3 has torch and transformers 5.17 (the H200 machine; CPU is enough), from the repository
root:
    python3 tests/model/gen_qwen4_exp_sigmoid.py <shared>/fixtures/hf/qwen4_exp tests/model/fixtures/qwen4_exp_sigmoid

The weights are the shared fixture's, unchanged, so only config.json (the fixture's with output_gate_type
"sigmoid"), reference.json and the logits files are written (the test puts the shared model.safetensors
beside them). The model is loaded with Qwen4ExpForCausalLM.from_pretrained(dtype=float32, eager attention)
from a temporary folder holding that config and a copy of the shared weights; every linear-attention
layer's gated norm is checked to use sigmoid, and, as a check of the procedure, the fixture's own config
loaded the same way must reproduce the shared reference logits (within 1e-5 relative L2 per position).
Then, for the shared prompts (reference.json): logits_<case>.f32 float32 [tokens, vocab] of one forward
pass, and greedy_new_tokens from generate(do_sample=False) with as many new tokens as the shared case.
"""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM


def load(folder):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    return model.float().eval()


def rel_l2_rows(got, want):
    num = ((got - want) ** 2).sum(-1).sqrt()
    return (num / want.pow(2).sum(-1).sqrt().clamp(min=1e-30)).max().item()


def main(src, out):
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    ref = json.load(open(os.path.join(src, "reference.json")))
    tmp = tempfile.mkdtemp(prefix="qwen4_exp_sigmoid_")
    try:
        shutil.copy(os.path.join(src, "model.safetensors"), os.path.join(tmp, "model.safetensors"))
        # The procedure first: the shared config must give the shared logits.
        json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"), indent=2)
        model = load(tmp)
        for case in ref["cases"]:
            ids = torch.tensor([case["input_ids"]])
            want = torch.from_numpy(np.fromfile(os.path.join(src, case["logits_file"]), dtype=np.float32))
            with torch.no_grad():
                got = model(ids).logits[0].float()
            err = rel_l2_rows(got, want.reshape(got.shape))
            assert err < 1e-5, f"the shared config does not reproduce {case['name']}: {err}"
            print(f"shared config reproduces {case['name']}: {err:.2e}")

        sig = dict(cfg)
        sig["output_gate_type"] = "sigmoid"
        json.dump(sig, open(os.path.join(tmp, "config.json"), "w"), indent=2)
        model = load(tmp)
        norms = [m for n, m in model.named_modules() if n.endswith("linear_attn.norm")]
        assert norms and all(getattr(m, "activation", None) == "sigmoid" for m in norms), \
            "the gated norms do not use sigmoid"
        for case in ref["cases"]:
            ids = torch.tensor([case["input_ids"]])
            n = len(case["greedy_new_tokens"])
            with torch.no_grad():
                logits = model(ids).logits[0].float().contiguous()
                gen = model.generate(ids, do_sample=False, max_new_tokens=n, min_new_tokens=n)
            logits.numpy().tofile(os.path.join(out, case["logits_file"]))
            case["logits_shape"] = list(logits.shape)
            case["greedy_new_tokens"] = gen[0, ids.shape[1]:].tolist()
        ref["dtype"] = "float32"
        ref["generated_by"] = ("tests/model/gen_qwen4_exp_sigmoid.py (transformers Qwen4ExpForCausalLM, float32, "
                               "shared/fixtures/hf/qwen4_exp weights, output_gate_type sigmoid)")
        json.dump(sig, open(os.path.join(out, "config.json"), "w"), indent=2)
        json.dump(ref, open(os.path.join(out, "reference.json"), "w"), indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("wrote", out, {k: os.path.getsize(os.path.join(out, k)) for k in sorted(os.listdir(out))})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
