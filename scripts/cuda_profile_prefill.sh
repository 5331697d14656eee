#!/usr/bin/env bash
# Runs on the device machine after scripts/cuda_device_run.sh has unpacked .devbin (or unpacks
# it): Nsight Compute on one launch of a prefill attention variant (MHA, 8K context, the bench's
# 16K-token batch), and the variant kernel's SASS. Output under $OUT.
#   VARIANT=wgmma SKIP=26 bash scripts/cuda_profile_prefill.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/ls
[ -x /tmp/ls/bin/bench_cuda_prefill_attention ] || tar -C /tmp/ls -xJf .devbin/payload.tar.xz
export LD_LIBRARY_PATH=/tmp/ls/lib:$(dirname "$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")
NCU=$(command -v ncu || find / -name ncu -type f -path '*nsight-compute*' 2>/dev/null | head -1)
VARIANT=${VARIANT:-wgmma}
# --quick: shapes MHA 1K, MHA 8K, GQA-8 1K, GQA-8 8K, each 3 warm-up + 20 timed launches
timeout ${NCU_TIMEOUT:-200} $NCU --clock-control none -k "regex:${KERNEL:-prefill}" --launch-skip ${SKIP:-26} --launch-count 1 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
  /tmp/ls/bin/bench_cuda_prefill_attention --variant "$VARIANT" --quick --reps 20 > "$OUT/ncu_prefill_$VARIANT.txt" 2>&1
grep -E "Duration|SM Frequency|L2 Cache Throughput|DRAM Throughput|L2 Hit|Warp Cycles Per Issued" "$OUT/ncu_prefill_$VARIANT.txt" | head -20
grep -E "stalled|pipe_" "$OUT/ncu_prefill_$VARIANT.txt" | awk '$NF+0 > 0.05' | sort -k3 -g -r | head -60
if command -v cuobjdump > /dev/null; then
  cuobjdump --dump-sass /tmp/ls/bin/bench_cuda_prefill_attention 2>/dev/null |
    awk -v pat="${SASS_KERNEL:-paged_prefill_wgmma_kernel}" '/Function :/ {keep = index($0, pat) > 0} keep' > "$OUT/sass_$VARIANT.txt"
  echo "SASS lines: $(wc -l < "$OUT/sass_$VARIANT.txt"), HGMMA: $(grep -c HGMMA "$OUT/sass_$VARIANT.txt"), WARPGROUP: $(grep -c WARPGROUP "$OUT/sass_$VARIANT.txt")"
fi
