#!/usr/bin/env python3
"""Per-kernel breakdown of one decode step from an Nsight Compute CSV.

Usage: ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
           --log-file step.csv latentserve bench decode --device cuda ... --steps 1 --warmup 1
       python3 tools/ncu_step_breakdown.py step.csv
The step is everything from the last embedding_kernel launch on (a step starts with the token
embedding). ncu serialises kernels, so the sum is the GPU time with no overlap between kernels;
a graph replay overlaps launches, so the replayed step is shorter than the sum by the gaps.
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"\(.*", "", name)              # drop the argument list
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"latentserve::cuda::(\(anonymous namespace\)::)?", "", name)
    return name[:70]


def main(path):
    rows = []
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
        rows.append((r["Kernel Name"], value * scale))
    starts = [i for i, (n, _) in enumerate(rows) if "embedding_kernel" in n]
    if not starts:
        sys.exit("no embedding_kernel launch found: not a decode step profile")
    step = rows[starts[-1]:]
    by_name = defaultdict(lambda: [0, 0.0])
    for n, us in step:
        by_name[short(n)][0] += 1
        by_name[short(n)][1] += us
    total = sum(us for _, us in step)
    print(f"{len(step)} kernels in the last step, {total / 1e3:.3f} ms of kernel time (serialised)")
    print(f"{'kernel':<70} {'count':>6} {'total us':>10} {'mean us':>9} {'share':>6}")
    for n, (c, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:<70} {c:>6} {us:>10.1f} {us / c:>9.2f} {100 * us / total:>5.1f}%")


if __name__ == "__main__":
    main(sys.argv[1])
