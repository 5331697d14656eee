#!/usr/bin/env python3
"""Writes the Hugging Face transformers reference fixtures that latentserve's tests compare against.

Usage:  python3 tools/make_fixtures.py OUTDIR [--only PREFIX[,PREFIX...]]

--only writes just the fixtures whose names start with one of the prefixes (and skips
rope_reference.json), e.g. `--only deepseek` for the DeepSeek fixtures alone.

Needs torch (written against 2.11) and transformers (5.17) with safetensors; runs on the CPU
in float32 and reaches nothing on the network. Writes:

  OUTDIR/<fixture>/config.json             model.save_pretrained(...)
  OUTDIR/<fixture>/model.safetensors       (or model.safetensors.index.json + shards)
  OUTDIR/<fixture>/reference.json          prompts, logits, greedy continuations (see below)
  OUTDIR/rope_reference.json               inv_freq / attention_scaling for many RoPE configs
  OUTDIR/versions.json                     torch / transformers / python versions
  OUTDIR/index.json                        which fixtures were written, which failed

reference.json:
  prompts        3 token-id lists (lengths 5, 13, 24; ids < 256)
  logits         [prompt][position][vocab] float32 logits of one full forward pass over the
                 prompt (model.eval(), torch.no_grad(), attn_implementation="eager"), rounded
                 to 7 significant digits
  greedy         [prompt][8] next ids, argmax decoding with the KV cache (what generate() does)
  greedy_margin  [prompt] smallest top1 - top2 logit gap met along that greedy path: a test whose
                 own logits differ by more than half of it may legitimately pick another token
  tensors        {name: {dtype, shape, file}} as saved
DeepSeek fixtures (MLA + MoE) add:
  routing_margin [prompt] smallest gap, over every MoE layer and every token of prompt + greedy
                 continuation, between the k-th and (k+1)-th expert choice score (and, where groups
                 are limited, between the topk_group-th and next group score); weights are redrawn
                 until it is >= MIN_ROUTING_MARGIN, so expert choices cannot flip between implementations
  mla_reference  softmax_scale (DeepseekV*Attention.scaling), rope_attention_scaling and inv_freq of the
                 rotary embedding, rope_interleaved, rotary_dim
  and config_rope_scaling.json beside config.json: the same config in the older Hub form
  (rope_theta top level, "rope_scaling" with "type"), checked to give identical logits.
Weights are redrawn until every greedy step wins by >= MIN_GREEDY_MARGIN, so the greedy ids are
stable under the tests' logits tolerances. Every fixture is independent: one that fails prints
its traceback and the rest go on; the summary at the end lists failures (exit status 1).
"""

import copy
import datetime
import inspect
import json
import math
import os
import platform
import shutil
import sys
import traceback

import torch

VOCAB = 256
N_LAYERS = 2
N_NEW_TOKENS = 8
LOGITS_STD_TARGET = 2.0  # lm_head is rescaled so logits have about this spread across the vocab
# Weights are redrawn (seed + 1000 k) until every greedy step wins by at least this much, so a
# test within its logits tolerance (2e-4 f32, 2e-3 bf16) must reproduce the greedy ids exactly.
MIN_GREEDY_MARGIN = 0.02
MAX_SEED_ATTEMPTS = 40

# Fixed prompts (ids < VOCAB), lengths 5, 13 and 24. The 24-token one is longer than the dynamic
# fixture's max_position_embeddings (16), so dynamic NTK scaling actually changes the result.
PROMPTS = [
    [17, 201, 5, 88, 142],
    [3, 250, 77, 77, 12, 199, 64, 31, 108, 2, 175, 90, 221],
    [45, 9, 133, 160, 7, 255, 0, 88, 19, 240, 61, 61, 104, 33, 187, 72, 150, 4, 229, 96, 118, 11, 203, 58],
]

# ---------------------------------------------------------------- fixture list ----

DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def fixture(name, model_type, cfg, rope=None, dtype="float32", seed=0, shard=None, note=""):
    return {"name": name, "model_type": model_type, "cfg": cfg, "rope": rope or dict(DEFAULT_ROPE),
            "dtype": dtype, "seed": seed, "shard": shard, "note": note}


SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=128, rms_norm_eps=1e-5)
GQA = dict(hidden_size=96, intermediate_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
           max_position_embeddings=128, rms_norm_eps=1e-5)
QWEN2 = dict(SMALL, rms_norm_eps=1e-6, use_sliding_window=False)
QWEN3 = dict(SMALL, head_dim=32, rms_norm_eps=1e-6, use_sliding_window=False, attention_bias=False)
QWEN_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}

