#!/usr/bin/env bash
# The pipelined executor's GPU checks (issue 46) in one run of at most 8 minutes, on a
# lent NVIDIA machine; with no NVIDIA GPU here it runs the same steps end to end on the
# CPU and lavapipe (small models), so it is not untested when a device comes.
#
#   here, once per build:  make gpu-bundle      (the CUDA module for sm_90, ~20 min on
#                                               2 cores; then .gpu/ is packed, < 64 MiB)
#   here, to try it:       bash bench/gpu_check.sh
#   device:                run(command="bash bench/gpu_check.sh", carry=[".gpu"], timeout_s=540)
#
# On the device it unpacks .gpu/ (llama_cpp with the CUDA module, wheels) under /tmp,
# writes the shape-true models there, profiles the GPU (fast), then prints and writes
# under $OUT: our plan against llama.cpp's -ngl, --n-cpu-moe and --fit at 2, 4 and 8 GiB
# with the executor on and off and the plan's VRAM beside CUDA0's buffer lines
# (bench/gpu_plan_check.py), and prompt tokens/s at 512, 2,048 and 8,192 tokens with the
# executor on against off beside the cost model's prediction (bench/streamed_prefill.py).
set -euo pipefail
out="${OUT:-/tmp/gpu-check}"
models=/tmp/shardchat-gpu-models
mkdir -p "$out" "$models"
exec > >(tee "$out/log.txt") 2>&1
started=$SECONDS
# the wheels are the device's (Python 3.12), also where this Python is another
wheels_for="--python-version 3.12 --implementation cp --only-binary=:all:"

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  test -f .gpu/llama_cpp.tar.xz || { echo "gpu_check: no .gpu/ bundle: make gpu-bundle here first"; exit 2; }
  rm -rf /tmp/gpu /tmp/site && mkdir -p /tmp/gpu /tmp/site
  tar -xJf .gpu/llama_cpp.tar.xz -C /tmp/gpu
  python3 -m pip install -q --no-index --no-deps --no-compile $wheels_for --target /tmp/site .gpu/*.whl
  cuda_libs=$(python3 - <<'PY'
import glob, os
import nvidia
for root in nvidia.__path__:
    for lib in glob.glob(os.path.join(root, "**", "libcublas.so*"), recursive=True):
        print(os.path.dirname(lib)); raise SystemExit
PY
)
  export LD_LIBRARY_PATH="$cuda_libs:${LD_LIBRARY_PATH:-}"
  export PYTHONPATH="/tmp/gpu:/tmp/site:$PWD"
  py=python3
  nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
  spec=30b quant=Q4_0 budgets=2048,4096,8192 prompt=1024 sizes="512 2048 8192" streamed_mib=4096
  profile="$out/profile.json"
else
  echo "gpu_check: no NVIDIA GPU here: the same steps on the CPU and lavapipe, small models"
  export GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1
  export PYTHONPATH="$PWD"
  py=.venv/bin/python
  spec=small quant=Q8_0 budgets=40 prompt=128 sizes="256" streamed_mib=40
  profile=tests/data/profile-lavapipe-fast.json  # profiling lavapipe takes too long here
  if test -f .gpu/llama_cpp.tar.xz; then  # the bundle's package and wheels import
    rm -rf /tmp/gpu-bundle && mkdir -p /tmp/gpu-bundle/lib /tmp/gpu-bundle/site
    tar -xJf .gpu/llama_cpp.tar.xz -C /tmp/gpu-bundle/lib
    $py -m pip install -q --no-index --no-deps --no-compile $wheels_for --target /tmp/gpu-bundle/site .gpu/*.whl
    PYTHONPATH="/tmp/gpu-bundle/lib:/tmp/gpu-bundle/site:$PWD" $py -c \
      "import llama_cpp, gguf, engine.planning.planner; print('bundle imports:', llama_cpp.__file__)"
  fi
fi
export SHARDCHAT_HOME=/tmp/shardchat-gpu-home PYTHONUNBUFFERED=1
$py -c "import llama_cpp; print('llama.cpp', llama_cpp.__version__, 'gpu offload:', llama_cpp.llama_supports_gpu_offload())"

if test "$spec" = 30b; then  # profile once: both benches plan with it
  $py -c "
from engine.machine.hardware import probe_hardware
from engine.machine.profile import ProfileMode
from engine.profiling.profiler import Profiler
open('$profile', 'w').write(Profiler(ProfileMode.FAST, hardware=probe_hardware()).run().to_json())"
  echo "profile written to $profile ($((SECONDS - started)) s in)"
fi
$py bench/gpu_plan_check.py --spec "$spec" --budgets-mib "$budgets" --prompt "$prompt" \
  --profile "$profile" --folder "$models" | tee "$out/plan-check.txt"
echo "plan check done ($((SECONDS - started)) s in)"
# shellcheck disable=SC2086  # the sizes are separate arguments
$py bench/streamed_prefill.py --model "$models/$spec-shapes-$quant.gguf" \
  --vram-mib "$streamed_mib" --sizes $sizes --profile "$profile" | tee "$out/streamed-prefill.txt"
echo "gpu_check: done in $((SECONDS - started)) s; tables under $out"
