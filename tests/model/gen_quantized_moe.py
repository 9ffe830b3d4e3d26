#!/usr/bin/env python3
"""Writes a quantized copy of a shared MoE fixture with transformers' reference logits (issue 36).

Run where python3 has torch and transformers 5.17 (the GPU machine; the forward runs on its CPU), as
    python3 tests/model/gen_quantized_moe.py FORMAT <shared>/fixtures/hf/ARCH tests/model/fixtures/ARCH_FORMAT
with FORMAT fp8 or nvfp4 and ARCH qwen3_moe or deepseek_v3 (any fixture whose linear layers are named
below works).

1. Every linear layer's weight of the bf16 fixture (attention: q/k/v/o_proj, MLA's q_a_proj, q_b_proj,
   kv_a_proj_with_mqa, kv_b_proj; dense, shared-expert and routed-expert gate/up/down_proj; not the
   routers `mlp.gate`, the embeddings, lm_head or the norms) is quantized in the layout releases use:
   - fp8: as transformers' FineGrainedFP8 quantizer (DeepSeek-V3 / Qwen3-*-FP8 releases): per [128, 128]
     tile of the [out, in] matrix (the last tile of a dimension that is not a multiple of 128 is
     partial), scale = 448 / amax(|tile|), codes = clamp(w * scale, -448, 448) cast to float8_e4m3fn
     (round to nearest even), `<module>.weight` F8_E4M3 [out, in] and `<module>.weight_scale_inv` F32
     [ceil(out / 128), ceil(in / 128)] = 1 / scale. config.json gains quant_method fp8, fmt e4m3,
     activation_scheme dynamic, weight_block_size [128, 128], modules_to_not_convert (lm_head and the
     routers, named exactly).
   - nvfp4: as NVIDIA ModelOpt's NVFP4QTensor.quantize (modelopt/torch/quantization/qtensor/
     nvfp4_tensor.py): weight_scale_2 = amax(|w|) / (6 * 448) (F32, one a tensor), per 16 values along
     `in` weight_scale = float8_e4m3fn(amax(|block|) / (6 * weight_scale_2)), codes = E2M1 of
     w / (float(weight_scale) * weight_scale_2) (an all-zero block's scale 1) rounded to nearest with ties to the even code, saturated
     at 6, packed two a byte (value 2j in the low nibble): `<module>.weight` U8 [out, in / 2],
     `<module>.weight_scale` F8_E4M3 [out, in / 16], `<module>.weight_scale_2` F32 [], and
     `<module>.input_scale` F32 [] (activation scale, unused for weight-only inference). config.json
     gains ModelOpt's quantization_config (quant_method modelopt, quant_algo NVFP4, group_size 16,
     exclude_modules: lm_head and the routers, named exactly).
   Every other tensor is copied unchanged (bf16).
2. The reference is transformers' own float32 forward of the DEQUANTIZED weights (fp8: float(code) *
   weight_scale_inv per tile; nvfp4: e2m1(code) * (float(weight_scale) * weight_scale_2), the block
   scale's product first, as NVFP4QTensor.dequantize; both float32 products): those weights are written
   as a float32 checkpoint into a temporary folder with the fixture's plain config, loaded with
   AutoModelForCausalLM.from_pretrained(dtype=float32, attn_implementation="eager"), checked to hold
   exactly those values, and run on the fixture's prompts (reference.json): one forward pass each for
   the logits, generate(do_sample=False) for the greedy tokens. Output: config.json, model.safetensors,
   reference.json, logits_short.f32, logits_long.f32 in the layout of the shared fixtures.
"""
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

FP8_BLOCK = 128
FP8_MAX = 448.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
NVFP4_GROUP = 16
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
          "gate_proj", "up_proj", "down_proj")


def is_linear(name):
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in LINEAR