FIXTURES = [
    fixture("llama_mha_f32", "llama", dict(SMALL, num_key_value_heads=4), seed=1,
            note="MHA: 4 query heads, 4 KV heads, head_dim 16"),
    fixture("llama_gqa_f32", "llama", GQA, rope={"rope_type": "default", "rope_theta": 500000.0}, seed=2,
            note="GQA: 8 query heads share 2 KV heads; head_dim 16 given explicitly (8 x 16 != hidden 96)"),
    fixture("llama_mqa_f32", "llama", dict(SMALL, intermediate_size=160, num_key_value_heads=1, head_dim=24),
            seed=3, note="MQA: 4 query heads, 1 KV head, head_dim 24 (not a power of two)"),
    fixture("llama_bias_f32", "llama", dict(SMALL, attention_bias=True, mlp_bias=True), seed=4,
            note="llama attention_bias (q/k/v/o) and mlp_bias (gate/up/down)"),
    fixture("llama3_rope_f32", "llama", SMALL,
            rope={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}, seed=5,
            note="llama3 RoPE, factor 8 over 32 original positions: head_dim 16 has high, medium and low bands"),
    fixture("llama_yarn_f32", "llama", SMALL,
            rope={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                  "original_max_position_embeddings": 32}, seed=6,
            note="YaRN factor 4 over 32 original positions; attention_factor 0.1 ln 4 + 1"),
    fixture("llama_linear_f32", "llama", SMALL, rope={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
            seed=7, note="linear position interpolation, factor 2"),
    fixture("llama_dynamic_f32", "llama", dict(SMALL, max_position_embeddings=16),
            rope={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, seed=8,
            note="dynamic NTK factor 2 with max_position_embeddings 16: the 24-token prompt and the later "
                 "decode steps of the 13-token prompt grow the base"),
    fixture("qwen2_bias_f32", "qwen2", QWEN2, rope=QWEN_ROPE, seed=9, note="qwen2: q/k/v bias, no o_proj bias"),
    fixture("qwen3_f32", "qwen3", QWEN3, rope=QWEN_ROPE, seed=10,
            note="qwen3: per-head q_norm/k_norm, head_dim 32 != hidden 64 / 4 heads"),
    fixture("mistral_f32", "mistral", dict(SMALL, head_dim=24, sliding_window=None), rope=QWEN_ROPE, seed=11,
            note="mistral, head_dim 24 given explicitly, no sliding window (as Mistral-7B-v0.3)"),
    fixture("llama_gqa_bf16", "llama", GQA, rope={"rope_type": "default", "rope_theta": 500000.0}, dtype="bfloat16",
            seed=12, note="llama_gqa shape, weights stored in bf16"),
    fixture("qwen2_bias_bf16", "qwen2", QWEN2, rope=QWEN_ROPE, dtype="bfloat16", seed=13,
            note="qwen2_bias shape, weights stored in bf16"),
    fixture("qwen3_bf16", "qwen3", QWEN3, rope=QWEN_ROPE, dtype="bfloat16", seed=14,
            note="qwen3 shape, weights stored in bf16"),
    fixture("qwen3_tied_bias_f32", "qwen3", dict(QWEN3, head_dim=16, attention_bias=True, tie_word_embeddings=True),
            rope=QWEN_ROPE, seed=15,
            note="tie_word_embeddings: no lm_head.weight in the file; qwen3 attention_bias (q/k/v/o)"),
    fixture("llama_sharded_f32", "llama", SMALL, seed=16, shard="64KB",
            note="GQA (4 query / 2 KV heads) saved in ~64 KB shards: model.safetensors.index.json + shards"),
]

# DeepSeek (MLA + MoE): 3 layers, layer 0 dense (first_k_dense_replace 1), 8 routed experts,
# kv_lora_rank 32, qk_nope 16 + qk_rope 8 per head, moe_intermediate 32. num_key_value_heads must be given:
# DeepseekV3Config defaults it to 128, and MLA needs it equal to num_attention_heads (the same value that
# DeepseekV2Config derives, so the v2 fixtures do not change).
DEEPSEEK = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=8,
                moe_intermediate_size=32, first_k_dense_replace=1, max_position_embeddings=128, rms_norm_eps=1e-6)
DEEPSEEK_V2 = dict(DEEPSEEK, q_lora_rank=None, n_shared_experts=2, num_experts_per_tok=2,
                   topk_method="group_limited_greedy", n_group=4, topk_group=2, routed_scaling_factor=1.0)
DEEPSEEK_V2_QLORA = dict(DEEPSEEK, q_lora_rank=48, v_head_dim=24, n_shared_experts=1, num_experts_per_tok=3,
                         topk_method="greedy", n_group=1, topk_group=1, routed_scaling_factor=2.0)
DEEPSEEK_V3 = dict(DEEPSEEK, q_lora_rank=48, v_head_dim=20, n_shared_experts=1, num_experts_per_tok=3,
                   n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, rope_interleave=True)
# Hub DeepSeek-V2 style: mscale == mscale_all_dim, so the cos/sin factor is 1 and only the softmax scale moves.
YARN_V2 = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}
# mscale != mscale_all_dim: both the softmax scale (mscale_all_dim 0.8) and the cos/sin factor
# (mscale(4, 1.0) / mscale(4, 0.8)) differ from 1, so applying either twice or not at all shows.
YARN_V3 = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 32,
           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}

