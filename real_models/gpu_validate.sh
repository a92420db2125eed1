#!/usr/bin/env bash
# Run the real-model validation on a CUDA GPU and write its tables to files.
#
#   bash real_models/gpu_validate.sh [OUTDIR]          (default OUTDIR: $OUT, else ./gpu_results)
#
# Writes OUTDIR/validate_cuda.md (report + tables), OUTDIR/validate_cuda.json and
# OUTDIR/validate_cuda.log. Harmless without a GPU: it says so and exits 0. Each step has its
# own time limit, so the whole script ends within 8 minutes. Extra arguments after OUTDIR go to
# `python -m real_models.validate` (for example --target DIR --drafter DIR --dtype bfloat16).
set -u
cd "$(dirname "$0")/.."
OUTDIR="${1:-${OUT:-gpu_results}}"
shift || true
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR"
if ! timeout 60 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"; then
    echo "gpu_validate: no CUDA GPU visible to $PY (or torch missing); nothing to do" \
        | tee "$OUTDIR/validate_cuda.log"
    exit 0
fi
timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv \
    >"$OUTDIR/gpu.txt" 2>&1 || true
# Default preset (8 prompts x 96 tokens, budgets 16/64/256, T = 1 table): ~1-3 min on a GPU.
timeout 420 "$PY" -m real_models.validate --device cuda --out "$OUTDIR/validate_cuda.md" \
    --json "$OUTDIR/validate_cuda.json" "$@" 2>&1 | tee "$OUTDIR/validate_cuda.log"
status=${PIPESTATUS[0]}
echo "gpu_validate: exit status $status (124 = time limit)" | tee -a "$OUTDIR/validate_cuda.log"
exit "$status"
