#!/usr/bin/env bash
# Profile randomly initialised Qwen3-4B and Qwen3-8B targets (with DFlash drafters of the
# published z-lab/Qwen3-{4B,8B}-DFlash-b16 shapes) on a CUDA GPU; no checkpoint is downloaded.
#
#   bash real_models/gpu_profile.sh [OUTDIR]        (default OUTDIR: $OUT, else ./gpu_results)
#
# Writes OUTDIR/<gpu>_qwen3_{4b,8b}_random.json (treespec-latency/1 files: load them with
# treespec_sim.cost.get_cost_model(path)), a cost-vs-tokens figure for each, the logs and
# gpu.txt. Each profile has a 150 s measurement budget (--time-budget) inside a 200 s hard limit,
# so the script ends within 8 minutes (about 3-4 minutes expected on an H200: ~10 s to build
# each model on the GPU, 17 token counts x 4 contexts x 12 forwards). Harmless without a GPU.
set -u
cd "$(dirname "$0")/.."
OUTDIR="${1:-${OUT:-gpu_results}}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR"
if ! timeout 60 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"; then
    echo "gpu_profile: no CUDA GPU visible to $PY (or torch missing); nothing to do" \
        | tee "$OUTDIR/profile_cuda.log"
    exit 0
fi
timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
    >"$OUTDIR/gpu.txt" 2>&1 || true
GPU="$(timeout 60 "$PY" -c "import torch; print(torch.cuda.get_device_name(0).split()[-1].lower())" 2>/dev/null || echo gpu)"
status=0
for ARCH in qwen3-8b qwen3-4b; do
    tag="${GPU}_${ARCH//-/_}_random"
    timeout 200 "$PY" -m real_models.profile --arch "$ARCH" --device cuda --dtype bfloat16 \
        --warmup 3 --repeats 9 --time-budget 150 --name "${GPU}-${ARCH}-random" \
        --out "$OUTDIR/$tag.json" --figure "$OUTDIR/$tag.png" 2>&1 | tee "$OUTDIR/$tag.log"
    s=${PIPESTATUS[0]}
    echo "gpu_profile: $ARCH exit status $s (124 = time limit)" | tee -a "$OUTDIR/$tag.log"
    [ "$s" -ne 0 ] && status=$s
done
exit "$status"
