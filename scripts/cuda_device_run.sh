#!/usr/bin/env bash
# Runs on the device machine (the `device` tool, with carry: [".devbin"]), from the repo
# root: unpacks what scripts/cuda_pack_for_device.sh built, then in one call
#   1. the GPU tests (every kernel against its reference, the model against transformers
#      and the CPU path),
#   2. the kernel benchmarks next to PyTorch's SDPA on the same shapes,
#   3. `latentserve bench decode --device cuda` on the Llama-3-8B shape,
# and prints a short summary last. Logs go to $OUT. STAGES (default "test kernels peers e2e";
# also "gemm": the GEMM table alone, "cli", "ncu", "ncu_kernel" (one kernel's sections), "serve": bench serve against serve --device cuda)
# picks a subset; QUICK=1 runs the reduced benchmark sets; BENCH_ARGS go to every kernel bench, E2E_ARGS to bench decode
# (e.g. "--variants fused,streamk" with BENCHES=bench_cuda_decode_attention).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/ls && tar -C /tmp/ls -xJf .devbin/payload.tar.xz
CUBLAS_DIR=$(dirname "$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=/tmp/ls/lib:${CUBLAS_DIR}:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
BIN=/tmp/ls/bin
# The binaries were built in /work/main: its fixture path is compiled in.
if [ ! -e /work/main/tests/fixtures ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
STAGES=${STAGES:-"test kernels peers e2e"}
QUICK_FLAG=""; [ "${QUICK:-0}" = 1 ] && QUICK_FLAG="--quick"
summary=()
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv,noheader
ldd $BIN/test_cuda | grep "not found" && echo "missing libraries (above)"

has() { [[ " $STAGES " == *" $1 "* ]]; }
if has test; then
  # --gtest_brief=1: only failures (with their messages) and the [ info ] / [ note ] lines.
  timeout ${TEST_TIMEOUT:-300} $BIN/test_cuda ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} --gtest_brief=1 > /tmp/test_cuda.log 2>&1
  grep -v "^\[ note \]" /tmp/test_cuda.log | head -200
  cp /tmp/test_cuda.log "$OUT/test_cuda.log"
  summary+=("tests: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|^\[  SKIPPED \] [0-9]+' /tmp/test_cuda.log | tr '\n' ' ')")
fi
if has kernels; then  # BENCH_ARGS="--block-size 16 | --block-size 64": one run of each bench per '|'-separated set
  IFS='|' read -ra bench_arg_sets <<< "${BENCH_ARGS:- }"
  for b in ${BENCHES:-$(ls $BIN | grep "^bench_cuda_")}; do
    for i in "${!bench_arg_sets[@]}"; do
      suffix=""
      if [ ${#bench_arg_sets[@]} -gt 1 ]; then suffix=".$i"; echo "== $b ${bench_arg_sets[$i]} =="; fi
      timeout ${BENCH_TIMEOUT:-150} $BIN/$b $QUICK_FLAG ${bench_arg_sets[$i]} --json "$OUT/$b$suffix.json" 2>&1 | tail -${BENCH_TAIL:-60}
    done
  done
fi
if has gemm; then  # the GEMM table alone: cuBLASLt and every gemv configuration, alone and back to back
  timeout ${BENCH_TIMEOUT:-150} $BIN/bench_cuda_kernels --only gemm $QUICK_FLAG --json "$OUT/gemm.json" 2>&1 | grep -E "${GEMM_GREP:-.}" | tail -${BENCH_TAIL:-200}
fi
if has peers; then
  for p in sdpa_decode_peer sdpa_prefill_peer; do
    timeout ${BENCH_TIMEOUT:-150} python3 tools/$p.py $QUICK_FLAG --json "$OUT/$p.json" 2>&1 | tail -${BENCH_TAIL:-60}
  done
fi
if has e2e; then  # E2E_ENVS="default LATENTSERVE_CUDA_L2_PREFETCH_MB=32": one run per environment setting (A/B in one session);
  # E2E_ARGS="--block-size 16 | --block-size 64": one run per '|'-separated argument set, for each setting
  IFS='|' read -ra e2e_arg_sets <<< "${E2E_ARGS:- }"
  for setting in ${E2E_ENVS:-default}; do
    for i in "${!e2e_arg_sets[@]}"; do
      echo "== bench decode, environment: $setting, arguments: ${e2e_arg_sets[$i]} =="
      tag=$(echo "$setting" | tr -c 'A-Za-z0-9\n' '_'); [ ${#e2e_arg_sets[@]} -gt 1 ] && tag="$tag.$i"
      ( [ "$setting" = default ] || export "$setting"
        timeout ${E2E_TIMEOUT:-300} $BIN/latentserve bench decode --device cuda --synthetic llama3-8b --attention ${E2E_ATTENTION:-gqa8,mha} \
          --batch ${E2E_BATCH:-1,8,32,64} --context ${E2E_CONTEXT:-1024,8192,32768} --steps ${E2E_STEPS:-10} --warmup 3 \
          ${e2e_arg_sets[$i]} --json "$OUT/bench_decode_cuda_$tag.json" 2>&1 | tail -60 )
    done
  done
fi
if has cli; then  # the CLI on the GPU: generate (vs the CPU), batch with a device-sized KV cache
  M=tests/fixtures/llama_gqa_bf16
  echo "generate cpu : $($BIN/latentserve generate --model $M --tokens 1,15,27,8,42 --max-tokens 12)"
  echo "generate cuda: $($BIN/latentserve generate --model $M --tokens 1,15,27,8,42 --max-tokens 12 --device cuda)"
  printf '%s\n' '{"id":"a","tokens":[1,5,9,13],"max_tokens":8,"temperature":0}' \
    '{"id":"b","tokens":[1,7,7,7,2],"max_tokens":8,"temperature":0.8,"seed":3,"n":2}' > /tmp/req.jsonl
  $BIN/latentserve batch --model $M --device cuda --input /tmp/req.jsonl --output /tmp/res.jsonl 2>&1 | tail -4
  cat /tmp/res.jsonl
fi
if has serve; then  # the HTTP server on the GPU under load: latentserve bench serve against latentserve serve
  serve_run=0  # each bench run its own prompts (--seed): no prefix-cache hits from an earlier run
  $BIN/latentserve serve --device cuda --synthetic ${SERVE_MODEL:-llama3-8b} --port 8123 --max-num-seqs ${SERVE_MAX_SEQS:-64} \
    --max-batched-tokens ${SERVE_BATCHED_TOKENS:-2048} > /tmp/serve.log 2>&1 &
  serve_pid=$!
  for i in $(seq 1 240); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8123/health')" 2> /dev/null && break; sleep 0.5; done
  for t in ${SERVE_TEMPERATURES:-0}; do  # e.g. "0 1": greedy, then sampled (temperature 1, top_p 0.9)
    top_p=1; [ "$t" = 0 ] || top_p=0.9
    serve_run=$((serve_run + 1))  # here, not inside the pipeline below (a subshell would lose it)
    timeout ${SERVE_TIMEOUT:-300} $BIN/latentserve bench serve --url http://127.0.0.1:8123 --concurrency ${SERVE_CONCURRENCY:-1,8,32,64} \
      --prompt-tokens ${SERVE_PROMPT:-1024} --max-tokens ${SERVE_OUTPUT:-256} --vocab 32000 --temperature $t --top-p $top_p \
      --seed $serve_run \
      --json "$OUT/bench_serve_t$t.json" 2>&1 | tail -12
  done
  kill -TERM $serve_pid; wait $serve_pid; echo "serve exit code: $?"; grep -i "fail" /tmp/serve.log | head -5; tail -12 /tmp/serve.log
fi
if has ncu; then  # per-kernel GPU time of one decode step (tools/ncu_step_breakdown.py)
  NCU=$(command -v ncu || find / -name ncu -type f -path '*nsight-compute*' 2>/dev/null | head -1)
  timeout ${NCU_TIMEOUT:-240} $NCU --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
    --log-file /tmp/ncu.csv $BIN/latentserve bench decode --device cuda --synthetic llama3-8b --attention ${NCU_ATTENTION:-gqa8} \
    --batch ${NCU_BATCH:-1} --context ${NCU_CONTEXT:-1024} --steps 1 --warmup 1 --json /tmp/ncu_bench.json > /tmp/ncu_run.log 2>&1
  tail -3 /tmp/ncu_run.log
  python3 tools/ncu_step_breakdown.py /tmp/ncu.csv | tee "$OUT/ncu_step.txt"
fi
if has ncu_kernel; then  # one kernel's Nsight Compute sections (issue, stalls, pipes) under a kernel bench
  # NCU_BENCH="bench_cuda_decode_attention --variants fused_fill3 --batch 64 --context 4096",
  # NCU_KERNEL: a regex on the demangled name; NCU_SKIP launches of it are skipped, one profiled
  NCU=$(command -v ncu || find / -name ncu -type f -path '*nsight-compute*' 2>/dev/null | head -1)
  timeout ${NCU_TIMEOUT:-240} $NCU --clock-control none --kernel-name-base demangled --kernel-name "regex:${NCU_KERNEL:-.}" \
    --launch-skip ${NCU_SKIP:-3} --launch-count ${NCU_COUNT:-1} \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section Occupancy --section MemoryWorkloadAnalysis --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$" \
    $BIN/$NCU_BENCH > "$OUT/ncu_kernel${NCU_TAG:-}.txt" 2>&1
  grep -E "split_kernel|Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Executed Ipc A|stalled|L2 Hit|inst_executed_pipe" "$OUT/ncu_kernel${NCU_TAG:-}.txt" | \
    grep -v "^==PROF==" | cut -c1-170 | head -${NCU_LINES:-80}
fi
echo "== summary =="
for line in "${summary[@]}"; do echo "$line"; done
