#!/usr/bin/env python3
"""Writes tests/model/fixtures/deepseek_v4_yarn: a tiny random DeepSeek-V4 with DeepSeek-V4-Flash's
layer features that shared/fixtures/hf/deepseek_v4 leaves off, and transformers' float32 reference
for it, in the layout of shared/fixtures/hf/<arch>.

Run where python3 has torch and transformers 5.17 (the H200 machine; it runs on the CPU, so the
indexer's torch.topk breaks ties as FreeToken's CPU backend does), from the repository root:
    python3 tests/model/gen_deepseek_v4_yarn.py tests/model/fixtures/deepseek_v4_yarn
(an optional second argument is the seed, 2 by default: the committed fixture; seeds 1234, 3, 4 and 5 give a greedy run whose cached and uncached argmax loops disagree). It writes config.json,
model.safetensors, reference.json, logits_short.f32 and logits_long.f32 (under 1 MB together).

The config is the shared fixture's (transformers DeepseekV4Config) with, as DeepSeek-V4-Flash has:
  - layer_types sliding_attention, sliding_attention (Flash's compress_ratios 0, 0: the window only,
    at the "main" RoPE, rope_theta 10000), then compressed_sparse_attention (rate 4, indexer with 2
    heads of 16 dims keeping the top 8) and heavily_compressed_attention (rate 16 here, 128 in Flash);
  - YaRN on the compressed layers: rope_parameters.compress = yarn, compress_rope_theta 160000,
    factor 16, original_max_position_embeddings 4096 (max_position_embeddings 65536 = 16 x 4096, so
    transformers versions that take the factor as max / original agree), beta_fast 32, beta_slow 1,
    no attention_factor: _compute_yarn_parameters derives 0.1 ln 16 + 1 and cos / sin carry it (Flash's
    own config, built from rope_scaling, gets attention_factor 1.0 from DeepseekV4Config; the engine
    reads whichever the saved config holds). head_dim 32 x partial_rotary_factor 0.5 = 16 rotated dims
    (8 pairs; YaRN's correction range is pairs 2..5, so some pairs keep their frequency, some ramp and
    some are divided by 16);
  - hash_moe on layers 0-1, sqrtsoftplus-routed moe on 2-3, hyper-connections of 4 streams, grouped
    output LoRA (2 groups of 16), a window of 8.
Prompts of 37 and 130 tokens cross the window and several compressed blocks (the long one: 32 CSA and
8 HCA entries, the indexer choosing 8). Every parameter and buffer that the checkpoint holds is drawn
at random with a seeded generator (norm weights, sinks, hyper-connection base / scale around 1,
compressor position biases, router bias, a tid2eid row of distinct experts per token), the model is
saved in bfloat16, reloaded in float32 with eager attention (checked to hold exactly the saved
values), and the reference is:
  logits_<case>.f32: float32 [len(input_ids), vocab] of one forward pass over the prompt;
  greedy_new_tokens: generate(do_sample=False, max_new_tokens=16), checked against an argmax loop of
  uncached forward passes (the two must agree, or the script stops; try another seed then).
reference.json also records the compress RoPE's inv_freq and attention scaling transformers used.
"""
import json
import os
import sys

import torch
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

VOCAB = 256


def make_config():
    return DeepseekV4Config(
        vocab_size=VOCAB,
        hidden_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=32,
        q_lora_rank=48,
        o_groups=2,
        o_lora_rank=16,
        num_experts_per_tok=2,
        n_routed_experts=8,
        n_shared_experts=1,
        scoring_func="sqrtsoftplus",
        norm_topk_prob=True,
        routed_scaling_factor=1.5,
        max_position_embeddings=65536,
        rope_theta=10000.0,
        compress_rope_theta=160000.0,
        partial_rotary_factor=0.5,
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.5, "factor": 16.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0},
        },
        layer_types=["sliding_attention", "sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"],
        hc_mult=4,
        hc_sinkhorn_iters=20,
        hc_eps=1e-6,
        swiglu_limit=10.0,
        sliding_window=8,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=8,
        num_nextn_predict_layers=0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        initializer_range=0.08,
    )


def randomize(model, gen):
    n_exp, k = model.config.n_routed_experts, model.config.num_experts_per_tok
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("position_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))  # the compressors' softmax biases
            elif p.ndim == 1:
                # norm weights, sinks, hyper-connection base and scale: around 1, never the init values
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn(b.shape, generator=gen))
            elif name.endswith("tid2eid"):
                rows = [torch.randperm(n_exp, generator=gen)[:k] for _ in range(b.shape[0])]
                b.copy_(torch.stack(rows).to(b.dtype))


def greedy_uncached(model, ids, n):
    seq = list(ids)
    out = []
    for _ in range(n):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        tok = int(torch.argmax(logits))
        out.append(tok)
        seq.append(tok)
    return out


def main(out, seed):
    import transformers
    print("transformers", transformers.__version__, "torch", torch.__version__)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(seed)
    cfg = make_config()
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    randomize(model, gen)
    saved = {k: v.detach().to(torch.bfloat16).float() if v.is_floating_point() else v.detach().clone()
             for k, v in model.state_dict().items()}
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "config.json")) as f:
        print(json.dumps(json.load(f), indent=1))

    ref = DeepseekV4ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    loaded = ref.state_dict()
    for k, v in saved.items():
        if k.endswith("inv_freq"):
            continue
        if k not in loaded or not torch.equal(loaded[k].to(v.dtype), v):
            sys.exit(f"{k}: the reloaded model does not hold the saved value")
    from safetensors import safe_open
    with safe_open(os.path.join(out, "model.safetensors"), "pt") as f:
        for k in sorted(f.keys()):
            print(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape())

    rot = ref.model.rotary_emb
    rope = {
        "compress_inv_freq": [float(x) for x in rot.compress_inv_freq],
        "compress_attention_scaling": float(rot.compress_attention_scaling),
        "main_inv_freq": [float(x) for x in rot.main_inv_freq],
        "main_attention_scaling": float(rot.main_attention_scaling),
    }
    print("rope", json.dumps(rope))

    cases = []
    for name, n in (("short", 37), ("long", 130)):
        ids = [1] + torch.randint(3, VOCAB, (n - 1,), generator=gen).tolist()
        with torch.no_grad():
            logits = ref(torch.tensor([ids]), use_cache=False).logits[0].float().contiguous()
            g = ref.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=16, min_new_tokens=16)
            greedy = g[0, len(ids):].tolist()
            check = greedy_uncached(ref, ids, 16)
        if greedy != check:
            sys.exit(f"{name}: generate {greedy} differs from the uncached argmax loop {check} (try another seed)")
        fn = f"logits_{name}.f32"
        logits.numpy().astype("<f4").tofile(os.path.join(out, fn))
        cases.append({"name": name, "input_ids": ids, "logits_file": fn, "logits_shape": list(logits.shape),
                      "greedy_new_tokens": greedy})
        print(name, "greedy", greedy)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"dtype": "float32", "generator": "tests/model/gen_deepseek_v4_yarn.py", "seed": seed,
                   "transformers": transformers.__version__, "rope": rope, "cases": cases}, f, indent=1)
    total = 0
    for fn in sorted(os.listdir(out)):
        size = os.path.getsize(os.path.join(out, fn))
        total += size
        print(fn, size)
    print("total", total)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "deepseek_v4_yarn_out", int(sys.argv[2]) if len(sys.argv) > 2 else 2)
