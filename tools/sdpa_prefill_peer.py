#!/usr/bin/env python3
"""The peer of bench/bench_cuda_prefill_attention: the same causal bf16 prefill shapes through
PyTorch scaled_dot_product_attention (is_causal=True), once per backend (cuDNN, flash) selected
with torch.nn.attention.sdpa_kernel.

Shapes: head_dim 128, 32 query heads, MHA (32 KV heads) and GQA-8 (8 KV heads), 16K query tokens
per call as [B, 32, L, 128] bf16 contiguous with B = 16384 / L, L in 1K .. 16K. GQA passes
k, v as [B, 8, L, 128] with enable_gqa=True; a backend that refuses that gets k, v expanded to
32 heads outside the timed region (noted in the "note" column).

FLOPs, the same formula as the C++ benchmark (docs/cuda-prefill-attention.md):
    4 * n_head * head_dim * B * L * (L + 1) / 2
Timing: 3 warm-up calls, then the median over --reps calls, each between its own CUDA events.

    python3 tools/sdpa_prefill_peer.py [--quick] [--reps 30] [--json FILE]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOKENS, HEADS, HEAD_DIM = 16384, 32, 128
PEAK_TFLOPS = 989.0  # H100/H200 SXM dense bf16 (the floor is the time at that rate)


def flops(batch, context):
    return 4.0 * HEADS * HEAD_DIM * batch * context * (context + 1) / 2.0


def time_ms(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def run(backend, n_head_kv, context, reps):
    batch = TOKENS // context
    gen = torch.Generator(device="cuda").manual_seed(context * 131 + n_head_kv)

    def rand(heads):
        return (torch.rand(batch, heads, context, HEAD_DIM, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)

    q, k, v = rand(HEADS), rand(n_head_kv), rand(n_head_kv)
    gqa = n_head_kv != HEADS
    note = ""
    with sdpa_kernel([backend]):
        call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)  # noqa: E731
        try:
            call()
        except RuntimeError as e:
            if not gqa:
                return None, f"unsupported: {str(e).splitlines()[0][:60]}"
            group = HEADS // n_head_kv
            k = k.repeat_interleave(group, dim=1).contiguous()
            v = v.repeat_interleave(group, dim=1).contiguous()
            call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            note = "kv expanded"
            try:
                call()
            except RuntimeError as e2:
                return None, f"unsupported: {str(e2).splitlines()[0][:60]}"
        return time_ms(call, reps), note


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="contexts 1K and 8K only")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default="sdpa_prefill_peer.json")
    args = ap.parse_args()
    reps = max(20, args.reps)
    contexts = [1024, 8192] if args.quick else [1024, 2048, 4096, 8192, 16384]
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__})")

    rows = []
    for bname, backend in backends:
        for kind, n_kv in (("MHA", 32), ("GQA-8", 8)):
            for context in contexts:
                t, note = run(backend, n_kv, context, reps)
                batch = TOKENS // context
                row = {"backend": bname, "kind": kind, "context": context, "batch": batch, "n_head": HEADS,
                       "n_head_kv": n_kv, "head_dim": HEAD_DIM, "time_ms": t, "note": note}
                if t is not None:
                    row["tflops"] = flops(batch, context) / (t * 1e-3) / 1e12
                    row["floor_ms"] = flops(batch, context) / (PEAK_TFLOPS * 1e12) * 1e3
                rows.append(row)
                torch.cuda.empty_cache()

    print(f"\ncausal bf16 SDPA, head_dim {HEAD_DIM}, {HEADS} q heads, {TOKENS} tokens per call, median of {reps}")
    print(f"{'backend':<7} {'kind':<6} {'context':>7} {'batch':>5} {'n_kv':>5} {'time_ms':>10} {'TFLOP/s':>9} "
          f"{'floor_ms':>10} {'of_peak':>7}  note")
    for r in rows:
        if r["time_ms"] is None:
            print(f"{r['backend']:<7} {r['kind']:<6} {r['context']:>7} {r['batch']:>5} {r['n_head_kv']:>5} "
                  f"{'-':>10} {'-':>9} {'-':>10} {'-':>7}  {r['note']}")
            continue
        print(f"{r['backend']:<7} {r['kind']:<6} {r['context']:>7} {r['batch']:>5} {r['n_head_kv']:>5} "
              f"{r['time_ms']:>10.3f} {r['tflops']:>9.1f} {r['floor_ms']:>10.3f} "
              f"{100 * r['tflops'] / PEAK_TFLOPS:>6.1f}%  {r['note']}")
    print(f"(floor: the FLOPs at {PEAK_TFLOPS} TFLOP/s, dense bf16 peak)")
    with open(args.json, "w") as f:
        json.dump({"bench": "sdpa_prefill_peer", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "flops_formula": "4 * n_head * head_dim * sum_s L_s (L_s + 1) / 2", "reps": reps, "rows": rows},
                  f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
