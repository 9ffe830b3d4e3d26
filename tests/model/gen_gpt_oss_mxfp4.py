#!/usr/bin/env python3
"""Writes tests/model/fixtures/gpt_oss_mxfp4: shared/fixtures/hf/gpt_oss with its experts in MXFP4.

What produced the committed files: this script, run on the H200 (python3 with torch and
transformers 5.17), as
    python3 tests/model/gen_gpt_oss_mxfp4.py <shared>/fixtures/hf/gpt_oss tests/model/fixtures/gpt_oss_mxfp4

1. The bf16 fixture's experts (mlp.experts.gate_up_proj [E, H, 2F], down_proj [E, F, H]) are
   quantized to MXFP4 (OCP Microscaling Formats v1.0: blocks of 32 E2M1 values along the input
   dimension sharing one E8M0 scale, shared exponent floor(log2(amax)) - 2, elements rounded to the
   nearest E2M1 value and saturated at 6) and written in the layout OpenAI releases gpt-oss in:
   gate_up_proj_blocks U8 [E, 2F, H/32, 16] + gate_up_proj_scales U8 [E, 2F, H/32], down_proj_blocks
   U8 [E, H, F/32, 16] + down_proj_scales U8 [E, H, F/32], two E2M1 codes per byte, low nibble first,
   scale bytes biased by 127. Every other tensor is copied unchanged (bf16); config.json gains the
   release's quantization_config (quant_method mxfp4, modules_to_not_convert).
2. The reference logits are transformers' own: GptOssForCausalLM.from_pretrained(out,
   quantization_config=Mxfp4Config(dequantize=True), dtype=float32, attn_implementation="eager"),
   then .float(), the fixture's prompts (reference.json) through one forward pass each for the logits and
   generate(do_sample=False, max_new_tokens=16) for the greedy tokens. The script checks that the
   model transformers loaded holds exactly its own dequantization of the written blocks (so the
   layout written is the layout transformers reads). Why .float(): transformers 5.17
   dequantizes MXFP4 experts to bf16 parameters even with dtype=float32, and its grouped_mm experts
   then run the expert matmuls in bf16 (MLP outputs ~3e-3 away from float32, measured on the H200);
   the bf16 fixture's reference is float32 throughout, and so is this one.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import GptOssForCausalLM, Mxfp4Config

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def quantize_mxfp4(w):
    """w float32 [..., rows, K] (K % 32 == 0) -> (blocks U8 [..., rows, K/32, 16], scales U8 [..., rows, K/32])."""
    *pre, K = w.shape
    g = w.reshape(*pre, K // 32, 32)
    amax = g.abs().amax(-1)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp_min(1e-38))) - 2, torch.full_like(amax, -127.0))
    e = e.clamp(-127, 127)
    scaled = g / torch.exp2(e)[..., None]
    idx = (scaled.abs()[..., None] - E2M1[:8]).abs().argmin(-1)  # nearest magnitude; beyond 6 saturates
    code = (idx + 8 * (scaled < 0).long()).to(torch.uint8)
    blocks = code[..., 0::2] | (code[..., 1::2] << 4)
    return blocks.contiguous(), (e + 127).to(torch.uint8).contiguous()


def dequantize_mxfp4(blocks, scales):
    """Inverse of quantize_mxfp4: float32 [..., rows, K]."""
    lo, hi = (blocks & 0x0F).long(), (blocks >> 4).long()
    vals = torch.stack([E2M1[lo], E2M1[hi]], -1).flatten(-2)  # [..., rows, K/32, 32]
    vals = vals * torch.exp2(scales.float() - 127)[..., None]
    return vals.flatten(-2)


def main(src, out):
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
    }
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)

    tensors = load_file(os.path.join(src, "model.safetensors"))
    written, expected = {}, {}
    for name, t in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            blocks, scales = quantize_mxfp4(t.float().transpose(1, 2))  # output-major [E, out, in]
            written[name + "_blocks"], written[name + "_scales"] = blocks, scales
            expected[name] = dequantize_mxfp4(blocks, scales).transpose(1, 2)  # back to [E, in, out]
        else:
            written[name] = t.contiguous()
    save_file(written, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})

    model = GptOssForCausalLM.from_pretrained(out, quantization_config=Mxfp4Config(dequantize=True),
                                              dtype=torch.float32, attn_implementation="eager")
    model = model.float().eval()  # the dequantized experts arrive in bf16; f32 holds them exactly
    params = dict(model.named_parameters())
    for name, ref in expected.items():
        got = params[name].detach().float().cpu()
        assert torch.equal(got, ref), f"{name}: transformers dequantized differently (max diff {(got - ref).abs().max()})"

    ref = json.load(open(os.path.join(src, "reference.json")))
    for case in ref["cases"]:
        ids = torch.tensor([case["input_ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0].float().contiguous()
            gen = model.generate(ids, do_sample=False, max_new_tokens=len(case["greedy_new_tokens"]),
                                 min_new_tokens=len(case["greedy_new_tokens"]))
        logits.numpy().tofile(os.path.join(out, case["logits_file"]))
        case["logits_shape"] = list(logits.shape)
        case["greedy_new_tokens"] = gen[0, ids.shape[1]:].tolist()
    ref["dtype"] = "float32"
    ref["generated_by"] = "tests/model/gen_gpt_oss_mxfp4.py (transformers GptOssForCausalLM, Mxfp4Config(dequantize=True))"
    json.dump(ref, open(os.path.join(out, "reference.json"), "w"), indent=1)
    print("wrote", out, {k: os.path.getsize(os.path.join(out, k)) for k in os.listdir(out)})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
