#!/usr/bin/env python3
"""Writes tests/model/fixtures/qwen3_moe_fp8: shared/fixtures/hf/qwen3_moe in DeepSeek's / Qwen's FP8 layout.

Run where python3 has torch and transformers 5.17 (the H200 machine), as
    python3 tests/model/gen_qwen3_moe_fp8.py <shared>/fixtures/hf/qwen3_moe tests/model/fixtures/qwen3_moe_fp8

1. Every linear layer's weight of the bf16 fixture (self_attn q/k/v/o_proj and each expert's
   gate/up/down_proj; not the router mlp.gate, the embeddings, lm_head or the norms) is quantized the
   way transformers' FineGrainedFP8 quantizer does it: per [128, 128] tile of the [out, in] matrix
   (the last tile of a dimension that is not a multiple of 128 is partial), scale = 448 / amax(|tile|),
   codes = clamp(w * scale, -448, 448) cast to float8_e4m3fn (round to nearest even), and the float32
   weight_scale_inv = 1 / scale kept per tile: `<module>.weight` F8_E4M3 [out, in] +
   `<module>.weight_scale_inv` F32 [ceil(out / 128), ceil(in / 128)], the tensors DeepSeek-V3 and
   Qwen3-*-FP8 release. Every other tensor is copied unchanged (bf16). config.json gains the release
   form of quantization_config (quant_method fp8, fmt e4m3, activation_scheme dynamic,
   weight_block_size [128, 128]) with modules_to_not_convert naming lm_head and the routers, as
   FineGrainedFP8Config lists the modules it leaves in full precision.
2. The reference is transformers' own float32 forward of the DEQUANTIZED weights (w = float(code) *
   weight_scale_inv per tile, a float32 product, which is the value FreeToken's F8_E4M3_B32 decodes):
   those weights are written as a float32 checkpoint into a temporary folder with the fixture's plain
   config, loaded with Qwen3MoeForCausalLM.from_pretrained(dtype=float32, attn_implementation="eager"),
   checked to hold exactly those values, and run on the fixture's prompts (reference.json): one
   forward pass each for the logits, generate(do_sample=False) for the greedy tokens. Output:
   config.json, model.safetensors, reference.json, logits_short.f32, logits_long.f32 in the layout
   of the shared fixtures.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3MoeForCausalLM

BLOCK = 128
FP8_MAX = 448.0
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def is_linear(name):
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in LINEAR


def quantize_fp8_blocks(w):
    """w float32 [N, K] -> (codes float8_e4m3fn [N, K], scale_inv float32 [ceil(N/128), ceil(K/128)])."""
    N, K = w.shape
    sr, sc = -(-N // BLOCK), -(-K // BLOCK)
    padded = torch.zeros(sr * BLOCK, sc * BLOCK, dtype=torch.float32)
    padded[:N, :K] = w
    tiles = padded.reshape(sr, BLOCK, sc, BLOCK)
    amax = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # [sr, sc]
    scale = FP8_MAX / amax
    q = (tiles * scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    codes = q.reshape(sr * BLOCK, sc * BLOCK)[:N, :K].contiguous()
    return codes, (1.0 / scale).float().contiguous()


def dequantize_fp8_blocks(codes, scale_inv):
    """Inverse of quantize_fp8_blocks: float32 [N, K], each code times its tile's scale_inv."""
    N, K = codes.shape
    s = scale_inv.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:N, :K]
    return codes.float() * s


def check_loaded(model, expected):
    """Every dequantized weight is in the model transformers loaded, exactly (per-expert names, or the
    fused expert tensors of transformers 5: gate_up_proj [E, 2F, H] / down_proj [E, H, F], or their
    transposes)."""
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    checked = set()
    for name, want in expected.items():
        if name in sd:
            assert torch.equal(sd[name], want), f"{name}: transformers loaded other values"
            checked.add(name)
    layers = sorted({n.split(".mlp.experts.")[0] for n in expected if ".mlp.experts." in n})
    for pre in layers:
        E = len({n.split(".mlp.experts.")[1].split(".")[0] for n in expected if n.startswith(pre + ".mlp.experts.")})
        g = [expected[f"{pre}.mlp.experts.{e}.gate_proj.weight"] for e in range(E)]
        u = [expected[f"{pre}.mlp.experts.{e}.up_proj.weight"] for e in range(E)]
        d = [expected[f"{pre}.mlp.experts.{e}.down_proj.weight"] for e in range(E)]
        fused = {f"{pre}.mlp.experts.gate_up_proj": torch.stack([torch.cat([a, b]) for a, b in zip(g, u)]),
                 f"{pre}.mlp.experts.down_proj": torch.stack(d)}
        for fname, want in fused.items():
            if fname not in sd:
                continue
            got = sd[fname]
            ok = (got.shape == want.shape and torch.equal(got, want)) or \
                 (got.shape == want.transpose(1, 2).shape and torch.equal(got, want.transpose(1, 2)))
            if not ok:  # another fused order (e.g. gate and up interleaved): the same values, each expert
                ok = got.numel() == want.numel() and all(
                    torch.equal(got[e].flatten().sort().values, want[e].flatten().sort().values) for e in range(E))
                print(f"note: {fname} {tuple(got.shape)} holds the dequantized values in another order")
            assert ok, f"{fname}: transformers loaded other values"
            part = "gate_proj up_proj" if fname.endswith("gate_up_proj") else "down_proj"
            for e in range(E):
                for p in part.split():
                    checked.add(f"{pre}.mlp.experts.{e}.{p}.weight")
    missing = sorted(set(expected) - checked)
    assert not missing, f"weights not found in the loaded model: {missing[:4]} ..."


def main(src, out):
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    tensors = load_file(os.path.join(src, "model.safetensors"))
    written, dequantized, expected = {}, {}, {}
    for name, t in tensors.items():
        if is_linear(name):
            codes, scale_inv = quantize_fp8_blocks(t.float())
            module = name[: -len(".weight")]
            written[name], written[module + ".weight_scale_inv"] = codes, scale_inv
            dequantized[name] = expected[name] = dequantize_fp8_blocks(codes, scale_inv)
        else:
            written[name] = t.contiguous()
            dequantized[name] = t.float().contiguous()
    save_file(written, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    qcfg = dict(cfg)
    qcfg["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK],
        "modules_to_not_convert": ["lm_head", "model.layers.*.mlp.gate"],
    }
    json.dump(qcfg, open(os.path.join(out, "config.json"), "w"), indent=2)

    tmp = tempfile.mkdtemp(prefix="qwen3_moe_fp8_dequant_")
    try:
        plain = dict(cfg)
        plain["dtype"] = "float32"
        json.dump(plain, open(os.path.join(tmp, "config.json"), "w"), indent=2)
        save_file(dequantized, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        model = Qwen3MoeForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
        model = model.float().eval()
        check_loaded(model, expected)

        ref = json.load(open(os.path.join(src, "reference.json")))
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
        ref["generated_by"] = ("tests/model/gen_qwen3_moe_fp8.py (transformers Qwen3MoeForCausalLM, float32, "
                               "on the dequantized FP8 weights)")
        json.dump(ref, open(os.path.join(out, "reference.json"), "w"), indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("wrote", out, {k: os.path.getsize(os.path.join(out, k)) for k in sorted(os.listdir(out))})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
