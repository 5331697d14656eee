#!/usr/bin/env python3
"""PyTorch peer for bench_cuda_decode_attention: torch.nn.functional.scaled_dot_product_attention
on the same decode shapes, with contiguous (not paged) K/V, under the cuDNN and the flash
backends (torch.nn.attention.sdpa_kernel), CUDA-event median time, and the same GB/s column
(K+V bytes of the logical, unexpanded cache / time).

  q [B, 32, 1, 128] bf16; k, v [B, n_kv, ctx, 128] bf16 with enable_gqa=True. Where a backend
  refuses enable_gqa, K/V are expanded to 32 heads beforehand (mode "expanded": the kernel then
  reads n_head/n_kv times more bytes than the GB/s column counts, which is the point: that is
  what GQA without native support costs).

Shapes under 256 MB of K+V rotate over several copies so no launch reads from L2.

  python3 tools/sdpa_decode_peer.py [--quick] [--json FILE] [--roof-tbs 4.45]
"""
import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

N_HEAD, HEAD_DIM = 32, 128
MAX_KV_BYTES = 60e9
ROTATE_BYTES = 256e6
KINDS = [("MHA", 32), ("GQA-8", 8), ("MQA", 1)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def median_ms(fn, samples=50):
    """Median milliseconds of one call; bursts of back-to-back calls of >= ~200 us per sample."""
    for i in range(3):
        fn(i)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(5):
        fn(i)
    stop.record()
    torch.cuda.synchronize()
    estimate = start.elapsed_time(stop) / 5
    burst = max(1, min(64, math.ceil(0.2 / max(estimate, 1e-4))))
    if estimate < 0.02:
        samples *= 2
    times = []
    for s in range(samples):
        start.record()
        for i in range(burst):
            fn(s * burst + i)
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / burst)
    return statistics.median(times)


def read_roof_bytes_per_s():
    """A torch stand-in for read_only_pass: sum over 4 GiB (one read pass, a tiny write)."""
    x = torch.empty(2 << 30, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
    ms = median_ms(lambda i: x.sum(dtype=torch.float32), samples=20)
    del x
    torch.cuda.empty_cache()
    return (4 << 30) / (ms * 1e-3)


def run(kind, n_kv, batch, ctx, backend_name, backend, roof):
    kv_bytes = 2 * batch * n_kv * ctx * HEAD_DIM * 2
    replicas = max(1, math.ceil(ROTATE_BYTES / kv_bytes))
    q = torch.randn(batch, N_HEAD, 1, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    ks = [torch.randn(batch, n_kv, ctx, HEAD_DIM, dtype=torch.bfloat16, device="cuda") for _ in range(replicas)]
    vs = [torch.randn(batch, n_kv, ctx, HEAD_DIM, dtype=torch.bfloat16, device="cuda") for _ in range(replicas)]
    scale = 1.0 / math.sqrt(HEAD_DIM)
    mode = "gqa" if n_kv != N_HEAD else "mha"

    def call(i, k_list, v_list, gqa):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k_list[i % replicas], v_list[i % replicas], scale=scale,
                                                  enable_gqa=gqa)

    try:
        call(0, ks, vs, n_kv != N_HEAD)
        torch.cuda.synchronize()
        ms = median_ms(lambda i: call(i, ks, vs, n_kv != N_HEAD))
    except RuntimeError as e:
        if n_kv == N_HEAD:
            return {"kind": kind, "backend": backend_name, "batch": batch, "context": ctx, "error": str(e)[:120]}
        group = N_HEAD // n_kv
        if kv_bytes * group > MAX_KV_BYTES:
            return {"kind": kind, "backend": backend_name, "batch": batch, "context": ctx,
                    "error": "enable_gqa refused and the expanded K/V would exceed 60 GB"}
        mode = "expanded"
        ks = [k.repeat_interleave(group, dim=1) for k in ks]
        vs = [v.repeat_interleave(group, dim=1) for v in vs]
        try:
            ms = median_ms(lambda i: call(i, ks, vs, False))
        except RuntimeError as e2:
            return {"kind": kind, "backend": backend_name, "batch": batch, "context": ctx, "error": str(e2)[:120]}
    t = ms * 1e-3
    return {"kind": kind, "kv_dtype": "bf16", "backend": backend_name, "mode": mode, "batch": batch, "context": ctx,
            "n_head_kv": n_kv, "kv_bytes": kv_bytes, "time_s": t, "floor_s": kv_bytes / roof,
            "gb_per_s": kv_bytes / t * 1e-9, "roof_fraction": kv_bytes / t / roof}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--roof-tbs", type=float, help="the read roof from bench_cuda_decode_attention (TB/s)")
    args = ap.parse_args()

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  cuDNN {torch.backends.cudnn.version()}")
    roof = args.roof_tbs * 1e12 if args.roof_tbs else read_roof_bytes_per_s()
    print(f"read roof: {roof * 1e-12:.3f} TB/s ({'given' if args.roof_tbs else 'torch sum over 4 GiB'})\n")

    batches = [16, 64] if args.quick else [1, 16, 64, 128]
    contexts = [4096] if args.quick else [4096, 16384]
    rows = []
    for kind, n_kv in KINDS:
        for batch in batches:
            for ctx in contexts:
                if 2 * batch * n_kv * ctx * HEAD_DIM * 2 > MAX_KV_BYTES:
                    continue
                for name, backend in BACKENDS:
                    r = run(kind, n_kv, batch, ctx, name, backend, roof)
                    rows.append(r)
                    torch.cuda.empty_cache()
                    if "error" in r:
                        print(f"{kind:<6} {name:<6} batch {batch:>3} ctx {ctx:>5}: refused: {r['error']}")
                    else:
                        print(f"{kind:<6} {name:<6} batch {batch:>3} ctx {ctx:>5}: {r['time_s'] * 1e6:9.1f} us "
                              f"{r['gb_per_s']:8.1f} GB/s {100 * r['roof_fraction']:5.1f}% of roof ({r['mode']})")

    print(f"\n{'kind':<6} {'kv':<4} {'backend':<7} {'mode':<8} {'batch':>5} {'ctx':>6} {'KV MB':>9} {'time us':>10} "
          f"{'floor us':>10} {'GB/s':>9} {'% roof':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['kind']:<6} {'bf16':<4} {r['backend']:<7} {'-':<8} {r['batch']:>5} {r['context']:>6} "
                  f"{'refused':>9}")
            continue
        print(f"{r['kind']:<6} {r['kv_dtype']:<4} {r['backend']:<7} {r['mode']:<8} {r['batch']:>5} {r['context']:>6} "
              f"{r['kv_bytes'] * 1e-6:>9.1f} {r['time_s'] * 1e6:>10.1f} {r['floor_s'] * 1e6:>10.1f} "
              f"{r['gb_per_s']:>9.1f} {100 * r['roof_fraction']:>6.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "read_roof_bytes_per_s": roof, "rows": rows}, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
