#!/usr/bin/env bash
# The GPU checks of the CUDA backend (issue 25) as one script that fits 8 minutes on the lent H200.
#
#   scripts/device-check.sh --prepare   here, without a GPU: builds the CUDA binaries for any x86-64
#                                       CPU into device-bundle/ (bin/ and the libraries a GPU image may
#                                       lack), packed as device-bundle.tar.xz (the device tool carries
#                                       64 MiB at most), for `run` to carry: the GPU image lacks our
#                                       build's libraries (OpenBLAS, MPI, yaml-cpp, ...)
#   scripts/device-check.sh OUT         on the GPU machine: uses the carried bundle (or builds with all
#                                       cores), then the CUDA op cases, compute-sanitizer on them, a
#                                       50-step GPT on CUDA against CPU (fp32 and bf16), the benchmark
#                                       against PyTorch; every figure goes to OUT/results.txt, the logs
#                                       into OUT/logs.tar.gz. Every stage's timeout is cut to fit the
#                                       whole run into DEVICE_CHECK_BUDGET seconds (default 540);
#                                       DEVICE_CHECK_STAGES picks stages (default: all of "ops memcheck
#                                       curves resume bench profile pytorch")
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="$PATH:/usr/local/cuda/bin"; fi

if [[ "${1:-}" == "--prepare" ]]; then
  set -e
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DMT_CUDA=on -DMT_NATIVE=OFF -DMT_BUILD_BENCH=OFF > /dev/null
  cmake --build build-device -j "$(nproc)" --target megatron mt_tests_device
  rm -rf device-bundle && mkdir -p device-bundle/bin device-bundle/lib
  cp build-device/megatron build-device/tests/mt_tests_device device-bundle/bin/
  # Every shared library but the toolchain's (a GPU image has newer, compatible ones) and CUDA's
  # (the GPU machine has its own, matched to its driver).
  ldd device-bundle/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas[^/]*|libnccl)\.so' |
    xargs -I{} cp -L {} device-bundle/lib/
  strip --strip-debug device-bundle/bin/*
  tar cJf device-bundle.tar.xz device-bundle
  du -sh device-bundle device-bundle.tar.xz
  echo "carry device-bundle.tar.xz with: run --carry device-bundle.tar.xz 'scripts/device-check.sh \$OUT'"
  exit 0
fi

out="${1:?usage: scripts/device-check.sh OUT_DIR | --prepare}"
mkdir -p "$out"
results="$out/results.txt"
: > "$results"
say() { echo "$*" | tee -a "$results"; }
started=$(date +%s)
deadline=$((started + ${DEVICE_CHECK_BUDGET:-540}))
# A stage's timeout: its own limit, or what is left of the budget when that is less.
limit() { local left=$((deadline - $(date +%s) - 5)); ((left < 1)) && left=1; echo $(($1 < left ? $1 : left)); }
# The device tool brings back few files: the logs travel as one archive, whatever stops the script.
pack_logs() { (cd "$out" && tar czf logs.tar.gz --exclude results.txt --exclude logs.tar.gz . 2>/dev/null &&
               find . -maxdepth 1 -type f ! -name results.txt ! -name logs.tar.gz -delete); }
trap pack_logs EXIT
stages=" ${DEVICE_CHECK_STAGES:-ops memcheck curves resume bench profile pytorch} "
want() { [[ "$stages" == *" $1 "* ]]; }
say "device-check $(git rev-parse --short HEAD 2>/dev/null) at $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$results"
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"

# 1. Binaries: the carried bundle (whose libraries only our binaries see: run_bin, not the environment,
# so python keeps its own), else built here with every core when the libraries are present.
[[ -f device-bundle.tar.xz && ! -d device-bundle ]] && { tar xJf device-bundle.tar.xz ||
  python3 -c "import tarfile; tarfile.open('device-bundle.tar.xz').extractall()"; }
bin=""
libs=""
run_bin() { LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
if [[ ! -x device-bundle/bin/megatron ]] &&
   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DMT_CUDA=on -DMT_BUILD_BENCH=OFF > "$out/configure.log" 2>&1 &&
   cmake --build build-gpu -j "$(nproc)" --target megatron mt_tests_device > "$out/build.log" 2>&1; then
  bin="build-gpu"
  say "build: built here in $(( $(date +%s) - started )) s"
elif [[ -x device-bundle/bin/megatron ]]; then
  bin="device-bundle/bin"
  libs="$root/device-bundle/lib"
  for name in libnccl.so.2 libcublasLt.so.13 libcudart.so.13; do
    found=$(find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib -name "$name" 2>/dev/null | head -n 1)
    [[ -n "$found" ]] && libs="$libs:$(dirname "$found")"
  done
  say "build: using the carried bundle (built by --prepare)"
else
  say "build: FAILED and no device-bundle carried (run scripts/device-check.sh --prepare first)"
  exit 1
fi
megatron="$bin/megatron"
device_tests="$bin/mt_tests_device"
[[ -x "$device_tests" ]] || device_tests="$bin/tests/mt_tests_device"

# 2. The CUDA op cases, then compute-sanitizer's memcheck over them.
if want ops; then
  run_bin timeout "$(limit 120)" "$device_tests" > "$out/device_tests.log" 2>&1
  say "cuda op cases: exit $?; $(head -n 1 "$out/device_tests.log"); $(grep -E '^\[  (PASSED|FAILED) ' "$out/device_tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED' "$out/device_tests.log" | head -n 20 | tee -a "$results"
fi
if want memcheck && command -v compute-sanitizer >/dev/null 2>&1; then
  run_bin timeout "$(limit 90)" compute-sanitizer --tool memcheck --error-exitcode 9 "$device_tests" --gtest_filter="DeviceElementwise*:DeviceLinear*:DeviceActivation*:DeviceNorm*:DeviceAttention*" > "$out/memcheck.log" 2>&1
  say "compute-sanitizer memcheck: exit $? ($(grep -c 'Invalid' "$out/memcheck.log") invalid accesses; 124 = ran out of time)"
fi

# 3. The same 50 steps on CUDA and on CPU: the loss curves must agree (fp32 1e-4, bf16 1e-2 relative).
small=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --micro-batch-size 4
       --global-batch-size 8 --mock-data --vocab-size 1024 --lr 1e-3 --log-interval 1 --seed 1234)
losses() { grep -o 'lm loss: [0-9.E+-]*' "$1" | awk '{print $3}'; }
for precision in fp32 bf16; do
  want curves || break
  extra=(); tolerance=1e-4
  [[ $precision == bf16 ]] && extra=(--bf16) && tolerance=1e-2
  run_bin timeout "$(limit 60)" "$megatron" train "${small[@]}" --train-iters 50 "${extra[@]}" --device cuda > "$out/curve_${precision}_cuda.log" 2>&1
  OMP_NUM_THREADS=$(nproc) run_bin timeout "$(limit 90)" "$megatron" train "${small[@]}" --train-iters 50 "${extra[@]}" --device cpu > "$out/curve_${precision}_cpu.log" 2>&1
  worst=$(paste <(losses "$out/curve_${precision}_cuda.log") <(losses "$out/curve_${precision}_cpu.log") |
    awk 'NF == 2 { d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > w) w = r; n++ }
         END { printf "%d steps, max relative difference %.3g", n, w }')
  verdict=$(awk -v w="${worst##* }" -v l="$tolerance" -v n="${worst%% *}" 'BEGIN { print (n == 50 && w <= l) ? "PASS" : "FAIL" }')
  say "curve $precision cuda vs cpu: $worst (limit $tolerance): $verdict"
done

# 4. Resume and generate on CUDA: 10 steps, a checkpoint, 10 more from it must repeat the straight
# 20-step run's losses bit for bit; greedy generation from that checkpoint must give the CPU's tokens.
if want resume; then
  ck="$out/ckpt"
  resume=("${small[@]}" --train-iters 20 --device cuda)
  run_bin timeout "$(limit 60)" "$megatron" train "${resume[@]}" > "$out/resume_straight.log" 2>&1
  run_bin timeout "$(limit 60)" "$megatron" train "${resume[@]}" --exit-interval 10 --save "$ck" --save-interval 10 > "$out/resume_first.log" 2>&1
  run_bin timeout "$(limit 60)" "$megatron" train "${resume[@]}" --load "$ck" > "$out/resume_second.log" 2>&1
  same=$([[ $(losses "$out/resume_second.log" | wc -l) == 10 ]] &&
         cmp -s <(losses "$out/resume_straight.log" | tail -n 10) <(losses "$out/resume_second.log") && echo PASS || echo FAIL)
  say "resume on cuda: steps 11-20 after a checkpoint at 10 equal the straight run's bit for bit: $same ($(losses "$out/resume_second.log" | wc -l) steps resumed)"
  prompt=(generate --load "$ck" --prompts "1 2 3 4 5 6 7 8" "9 10 11" --num-tokens-to-generate 24 --top_k 1)
  run_bin timeout "$(limit 60)" "$megatron" "${prompt[@]}" --device cuda --output-path "$out/generate_cuda.jsonl" > "$out/generate_cuda.log" 2>&1
  OMP_NUM_THREADS=$(nproc) run_bin timeout "$(limit 60)" "$megatron" "${prompt[@]}" --device cpu --output-path "$out/generate_cpu.jsonl" > "$out/generate_cpu.log" 2>&1
  tokens() { grep -o '"generated_tokens":\[[0-9,]*\]' "$1" 2>/dev/null; }
  same=$([[ -n "$(tokens "$out/generate_cuda.jsonl")" ]] && cmp -s <(tokens "$out/generate_cuda.jsonl") <(tokens "$out/generate_cpu.jsonl") && echo PASS || echo FAIL)
  say "generate on cuda: greedy tokens of 2 prompts equal the CPU's: $same; $(grep "tokens/s" "$out/generate_cuda.log" | tail -n 1)"
  rm -rf "$ck"
fi

# 5. The benchmark: GPT 350M and 1.3B, bf16, seq 2048, one GPU; PyTorch eager and compiled beside.
bench() {  # name layers hidden heads micro_batch
  want bench || return 0
  local log="$out/bench_$1.log"
  run_bin timeout "$(limit 90)" "$megatron" train --num-layers "$2" --hidden-size "$3" --num-attention-heads "$4" --seq-length 2048 \
    --micro-batch-size "$5" --mock-data --vocab-size 50257 --train-iters 8 --eval-iters 0 --lr 1e-4 --log-interval 1 --bf16 \
    --hidden-dropout 0 --attention-dropout 0 --device cuda > "$log" 2>&1
  local rc=$?
  local tflops tps
  tflops=$(grep -o 'TFLOP/s/GPU): [0-9.]*' "$log" | tail -n 5 | awk '{print $2}' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  tps=$(grep -o 'tokens per second: [0-9.]*' "$log" | tail -n 5 | awk '{print $4}' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  say "megatron.cpp $1: exit $rc, median of the last 5 steps: ${tflops:-?} TFLOP/s, MFU $(awk -v t="${tflops:-0}" 'BEGIN {printf "%.1f", t / 989 * 100}')% of 989, ${tps:-?} tokens/s"
  if want pytorch && command -v python3 >/dev/null 2>&1; then
    PYTHONUNBUFFERED=1 timeout "$(limit 120)" python3 bench/pytorch_cuda_baseline.py "$2" "$3" "$4" 2048 "$5" 50257 > "$out/pytorch_$1.log" 2>&1
    grep -E '^(cuBLAS|pytorch) ' "$out/pytorch_$1.log" | sed "s/^/$1 /" | tee -a "$results"
  fi
}
bench gpt-350m 24 1024 16 4
bench gpt-1.3b 24 2048 16 2

# 6. Where GPT 350M's steps go, op by op (--profile-ops: each op waits for the GPU; the first step left out).
if want profile; then
  run_bin timeout "$(limit 60)" "$megatron" train --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 \
    --micro-batch-size 4 --mock-data --vocab-size 50257 --train-iters 4 --eval-iters 0 --lr 1e-4 --log-interval 1 --bf16 \
    --hidden-dropout 0 --attention-dropout 0 --device cuda --profile-ops > "$out/profile_gpt-350m.log" 2>&1
  say "op profile of gpt-350m (exit $?), the ten largest and the rest:"
  sed -n '/^op profile/,$p' "$out/profile_gpt-350m.log" | sed -n '2,12p;/(outside ops)/p' | tee -a "$results"
fi
say "device-check: done in $(( $(date +%s) - started )) s"