DEEPSEEK_FIXTURES = [
    fixture("deepseek_v2_f32", "deepseek_v2", DEEPSEEK_V2, seed=101,
            note="DeepSeek-V2-Lite style MLA (q_lora_rank null: plain q_proj), complex-pair RoPE, default rope; "
                 "MoE softmax router with group_limited_greedy (4 groups, keep 2), 2 of 8 experts, 2 shared experts; "
                 "layer 0 dense"),
    fixture("deepseek_v2_qlora_f32", "deepseek_v2", DEEPSEEK_V2_QLORA, rope=YARN_V2, seed=102,
            note="DeepSeek-V2 style MLA with q_lora_rank 48 (q_a_proj -> q_a_layernorm -> q_b_proj), v_head_dim 24; "
                 "YaRN factor 4 with mscale = mscale_all_dim = 0.707 (softmax scale corrected, cos/sin factor 1); "
                 "softmax greedy router, 3 of 8 experts, routed_scaling_factor 2, 1 shared expert"),
    fixture("deepseek_v3_f32", "deepseek_v3", DEEPSEEK_V3, rope=YARN_V3, seed=103,
            note="DeepSeek-V3 style: q_lora_rank 48, v_head_dim 20, interleaved RoPE (rope_interleave), YaRN factor 4 "
                 "with mscale 1.0 / mscale_all_dim 0.8 (softmax scale and cos/sin factor both != 1); sigmoid router, "
                 "noaux_tc with random non-zero e_score_correction_bias, 4 groups keep 2, 3 of 8 experts, "
                 "norm_topk_prob, routed_scaling_factor 2.5, 1 shared expert"),
    fixture("deepseek_v2_bf16", "deepseek_v2", DEEPSEEK_V2, dtype="bfloat16", seed=104,
            note="deepseek_v2_f32 shape, weights stored in bf16"),
    fixture("deepseek_v3_bf16", "deepseek_v3", DEEPSEEK_V3, rope=YARN_V3, dtype="bfloat16", seed=105,
            note="deepseek_v3_f32 shape, weights stored in bf16 (e_score_correction_bias kept in f32, as in the "
                 "DeepSeek-V3 checkpoints)"),
]
# Routing and greedy margins are both required for a DeepSeek fixture; that takes more redraws.
MIN_ROUTING_MARGIN = 1e-3
DEEPSEEK_MAX_SEED_ATTEMPTS = 100
# Router weights are drawn with this logits spread (what separates softmax scores best differs from sigmoid);
# e_score_correction_bias ~ 0.1 randn moves choices without dominating them.
ROUTER_LOGITS_STD = {"deepseek_v2": 1.5, "deepseek_v3": 3.0}
E_SCORE_BIAS_STD = 0.1
MAX_ROUTER_DRAWS = 200

# ---------------------------------------------------------------- RoPE reference cases ----

# (name, rope_parameters, max_position_embeddings, seq_len or None, head_dims)
ROPE_CASES = [
    ("default_theta1e4", {"rope_type": "default", "rope_theta": 10000.0}, 4096, None, (64, 128)),
    ("default_theta5e5", {"rope_type": "default", "rope_theta": 500000.0}, 4096, None, (64, 128)),
    ("linear_2", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, 4096, None, (64, 128)),
    ("llama3_8", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072, None, (64, 128)),
    ("yarn_4", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 4096}, 16384, None, (64, 128)),
    ("yarn_4_beta_mscale", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "beta_fast": 16.0,
                            "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 1.0,
                            "original_max_position_embeddings": 4096}, 16384, None, (64, 128)),
    ("yarn_4_attention_factor", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                 "attention_factor": 1.25, "original_max_position_embeddings": 4096},
     16384, None, (64, 128)),
    ("yarn_40_deepseek", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "beta_fast": 32.0,
                          "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                          "original_max_position_embeddings": 4096}, 163840, None, (64, 128)),
    ("yarn_32_no_truncate", {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096},
     131072, None, (64, 128)),
    ("dynamic_2_below_max", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 2048, 1000, (64, 128)),
    ("dynamic_2_above_max", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 2048, 5000, (64, 128)),
    ("linear_2_partial_0.5", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0,
                              "partial_rotary_factor": 0.5}, 4096, None, (128,)),
    ("yarn_4_partial_0.5", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "partial_rotary_factor": 0.5,
                            "original_max_position_embeddings": 4096}, 16384, None, (128,)),
]

# ---------------------------------------------------------------- helpers ----


def transformers_major():
    import transformers
    return int(transformers.__version__.split(".")[0])


def round7(x):
    """7 significant digits: enough for float32 comparisons at 1e-6 relative, half the bytes."""
    return float(f"{x:.7g}")