def quantize_fp8_blocks(w):
    """w float32 [N, K] -> {suffix: tensor} (codes float8_e4m3fn [N, K], weight_scale_inv [ceil(N/128), ceil(K/128)])."""
    N, K = w.shape
    sr, sc = -(-N // FP8_BLOCK), -(-K // FP8_BLOCK)
    padded = torch.zeros(sr * FP8_BLOCK, sc * FP8_BLOCK, dtype=torch.float32)
    padded[:N, :K] = w
    tiles = padded.reshape(sr, FP8_BLOCK, sc, FP8_BLOCK)
    amax = tiles.abs().amax(dim=(1, 3)).clamp(min=1e-12)  # [sr, sc]
    scale = FP8_MAX / amax
    q = (tiles * scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    codes = q.reshape(sr * FP8_BLOCK, sc * FP8_BLOCK)[:N, :K].contiguous()
    return {"weight": codes, "weight_scale_inv": (1.0 / scale).float().contiguous()}


def dequantize_fp8_blocks(t):
    codes, scale_inv = t["weight"], t["weight_scale_inv"]
    N, K = codes.shape
    s = scale_inv.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:N, :K]
    return codes.float() * s


def to_e2m1(x):
    """float32 tensor -> E2M1 codes (uint8, sign in bit 3): nearest magnitude of E2M1, ties to the even
    code, above 6 saturated to 6 (ModelOpt's _cast_fp4)."""
    a = x.abs()
    mids = (E2M1[1:] + E2M1[:-1]) / 2  # threshold i lies between codes i and i + 1
    idx = torch.zeros_like(a, dtype=torch.int64)
    for i, t in enumerate(mids.tolist()):
        up = (a > t) | ((a == t) & ((i + 1) % 2 == 0))
        idx += up.to(torch.int64)
    sign = (x < 0) | ((x == 0) & (torch.signbit(x)))
    return (idx | (sign.to(torch.int64) << 3)).to(torch.uint8)


def e2m1_value(codes):
    v = E2M1[(codes & 7).to(torch.int64)]
    return torch.where((codes & 8) != 0, -v, v)


def quantize_nvfp4(w):
    """w float32 [N, K] (K a multiple of 16) -> ModelOpt's weight, weight_scale, weight_scale_2, input_scale."""
    N, K = w.shape
    assert K % NVFP4_GROUP == 0, f"in-features {K} not a multiple of {NVFP4_GROUP}"
    scale_2 = (w.abs().amax().clamp(min=1e-12) / (6.0 * 448.0)).float()
    blocks = w.reshape(N, K // NVFP4_GROUP, NVFP4_GROUP)
    block_scale = blocks.abs().amax(dim=-1) / (6.0 * scale_2)
    block_scale = torch.where(block_scale == 0, torch.ones_like(block_scale), block_scale)  # as ModelOpt
    block_scale = block_scale.clamp(max=448.0).to(torch.float8_e4m3fn)
    denom = block_scale.float() * scale_2  # [N, K/16]
    codes = to_e2m1(blocks / denom[..., None]).reshape(N, K)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).contiguous()
    return {"weight": packed, "weight_scale": block_scale.contiguous(), "weight_scale_2": scale_2.reshape(()),
            "input_scale": torch.tensor(1.0 / 2688.0, dtype=torch.float32)}


def dequantize_nvfp4(t):
    packed, block_scale, scale_2 = t["weight"], t["weight_scale"], t["weight_scale_2"]
    N = packed.shape[0]
    codes = torch.stack([packed & 15, packed >> 4], dim=-1).reshape(N, -1)
    s = (block_scale.float() * scale_2).repeat_interleave(NVFP4_GROUP, 1)
    return e2m1_value(codes) * s


FORMATS = {
    "fp8": (quantize_fp8_blocks, dequantize_fp8_blocks,
            {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}),
    "nvfp4": (quantize_nvfp4, dequantize_nvfp4,
              {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": NVFP4_GROUP,
               "kv_cache_quant_algo": None}),
}
# The modules left in full precision are named exactly (lm_head and each MoE layer's router
# `model.layers.N.mlp.gate`): a pattern such as "mlp.gate" would also match the dense layers'
# `mlp.gate_proj` by prefix or substring, as loaders match these lists.
NOT_CONVERTED_KEY = {"fp8": "modules_to_not_convert", "nvfp4": "exclude_modules"}


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
            assert ok, f"{fname}: transformers loaded other values"
            part = "gate_proj up_proj" if fname.endswith("gate_up_proj") else "down_proj"
            for e in range(E):
                for p in part.split():
                    checked.add(f"{pre}.mlp.experts.{e}.{p}.weight")
    missing = sorted(set(expected) - checked)
    assert not missing, f"weights not found in the loaded model: {missing[:4]} ..."


def main(fmt, src, out):
    quantize, dequantize, qconfig = FORMATS[fmt]
    os.makedirs(out, exist_ok=True)
    cfg = json.load(open(os.path.join(src, "config.json")))
    tensors = load_file(os.path.join(src, "model.safetensors"))
    written, dequantized, expected = {}, {}, {}
    for name, t in tensors.items():
        if is_linear(name):
            parts = quantize(t.float())
            module = name[: -len(".weight")]
            for suffix, v in parts.items():
                written[f"{module}.{suffix}"] = v
            dequantized[name] = expected[name] = dequantize(parts)
        else:
            written[name] = t.contiguous()
            dequantized[name] = t.float().contiguous()
    save_file(written, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    qcfg = dict(cfg)
    routers = sorted(n[: -len(".weight")] for n in tensors if n.endswith(".mlp.gate.weight"))
    qcfg["quantization_config"] = dict(qconfig, **{NOT_CONVERTED_KEY[fmt]: ["lm_head"] + routers})
    json.dump(qcfg, open(os.path.join(out, "config.json"), "w"), indent=2)

    tmp = tempfile.mkdtemp(prefix=f"{os.path.basename(out)}_dequant_")
    try:
        plain = dict(cfg)
        plain["dtype"] = "float32"
        json.dump(plain, open(os.path.join(tmp, "config.json"), "w"), indent=2)
        save_file(dequantized, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
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
        ref["generated_by"] = (f"tests/model/gen_quantized_moe.py {fmt} (transformers {type(model).__name__}, "
                               f"float32, on the dequantized {fmt} weights)")
        json.dump(ref, open(os.path.join(out, "reference.json"), "w"), indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("wrote", out, {k: os.path.getsize(os.path.join(out, k)) for k in sorted(os.listdir(out))})


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in FORMATS:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3])
