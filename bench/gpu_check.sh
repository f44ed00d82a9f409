#!/usr/bin/env bash
# The GPU checks of the profiler, prepared for a session that is lent the NVIDIA
# device (none has been yet: this script has not run on a GPU). Run it through
# the device tool from the repository root, carrying .gpu:
#
#   here, once:  echo /.gpu/ >> .git/info/exclude; mkdir -p .gpu
#                cp ../shared/gpu/llama_cpp_cuda_sm90.tar.xz .gpu/
#                python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#                  --implementation cp --platform manylinux_2_17_x86_64 --platform any \
#                  -d .gpu gguf platformdirs tqdm diskcache typing_extensions
#   device:      run(command="bash bench/gpu_check.sh", carry=[".gpu"], timeout_s=420)
#
# It writes under $OUT: the fast profile as JSON (GPU part included), the plan-vs-layers
# table of bench/gpu_plan_check.py and a log.
set -euo pipefail
out="${OUT:-/tmp/gpu-check}"
mkdir -p "$out" /tmp/gpu /tmp/site
exec > >(tee "$out/log.txt") 2>&1

tar -xJf .gpu/llama_cpp_cuda_sm90.tar.xz -C /tmp/gpu
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/*.whl
cuda_libs=$(python3 - <<'PY'
import glob, os, nvidia
for root in nvidia.__path__:
    for lib in glob.glob(os.path.join(root, "**", "libcublas.so*"), recursive=True):
        print(os.path.dirname(lib)); raise SystemExit
PY
)
export LD_LIBRARY_PATH="$cuda_libs:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="/tmp/gpu:/tmp/site:$PWD"
export SHARDCHAT_HOME=/tmp/shardchat-home PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
python3 -c "import llama_cpp; print('gpu offload:', llama_cpp.llama_supports_gpu_offload())"
python3 -m app.cli profile --fast
python3 -m app.cli profile --show --json > "$out/profile-h200-fast.json"
echo "profile written to $out/profile-h200-fast.json"
# our plan vs the best whole-layer n_gpu_layers on a shape-true MoE (Qwen3-30B-A3B shapes)
python3 bench/gpu_plan_check.py --budgets 2,4,8 | tee "$out/plan-check.txt"