def make_config(model_type, cfg, rope):
    """A transformers config for `model_type`. v5 takes `rope_parameters` (rope_theta inside); v4
    took rope_theta + rope_scaling, kept as a fallback so the script fails loudly rather than silently."""
    from transformers import AutoConfig
    kwargs = dict(vocab_size=VOCAB, num_hidden_layers=N_LAYERS, initializer_range=0.02, bos_token_id=1,
                  eos_token_id=2, tie_word_embeddings=False)
    kwargs.update(cfg)
    rope = dict(rope)
    if transformers_major() >= 5:
        kwargs["rope_parameters"] = rope
    else:
        kwargs["rope_theta"] = rope.pop("rope_theta")
        if rope.get("rope_type", "default") != "default":
            kwargs["rope_scaling"] = rope
    config = AutoConfig.for_model(model_type, **kwargs)
    # The RoPE settings must have landed where the model reads them.
    got = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    want_type = rope.get("rope_type", "default")
    if transformers_major() >= 5 and (got.get("rope_type") != want_type or
                                      float(got.get("rope_theta")) != float(rope["rope_theta"])):
        raise RuntimeError(f"config.rope_parameters came out as {got}, expected {rope}")
    return config


def make_model(config):
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config)
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise RuntimeError(f"attention implementation is {impl!r}, expected 'eager'")
    return model.to(device="cpu", dtype=torch.float32).eval()


def init_weights(model, seed, tied):
    """Deterministic weights that make the logits informative: unit-scale activations through
    the stack, RMSNorm weights in [0.8, 1.2] (not all ones), non-zero biases."""
    g = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    with torch.no_grad():
        # named_parameters() lists a tied weight once (as model.embed_tokens.weight).
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1 and "norm" in name:
                p.copy_(0.8 + 0.4 * torch.rand(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                # A tied table is also the LM head: give it the LM head's scale.
                scale = LOGITS_STD_TARGET / math.sqrt(hidden) if tied else 1.0
                p.copy_(scale * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:  # nn.Linear weight [out, in]
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            elif p.dim() == 3 and name.endswith(("experts.gate_up_proj", "experts.down_proj")):
                # fused expert weights [n_experts, out, in]
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[2]))
            else:
                raise RuntimeError(f"no init rule for parameter {name} {tuple(p.shape)}")


def set_weights(model, seed, tied, dtype):
    """init_weights, then the (untied) LM head rescaled so the logits spread about LOGITS_STD_TARGET
    across the vocab, then for bf16 fixtures every weight rounded to bf16: the reference is the f32
    model running on exactly the weights the bf16 file holds."""
    init_weights(model, seed, tied)
    if not tied:
        std = float(prompt_logits(model, PROMPTS[2]).std(dim=-1).mean())
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(LOGITS_STD_TARGET / std)
    if dtype == "bfloat16":
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))


def reset_rope_state(model):
    """Dynamic NTK keeps state between calls (the grown inv_freq and max_seq_len_cached); give every
    prompt a fresh start so each reference depends on that prompt alone."""
    for m in model.modules():
        if hasattr(m, "original_inv_freq") and hasattr(m, "inv_freq"):
            m.inv_freq = m.original_inv_freq.clone()
            if hasattr(m, "original_max_seq_len"):
                m.max_seq_len_cached = m.original_max_seq_len


def prompt_logits(model, prompt):
    reset_rope_state(model)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float32)  # [len(prompt), vocab]


def greedy(model, prompt, n_new):
    """Argmax decoding with the KV cache, one token per step, as generate(do_sample=False) does.
    Returns (ids, smallest top1 - top2 gap along the path)."""
    reset_rope_state(model)
    ids, margin = [], math.inf
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], dtype=torch.long), use_cache=True)
        for step in range(n_new):
            last = out.logits[0, -1].to(torch.float32)
            top2 = torch.topk(last, 2).values
            margin = min(margin, float(top2[0] - top2[1]))
            nxt = int(torch.argmax(last))
            ids.append(nxt)
            if step + 1 < n_new:
                out = model(input_ids=torch.tensor([[nxt]], dtype=torch.long), past_key_values=out.past_key_values,
                            use_cache=True)
    return ids, margin


def generate_ids(model, prompt, n_new):
    """model.generate as a cross-check of greedy(): eos disabled so it never stops early, and an
    explicit all-ones attention mask (else generate masks every prompt token equal to pad_token_id)."""
    reset_rope_state(model)
    gen_config = copy.deepcopy(model.generation_config)
    gen_config.eos_token_id = None
    gen_config.pad_token_id = 0
    gen_config.do_sample = False
    gen_config.max_new_tokens = n_new
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt], dtype=torch.long),
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long), generation_config=gen_config)
    return [int(t) for t in out[0, len(prompt):]]


def save(model, directory, shard):
    kwargs = {}
    params = inspect.signature(model.save_pretrained).parameters
    if "safe_serialization" in params:
        kwargs["safe_serialization"] = True
    if shard:
        kwargs["max_shard_size"] = shard
    model.save_pretrained(directory, **kwargs)


def saved_tensors(directory):
    """{name: {dtype, shape}} over every .safetensors file in `directory`, read from the headers."""
    tensors = {}
    for file in sorted(os.listdir(directory)):
        if not file.endswith(".safetensors"):
            continue
        with open(os.path.join(directory, file), "rb") as f:
            header_len = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(header_len))
        for name, info in header.items():
            if name != "__metadata__":
                tensors[name] = {"dtype": info["dtype"], "shape": info["shape"], "file": file}
    return tensors


def directory_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


