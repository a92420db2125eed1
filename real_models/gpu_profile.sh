#!/usr/bin/env bash
# Retired: a thin wrapper of real_models/gpu_run.sh, the one prepared GPU run (the float32
# validation, a bfloat16 probe and both Qwen3 latency profiles; docs/real_models.md,
# "Running on a GPU"). Kept so that the old command still does the right thing.
#
#   bash real_models/gpu_profile.sh [OUTDIR]        (default OUTDIR: $OUT, else ./gpu_results)
#
# Without a CUDA GPU (or without torch) it says so and exits 0. Worst case 495 s: a GPU check
# limited to 15 s (+5 s grace), then gpu_run.sh (475 s).
set -u
OUTDIR="${1:-${OUT:-gpu_results}}"
if [ $# -gt 1 ]; then
    echo "gpu_profile: extra arguments are no longer taken; run bash real_models/gpu_run.sh" \
        "OUTDIR, or python -m real_models.profile directly" >&2
    exit 2
fi
# the interpreter gpu_run.sh would choose (the checkout's .venv or python3; PYTHON= wins)
PY="${PYTHON:-$(bash "$(dirname "$0")/gpu_run.sh" --plan 2>/dev/null \
    | sed -n 's/^python: \([^ ]*\) .*$/\1/p')}"
PY="${PY:-python3}"
if ! timeout -k 5 15 "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" \
        2>/dev/null; then
    echo "gpu_profile: no CUDA GPU visible to $PY (or torch missing); nothing to do"
    exit 0
fi
echo "gpu_profile.sh is retired: running real_models/gpu_run.sh $OUTDIR"
exec bash "$(dirname "$0")/gpu_run.sh" "$OUTDIR"
