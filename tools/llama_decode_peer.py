#!/usr/bin/env python3
"""PyTorch peer for `latentserve bench decode --device cuda --synthetic llama3-8b`: the same
Llama-3-8B-shaped decode step (32 layers, hidden 4096, 32 heads x 128, 8 or 32 KV heads, FFN
14336, vocab 128256, untied LM head, bf16 random weights) written in plain PyTorch the way a
careful user would: fused q|k|v and gate|up weights, cuBLAS GEMMs, RoPE, this step's K/V written
into a contiguous cache [B, n_kv, ctx, 128], F.scaled_dot_product_attention (cuDNN first, then
flash, then efficient; enable_gqa), F.rms_norm, greedy argmax, the whole step captured in one
CUDA graph; without --compile each elementwise op is its own kernel, as in eager PyTorch; with
it inductor fuses them (one compile per shape, a minute or more each).
Time per step: CUDA events over `--steps` graph replays after `--warmup`, mean; every step
attends to `context` cached tokens plus its own.

  python3 tools/llama_decode_peer.py [--attention gqa8,mha] [--batch 1,8,32,64]
                                     [--context 1024,8192] [--compile] [--json FILE]

Shapes whose weights + KV do not fit in 90% of the GPU's memory print "no room".
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

LAYERS, HIDDEN, N_HEAD, HEAD_DIM, FFN, VOCAB = 32, 4096, 32, 128, 14336, 128256
ROPE_THETA, EPS = 500000.0, 1e-5
BACKENDS = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


class Model:
    def __init__(self, n_kv):
        g = torch.Generator(device="cuda").manual_seed(0)

        def w(*shape):
            return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16) * 0.02)

        self.n_kv = n_kv
        self.gqa_native = gqa_native(n_kv)
        self.embed = w(VOCAB, HIDDEN)
        self.lm_head = w(VOCAB, HIDDEN)
        self.final_norm = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        q_kv = (N_HEAD + 2 * n_kv) * HEAD_DIM
        self.layers = [dict(qkv=w(q_kv, HIDDEN), o=w(HIDDEN, N_HEAD * HEAD_DIM), gate_up=w(2 * FFN, HIDDEN),
                            down=w(HIDDEN, FFN), n1=torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16),
                            n2=torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)) for _ in range(LAYERS)]

    def weight_bytes(self):
        per_layer = sum(t.numel() * 2 for t in self.layers[0].values())
        return LAYERS * per_layer + (self.embed.numel() + self.lm_head.numel()) * 2


def rms_norm(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight, EPS)


def gqa_native(n_kv):
    """Whether an SDPA backend of BACKENDS takes enable_gqa for a decode query; else K/V are
    expanded to N_HEAD heads in the step (and the step reads them that many times over)."""
    if n_kv == N_HEAD:
        return True
    q = torch.randn(2, N_HEAD, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, n_kv, 64, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    try:
        with sdpa_kernel(BACKENDS, set_priority=True):
            F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        return True
    except RuntimeError:
        return False


def rope(x, cos, sin):  # x [B, h, 1, d], cos and sin [d / 2]; rotate-half (Llama / neox) layout
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def step(m, tokens, caches, pos, cos, sin):
    b = tokens.shape[0]
    x = m.embed[tokens]  # [B, H] residual stream, bf16 (as transformers keeps it)
    for L, (kc, vc) in zip(m.layers, caches):
        h = rms_norm(x, L["n1"])
        qkv = h @ L["qkv"].t()
        q, k, v = qkv.split([N_HEAD * HEAD_DIM, m.n_kv * HEAD_DIM, m.n_kv * HEAD_DIM], dim=-1)
        q = rope(q.view(b, N_HEAD, 1, HEAD_DIM), cos, sin)
        k = rope(k.view(b, m.n_kv, 1, HEAD_DIM), cos, sin)
        kc[:, :, pos:pos + 1] = k
        vc[:, :, pos:pos + 1] = v.view(b, m.n_kv, 1, HEAD_DIM)
        keys, values = kc[:, :, :pos + 1], vc[:, :, :pos + 1]
        if not m.gqa_native:
            keys = keys.repeat_interleave(N_HEAD // m.n_kv, dim=1)
            values = values.repeat_interleave(N_HEAD // m.n_kv, dim=1)
        with sdpa_kernel(BACKENDS, set_priority=True):
            a = F.scaled_dot_product_attention(q, keys, values, enable_gqa=m.n_kv != N_HEAD and m.gqa_native)
        x = x + a.reshape(b, N_HEAD * HEAD_DIM) @ L["o"].t()
        h = rms_norm(x, L["n2"])
        gu = h @ L["gate_up"].t()
        gate, up = gu.chunk(2, dim=-1)
        x = x + (F.silu(gate) * up) @ L["down"].t()
    logits = rms_norm(x, m.final_norm) @ m.lm_head.t()
    return logits.argmax(-1)


def run(m, batch, context, steps, warmup, step=step):
    kv_bytes = 2 * LAYERS * batch * m.n_kv * (context + 1) * HEAD_DIM * 2
    free, total = torch.cuda.mem_get_info()
    if kv_bytes + 4e9 > free - 0.1 * total:
        return {"batch": batch, "context": context, "no_room": True, "kv_bytes": kv_bytes}
    caches = [(torch.randn(batch, m.n_kv, context + 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
               torch.randn(batch, m.n_kv, context + 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16))
              for _ in range(LAYERS)]
    tokens = torch.randint(0, VOCAB, (batch,), device="cuda")
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2, device="cuda").float() / HEAD_DIM))
    ang = context * inv
    cos, sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)  # [HEAD_DIM / 2]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # plans, cuDNN graphs, allocator pools before capture
            step(m, tokens, caches, context, cos, sin)
    torch.cuda.current_stream().wait_stream(side)
    graph, mode = torch.cuda.CUDAGraph(), "cuda graph"
    try:
        with torch.cuda.graph(graph):
            step(m, tokens, caches, context, cos, sin)
        run_step = graph.replay
    except RuntimeError as e:  # a backend that cannot be captured: time eager steps, and say so
        print(f"  capture failed ({str(e)[:100]}): eager steps")
        torch.cuda.synchronize()
        graph, mode = None, "eager"
        run_step = lambda: step(m, tokens, caches, context, cos, sin)  # noqa: E731
    for _ in range(warmup):
        run_step()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        run_step()
    stop.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(stop) / steps
    del caches, graph
    torch.cuda.empty_cache()
    return {"batch": batch, "context": context, "tpot_ms": ms, "kv_bytes": kv_bytes, "mode": mode}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attention", default="gqa8,mha")
    ap.add_argument("--batch", default="1,8,32,64")
    ap.add_argument("--context", default="1024,8192")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the step (inductor fuses the norms, RoPE and SwiGLU; one compile per shape)")
    ap.add_argument("--json")
    args = ap.parse_args()
    step_fn = torch.compile(step, dynamic=False) if args.compile else step
    kinds = {"gqa8": 8, "mha": 32, "mqa": 1}
    rows = []
    print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__}), CUDA graph per shape, "
          f"mean of {args.steps} replays, {'torch.compile' if args.compile else 'no torch.compile'}")
    print(f"{'attn':<6} {'batch':>5} {'context':>8} {'TPOT ms':>9} {'weights MB':>11} {'KV MB':>9}")
    for name in args.attention.split(","):
        m = Model(kinds[name])
        if not m.gqa_native:
            print(f"{name}: no SDPA backend took enable_gqa; K/V are expanded in the step")
        for b in map(int, args.batch.split(",")):
            for c in map(int, args.context.split(",")):
                r = run(m, b, c, args.steps, args.warmup, step_fn)
                r.update(attention=name, weight_bytes=m.weight_bytes(), gqa_native=m.gqa_native, compiled=args.compile)
                rows.append(r)
                t = "no room" if r.get("no_room") else f"{r['tpot_ms']:.2f}"
                print(f"{name:<6} {b:>5} {c:>8} {t:>9} {m.weight_bytes() / 1e6:>11.1f} {r['kv_bytes'] / 1e6:>9.1f}",
                      flush=True)
        del m
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