# ---------------------------------------------------------------- DeepSeek ----


def make_deepseek_model(config):
    """make_model, with the eager (per-expert loop) MoE experts where transformers lets us pick it."""
    from transformers import AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", experts_implementation="eager")
    except Exception as e:  # older transformers: no experts_implementation switch
        print(f"  note: experts_implementation='eager' not accepted ({e!r}); using the default", flush=True)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise RuntimeError(f"attention implementation is {impl!r}, expected 'eager'")
    return model.to(device="cpu", dtype=torch.float32).eval()


def routing_margin(model, ids):
    """Smallest routing decision gap over every MoE layer and token of one forward pass over `ids`: the k-th
    minus (k+1)-th expert choice score after group masking and, where groups are limited, the topk_group-th
    minus next group score. Recomputed from each router's input exactly as DeepseekV{2,3}TopkRouter does."""
    cfg = model.config
    captured = []
    gates = [m for n, m in model.named_modules() if n.endswith("mlp.gate")]
    hooks = [g.register_forward_pre_hook(lambda mod, args: captured.append((mod, args[0].detach()))) for g in gates]
    try:
        reset_rope_state(model)
        with torch.no_grad():
            model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    if len(captured) != len(gates) or not gates:
        raise RuntimeError(f"captured {len(captured)} router inputs for {len(gates)} routers")
    return min(gate_margin(cfg, gate, x) for gate, x in captured)


def gate_margin(cfg, gate, x):
    """routing_margin for one router over its inputs x [..., hidden]."""
    import torch.nn.functional as F
    v3 = cfg.model_type == "deepseek_v3"
    n_exp, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    n_group, topk_group = (cfg.n_group or 1), (cfg.topk_group or 1)
    grouped = v3 or getattr(cfg, "topk_method", "greedy") == "group_limited_greedy"
    margin = math.inf
    with torch.no_grad():
        logits = F.linear(x.reshape(-1, cfg.hidden_size).to(torch.float32), gate.weight.to(torch.float32))
        if v3:
            choice = logits.sigmoid() + gate.e_score_correction_bias
            group_scores = choice.view(-1, n_group, n_exp // n_group).topk(2, dim=-1)[0].sum(dim=-1)
            fill = float("-inf")
        else:
            choice = logits.softmax(dim=-1, dtype=torch.float32)
            group_scores = choice.view(-1, n_group, n_exp // n_group).max(dim=-1).values
            fill = 0.0
        if grouped and topk_group < n_group:
            ordered = group_scores.sort(dim=-1, descending=True).values
            margin = min(margin, float((ordered[:, topk_group - 1] - ordered[:, topk_group]).min()))
            group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            score_mask = group_mask.unsqueeze(-1).expand(-1, n_group, n_exp // n_group).reshape(-1, n_exp)
            choice = choice.masked_fill(~score_mask.bool(), fill)
        ordered = choice.sort(dim=-1, descending=True).values
        gap = ordered[:, k - 1] - ordered[:, k]
        margin = min(margin, float(gap.min()))
    return margin


def router_inputs(model, gate, prompts):
    """The inputs `gate` sees over each prompt (one forward pass per prompt), concatenated [tokens, hidden]."""
    captured = []
    hook = gate.register_forward_pre_hook(lambda mod, args: captured.append(args[0].detach().reshape(
        -1, model.config.hidden_size)))
    try:
        for p in prompts:
            reset_rope_state(model)
            with torch.no_grad():
                model(input_ids=torch.tensor([p], dtype=torch.long), use_cache=False)
    finally:
        hook.remove()
    return torch.cat(captured)


def draw_routers(model, seed, dtype):
    """Draws each MoE layer's router (and V3's e_score_correction_bias), layer by layer, until no routing decision
    on the fixed prompts is within MIN_ROUTING_MARGIN. A search strategy only: the continuation tokens are checked
    afterwards (routing_margin), and the draws are seeded, so the result is reproducible."""
    g = torch.Generator().manual_seed(seed + 7)
    cfg = model.config
    std = ROUTER_LOGITS_STD[cfg.model_type]
    layers = [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "gate")]
    with torch.no_grad():
        for gate in layers:  # in layer order: a later router's inputs depend on the earlier ones
            x = router_inputs(model, gate, PROMPTS)
            for _ in range(MAX_ROUTER_DRAWS):
                w = std * torch.randn(gate.weight.shape, generator=g) / math.sqrt(gate.weight.shape[1])
                if dtype == "bfloat16":
                    w = w.to(torch.bfloat16).to(torch.float32)
                gate.weight.copy_(w)
                if hasattr(gate, "e_score_correction_bias"):
                    gate.e_score_correction_bias.copy_(
                        E_SCORE_BIAS_STD * torch.randn(gate.e_score_correction_bias.shape, generator=g))
                if gate_margin(cfg, gate, x) >= MIN_ROUTING_MARGIN:
                    break


def choose_deepseek_seed(model, spec, tied):
    """Redraw weights (seed + 1000 a) until every greedy step wins by MIN_GREEDY_MARGIN and no routing decision
    along prompt + greedy continuation is within MIN_ROUTING_MARGIN. Returns (seed, greedy paths, routing margins)."""
    name, best = spec["name"], None
    for attempt in range(DEEPSEEK_MAX_SEED_ATTEMPTS):
        seed = spec["seed"] + 1000 * attempt
        set_deepseek_weights(model, seed, tied, spec["dtype"])
        paths = [greedy(model, p, N_NEW_TOKENS) for p in PROMPTS]
        margin = min(m for _, m in paths)
        routing = [routing_margin(model, p + ids[:-1]) for p, (ids, _) in zip(PROMPTS, paths)]
        score = min(margin / MIN_GREEDY_MARGIN, min(routing) / MIN_ROUTING_MARGIN)
        if best is None or score > best[0]:
            best = (score, seed)
        if margin >= MIN_GREEDY_MARGIN and min(routing) >= MIN_ROUTING_MARGIN:
            print(f"  {name}: seed {seed} (attempt {attempt + 1}): greedy margin {margin:.4f}, "
                  f"routing margin {min(routing):.2e}", flush=True)
            return seed, paths, routing
    seed = best[1]
    print(f"  warning: {name}: no seed met greedy >= {MIN_GREEDY_MARGIN} and routing >= {MIN_ROUTING_MARGIN}; "
          f"using seed {seed} (score {best[0]:.3f})", flush=True)
    set_deepseek_weights(model, seed, tied, spec["dtype"])
    paths = [greedy(model, p, N_NEW_TOKENS) for p in PROMPTS]
    routing = [routing_margin(model, p + ids[:-1]) for p, (ids, _) in zip(PROMPTS, paths)]
    return seed, paths, routing


def set_deepseek_weights(model, seed, tied, dtype):
    """set_weights (LM head rescale, bf16 rounding), then the routers drawn by draw_routers."""
    set_weights(model, seed, tied, dtype)
    draw_routers(model, seed, dtype)


def mla_reference(model):
    """What transformers uses for the attention scale and the rotary embedding of this model."""
    attn = model.model.layers[0].self_attn
    rotary = model.model.rotary_emb
    cfg = model.config
    return {
        "softmax_scale": float(attn.scaling),
        "rope_attention_scaling": float(rotary.attention_scaling),
        "inv_freq": [float(v) for v in rotary.original_inv_freq.to(torch.float32).tolist()],
        "rotary_dim": 2 * int(rotary.original_inv_freq.numel()),
        # v2 always rotates (2i, 2i+1) pairs (complex multiply); v3 when rope_interleave
        "rope_interleaved": bool(getattr(cfg, "rope_interleave", True)) if cfg.model_type == "deepseek_v3" else True,
        "moe_layers": [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")],
    }


def write_rope_scaling_config(model, directory, logits):
    """config_rope_scaling.json: config.json rewritten the way older Hub configs spell RoPE (rope_theta at the top
    level, "rope_scaling" with "type", null for default RoPE). Checked: a model built from it with the same weights
    gives the same logits. Returns the max |logit difference| (expected 0)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope_type = rope.pop("rope_type", "default")
    cfg["rope_scaling"] = None if rope_type == "default" else {"type": rope_type, **rope}
    path = os.path.join(directory, "config_rope_scaling.json")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    old = copy.deepcopy(cfg)
    old.pop("transformers_version", None)
    config = AutoConfig.for_model(old.pop("model_type"), **old)
    twin = make_deepseek_model(config)
    twin.load_state_dict(model.state_dict())
    if float(twin.model.layers[0].self_attn.scaling) != float(model.model.layers[0].self_attn.scaling):
        raise RuntimeError("config_rope_scaling.json gives another softmax scale")
    diff = max(float((prompt_logits(twin, p) - l).abs().max()) for p, l in zip(PROMPTS, logits))
    if diff > 1e-5:
        raise RuntimeError(f"config_rope_scaling.json gives logits off by {diff}")
    return diff


# ---------------------------------------------------------------- one fixture ----


def make_fixture(spec, outdir, versions):
    name = spec["name"]
    directory = os.path.join(outdir, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)

    deepseek = spec["model_type"].startswith("deepseek")
    config = make_config(spec["model_type"], spec["cfg"], spec["rope"])
    tied = bool(config.tie_word_embeddings)
    model = make_model(config) if not deepseek else make_deepseek_model(config)
    if tied and model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        raise RuntimeError("tie_word_embeddings=True but lm_head and embed_tokens are separate tensors")

    seed, paths, best, routing = None, None, None, None
    if not deepseek:
        for attempt in range(MAX_SEED_ATTEMPTS):
            seed = spec["seed"] + 1000 * attempt
            set_weights(model, seed, tied, spec["dtype"])
            paths = [greedy(model, p, N_NEW_TOKENS) for p in PROMPTS]
            margin = min(m for _, m in paths)
            if best is None or margin > best[1]:
                best = (seed, margin)
            if margin >= MIN_GREEDY_MARGIN:
                break
        else:
            seed = best[0]
            print(f"  warning: {name}: no seed gave greedy margins >= {MIN_GREEDY_MARGIN}; using seed {seed} "
                  f"(margin {best[1]:.4f})", flush=True)
            set_weights(model, seed, tied, spec["dtype"])
            paths = [greedy(model, p, N_NEW_TOKENS) for p in PROMPTS]
    else:
        seed, paths, routing = choose_deepseek_seed(model, spec, tied)

    logits = [prompt_logits(model, p) for p in PROMPTS]
    logits_std = float(logits[2].std(dim=-1).mean())

    generate_agrees = None
    try:
        generate_agrees = all(generate_ids(model, p, N_NEW_TOKENS) == ids for p, (ids, _) in zip(PROMPTS, paths))
        if not generate_agrees:
            print(f"  warning: {name}: model.generate disagrees with the manual greedy loop", flush=True)
    except Exception as e:  # the cross-check is optional
        print(f"  note: {name}: generate() cross-check skipped: {e!r}", flush=True)

    to_save = model if spec["dtype"] == "float32" else copy.deepcopy(model).to(torch.bfloat16)
    if deepseek and spec["dtype"] != "float32":
        # The reference ran with the f32 bias; keep it f32 in the file (as DeepSeek-V3 checkpoints do).
        with torch.no_grad():
            for bname, b32 in sorted(model.named_buffers()):
                if bname.endswith("e_score_correction_bias"):
                    owner, attr = bname.rsplit(".", 1)
                    setattr(to_save.get_submodule(owner), attr, b32.detach().clone().to(torch.float32))
    save(to_save, directory, spec["shard"])
    tensors = saved_tensors(directory)
    if not tensors:
        raise RuntimeError(f"no .safetensors written in {directory}: {os.listdir(directory)}")
    index = os.path.join(directory, "model.safetensors.index.json")
    if spec["shard"] and not os.path.exists(index):
        raise RuntimeError(f"asked for shards but there is no model.safetensors.index.json: {os.listdir(directory)}")
    if tied and "lm_head.weight" in tensors:
        print(f"  note: {name}: lm_head.weight was saved although the weights are tied", flush=True)

    # Round trip: reload what was written and check it gives the same logits.
    reload_diff = None
    try:
        from transformers import AutoModelForCausalLM
        reloaded = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager")
        reloaded = reloaded.to(device="cpu", dtype=torch.float32).eval()
        reload_diff = max(float((prompt_logits(reloaded, p) - l).abs().max()) for p, l in zip(PROMPTS, logits))
        if reload_diff > 1e-4:
            raise RuntimeError(f"reloaded checkpoint gives logits off by {reload_diff}")
    except RuntimeError:
        raise
    except Exception as e:
        print(f"  note: {name}: reload check skipped: {e!r}", flush=True)

    reference = {
        "name": name,
        "model_type": spec["model_type"],
        "note": spec["note"],
        "weights_dtype": spec["dtype"],
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "prompts": PROMPTS,
        "logits": [[[round7(v) for v in row] for row in l.tolist()] for l in logits],
        "logits_rounding": "7 significant digits",
        "greedy": [ids for ids, _ in paths],
        "greedy_margin": [round7(m) for _, m in paths],
        "greedy_method": "argmax with the KV cache, one token per step (generate(do_sample=False))",
        "generate_agrees": generate_agrees,
        "logits_std": round7(logits_std),
        "reload_max_abs_diff": reload_diff,
        "tensors": tensors,
        "seed": seed,
        "versions": versions,
    }
    if deepseek:
        reference["routing_margin"] = [round7(m) for m in routing]
        reference["routing_margin_method"] = (
            "min over MoE layers and tokens of prompt + greedy ids[:-1] (one forward pass, use_cache=False) of the "
            "k-th minus (k+1)-th expert choice score (softmax score for deepseek_v2; sigmoid + "
            "e_score_correction_bias for deepseek_v3) after group masking, and of the topk_group-th minus next group "
            "score where groups are limited")
        reference["mla_reference"] = mla_reference(model)
        reference["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
        reference["rope_scaling_form_max_abs_diff"] = write_rope_scaling_config(model, directory, logits)
    if spec["rope"].get("rope_type") == "dynamic":
        reference["rope_note"] = (
            "Each forward call uses inv_freq for seq_len = max(position_ids) + 1 when that exceeds "
            "max_position_embeddings (base grown in float32 from an int64 seq_len tensor), the default table "
            "otherwise. In the greedy path, keys already in the KV cache keep the rotation they were written "
            "with. The RoPE state is reset before each prompt.")
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
    print(f"  {name}: logits std {logits_std:.2f}, greedy margins {[round(m, 3) for _, m in paths]}, "
          f"{len(tensors)} tensors, {directory_bytes(directory) / 1024:.0f} KiB", flush=True)


# ---------------------------------------------------------------- RoPE reference ----


def rope_case(name, rope, max_pos, seq_len, head_dim):
    """inv_freq and attention scaling as LlamaRotaryEmbedding computes them (its __init__ calls the
    model's compute_default_rope_parameters or ROPE_INIT_FUNCTIONS[rope_type]); for a seq_len, the
    forward pass's dynamic update runs over positions 0..seq_len-1, exactly as in a model."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    cfg = dict(hidden_size=head_dim * 4, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
               head_dim=head_dim, max_position_embeddings=max_pos)
    config = make_config("llama", cfg, rope)
    rotary = LlamaRotaryEmbedding(config=config)
    via = "LlamaRotaryEmbedding.__init__"
    if seq_len is not None:
        x = torch.zeros(1, seq_len, head_dim, dtype=torch.float32)
        position_ids = torch.arange(seq_len, dtype=torch.long)[None, :]
        rotary(x, position_ids)
        via = f"LlamaRotaryEmbedding.forward(position_ids=arange({seq_len}))"
    inv_freq = rotary.inv_freq.to(torch.float32)
    result = {
        "name": name,
        "head_dim": head_dim,
        "max_position_embeddings": max_pos,
        "seq_len": seq_len,
        "rope_parameters": rope,
        "via": via,
        "inv_freq": [float(v) for v in inv_freq.tolist()],  # exact float32 values
        "attention_scaling": float(rotary.attention_scaling),
    }
    # Cross-check against the rope function itself where transformers exports one.
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
        rope_type = rope.get("rope_type", "default")
        if seq_len is None and rope_type in ROPE_INIT_FUNCTIONS:
            direct, factor = ROPE_INIT_FUNCTIONS[rope_type](config, None)
            if not torch.equal(direct.to(torch.float32), inv_freq) or float(factor) != float(rotary.attention_scaling):
                print(f"  warning: {name}: ROPE_INIT_FUNCTIONS['{rope_type}'] differs from the module", flush=True)
    except Exception as e:
        print(f"  note: {name}: direct ROPE_INIT_FUNCTIONS call skipped: {e!r}", flush=True)
    return result


def make_rope_reference(outdir, versions):
    cases, failures = [], []
    for base_name, rope, max_pos, seq_len, head_dims in ROPE_CASES:
        for head_dim in head_dims:
            name = f"{base_name}_hd{head_dim}"
            try:
                cases.append(rope_case(name, dict(rope), max_pos, seq_len, head_dim))
            except Exception:
                print(f"FAILED rope case {name}:", flush=True)
                traceback.print_exc()
                failures.append({"name": name, "error": traceback.format_exc(limit=3)})
    with open(os.path.join(outdir, "rope_reference.json"), "w") as f:
        json.dump({"versions": versions, "cases": cases, "failures": failures}, f, indent=1)
    print(f"rope_reference.json: {len(cases)} cases, {len(failures)} failed", flush=True)
    return failures


# ---------------------------------------------------------------- main ----


def collect_versions():
    import transformers
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
        "generated_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    for module in ("safetensors", "numpy", "huggingface_hub"):
        try:
            versions[module] = __import__(module).__version__
        except Exception:
            pass
    return versions


def main(argv):
    only = None
    if len(argv) == 4 and argv[2] == "--only":
        only = tuple(p for p in argv[3].split(",") if p)
        argv = argv[:2]
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    outdir = os.path.abspath(argv[1])
    os.makedirs(outdir, exist_ok=True)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.float32)

    versions = collect_versions()
    with open(os.path.join(outdir, "versions.json"), "w") as f:
        json.dump(versions, f, indent=1)
    print(f"torch {versions['torch']}, transformers {versions['transformers']} -> {outdir}", flush=True)
    if not versions["transformers"].startswith("5."):
        print("warning: written against transformers 5.x; this is " + versions["transformers"], flush=True)

    written, failed = [], []
    specs = FIXTURES + DEEPSEEK_FIXTURES
    if only:
        specs = [spec for spec in specs if spec["name"].startswith(only)]
    for spec in specs:
        print(f"fixture {spec['name']}", flush=True)
        try:
            make_fixture(spec, outdir, versions)
            written.append(spec["name"])
        except Exception:
            print(f"FAILED fixture {spec['name']}:", flush=True)
            traceback.print_exc()
            failed.append(spec["name"])
            shutil.rmtree(os.path.join(outdir, spec["name"]), ignore_errors=True)

    rope_failures = []
    try:
        if not only:
            rope_failures = make_rope_reference(outdir, versions)
    except Exception:
        print("FAILED rope_reference.json:", flush=True)
        traceback.print_exc()
        rope_failures = [{"name": "rope_reference.json", "error": traceback.format_exc(limit=3)}]

    with open(os.path.join(outdir, "index.json"), "w") as f:
        json.dump({"fixtures": written, "failed": failed, "rope_failures": [r["name"] for r in rope_failures],
                   "versions": versions}, f, indent=1)
    total = directory_bytes(outdir)
    print()
    print(f"summary: {len(written)} of {len(specs)} fixtures written, failed: {failed or 'none'}; "
          f"rope cases failed: {[r['name'] for r in rope_failures] or 'none'}; total {total / 1e6:.1f} MB")
    if total > 10e6:
        print("warning: output is over 10 MB")
    return 1 if failed or rope_failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
