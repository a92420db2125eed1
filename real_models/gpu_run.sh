#!/usr/bin/env bash
# The one prepared command for a GPU run (docs/real_models.md, "Running on a GPU").
#
#   bash real_models/gpu_run.sh OUTDIR              # on the GPU machine
#   bash real_models/gpu_run.sh --rehearse OUTDIR   # the same steps on CPU, small shapes
#   bash real_models/gpu_run.sh --plan [--rehearse] # print the steps, limits and interpreter
#
# The interpreter: PYTHON=... if given, else the first of the repository's .venv/bin/python
# (what `make test` builds) and python3 on PATH (a GPU machine's own environment) that has the
# packages below, and for a GPU run a CUDA (or ROCm) build of torch: a CPU-only .venv does not
# hide a GPU environment. The probe reads no more than where the packages are (~0.1 s each,
# at most 5 s); if neither qualifies, the first that exists runs and env.txt says what is
# missing. No make, no venv creation, no install, no download. It needs torch, transformers,
# safetensors, tokenizers, numpy, scipy and matplotlib; not cvxpy (nor clarabel): --rehearse
# makes both unimportable, as they are on the GPU image. Steps, each under its own limit
# (`timeout`, then SIGKILL KILL_AFTER seconds later), in this order:
#
#   step      limit  what                                               writes (into OUTDIR)
#   env         30s  versions, GPU name, nvidia-smi, blocked imports     env.txt
#   validate   170s  tiny models, float32, --quick preset: all checks    validate.md, .json
#   bf16        70s  tiny models, bfloat16: tree rows + greedy identity  appended to validate.*
#                    with the near-tie rule (the "bfloat16 probe")
#   merge        8s  appends the probe to validate.md / validate.json    (the same two files)
#   qwen3-8b    95s  random-init Qwen3-8B + DFlash drafter latency       TAG_qwen3_8b_random.*
#   qwen3-4b    75s  random-init Qwen3-4B + DFlash drafter latency       TAG_qwen3_4b_random.*
#
# Worst case: the limits (448 s) plus the kill grace (5 x 5 s, and 2 s for the merge) =
# 475 s, under 8 minutes; `--plan` prints this sum and the script refuses to run if it passes
# 480 s. run.log holds every step's output and a summary: at most 8 files in all. TAG is the
# GPU's short name (h200 for "NVIDIA H200"); a latency file is .json (load it with
# treespec_sim.cost.get_cost_model) with a .png figure. In a rehearsal TAG is cpu and the
# profiles are of small_arch shapes (files *_small.*).
# Every step writes its results as it goes (validation after each check, a latency file after
# each context row, through a temporary .NAME.tmp and a rename), so a time limit loses only
# the step it interrupted, and within a profile only the context row being measured.
# Exit status: 0 if every step succeeded, 1 if any failed or hit its limit, 2 on bad
# arguments, 3 if no CUDA GPU is visible (GPU run only; env.txt then says so).
set -u

usage() {
    echo "usage: bash real_models/gpu_run.sh [--rehearse] OUTDIR | --plan [--rehearse]" >&2
    exit 2
}

REHEARSE=0
PLAN=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rehearse) [ "$REHEARSE" -eq 0 ] || usage; REHEARSE=1; shift ;;
        --plan) [ "$PLAN" -eq 0 ] || usage; PLAN=1; shift ;;
        -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
if [ "$PLAN" -eq 1 ]; then
    [ $# -eq 0 ] || usage
else
    [ $# -eq 1 ] || usage
    case "$1" in -*) echo "gpu_run: OUTDIR must not start with '-' (got '$1')" >&2; usage ;; esac
fi

# ---------------------------------------------------------------- limits (seconds)
KILL_AFTER=5
T_ENV=30
T_VALIDATE=170
T_BF16=70
T_MERGE=8
T_MERGE_KILL=2
T_8B=95
T_4B=75
BUDGET=480
WORST=$((T_ENV + T_VALIDATE + T_BF16 + T_8B + T_4B + 5 * KILL_AFTER + T_MERGE + T_MERGE_KILL))

if [ "$WORST" -gt "$BUDGET" ]; then
    echo "gpu_run: the step limits add to ${WORST}s, over the ${BUDGET}s budget" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

# ---------------------------------------------------------------- the interpreter
# probe PY: exit 0 if PY finds every required package (and, for a GPU run, a torch built for a
# GPU), else print what it lacks. It only locates the packages (importlib.util.find_spec, and
# torch/version.py, where a torch build records its CUDA/ROCm versions), so it takes a fraction
# of a second where importing torch would take seconds.
probe() {
    timeout -k 1 5 "$1" - "$REHEARSE" <<'EOF' 2>&1
import importlib.util, re, sys
from pathlib import Path

need = ("torch", "transformers", "safetensors", "tokenizers", "numpy", "scipy", "matplotlib")
missing = [m for m in need if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"lacks {', '.join(missing)}")
if sys.argv[1] != "1":
    version = Path(importlib.util.find_spec("torch").origin).with_name("version.py")
    text = version.read_text() if version.is_file() else ""
    builds = re.findall(r"^(cuda|hip)\b[^=]*=\s*(.+?)\s*$", text, re.M)
    if builds and all(value == "None" for _, value in builds):
        sys.exit("has a CPU-only torch")
EOF
}

# choose_python: sets PY (the interpreter of every step) and PY_WHY (how it was chosen)
choose_python() {
    local cand why first="" notes=""
    if [ -n "${PYTHON:-}" ]; then
        PY=$PYTHON PY_WHY="PYTHON"
        return
    fi
    for cand in "$ROOT/.venv/bin/python" python3; do
        if ! command -v "$cand" >/dev/null 2>&1; then
            notes+="${notes:+; }$cand: not found"
            continue
        fi
        first=${first:-$cand}
        if why="$(probe "$cand")"; then
            PY=$cand PY_WHY="has the packages${notes:+; passed over: $notes}"
            return
        fi
        notes+="${notes:+; }$cand: $(echo "${why:-probe failed}" | tail -n 1)"
    done
    PY=${first:-python3} PY_WHY="none qualifies: $notes; PYTHON=... chooses one"
}
choose_python

plan() {
    printf 'step %-9s limit %4ss\n' env "$T_ENV" validate "$T_VALIDATE" bf16 "$T_BF16" \
        merge "$T_MERGE" qwen3-8b "$T_8B" qwen3-4b "$T_4B"
    echo "kill grace ${KILL_AFTER}s per step (${T_MERGE_KILL}s for merge)"
    echo "worst case ${WORST}s (budget ${BUDGET}s)"
    echo "python: $PY ($PY_WHY)"
}
if [ "$PLAN" -eq 1 ]; then
    plan
    exit 0
fi

mkdir -p "$1" || exit 2
OUTDIR="$(cd "$1" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# nothing may reach for the network (the GPU machine has none): a hub look-up would hang
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ "$REHEARSE" -eq 1 ]; then
    # The GPU image has neither cvxpy nor clarabel: shadow both with packages that fail to
    # import, ahead of everything else on the path.
    for mod in cvxpy clarabel; do
        mkdir -p "$WORK/blocked/$mod"
        printf 'raise ModuleNotFoundError("%s %s", name="%s")\n' "$mod" \
            "is blocked by gpu_run.sh --rehearse (the GPU image has none)" "$mod" \
            >"$WORK/blocked/$mod/__init__.py"
    done
    export PYTHONPATH="$WORK/blocked:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
    DEVICE=cpu
else
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    DEVICE=cuda
fi
cd "$ROOT" || exit 2

LOG="$OUTDIR/run.log"
ENV_TXT="$OUTDIR/env.txt"
rm -f "$LOG" "$ENV_TXT" "$OUTDIR/validate.md" "$OUTDIR/validate.json" \
    "$OUTDIR"/*_qwen3_[48]b_random.json "$OUTDIR"/*_qwen3_[48]b_random.png \
    "$OUTDIR"/*_qwen3_[48]b_small.json "$OUTDIR"/*_qwen3_[48]b_small.png
STATUS=0
SUMMARY=""

say() { echo "$*" | tee -a "$LOG"; }

# run_step NAME LIMIT KILL COMMAND...: COMMAND under `timeout`, its output to the log
run_step() {
    local name=$1 limit=$2 kill=$3 t0=$SECONDS s word
    shift 3
    say "=== $name (limit ${limit}s): $*"
    timeout -k "$kill" "$limit" "$@" 2>&1 | tee -a "$LOG"
    s=${PIPESTATUS[0]}
    case $s in
        0) word="ok" ;;
        124|137) word="TIME LIMIT (exit $s)"; STATUS=1 ;;
        *) word="FAILED (exit $s)"; STATUS=1 ;;
    esac
    rm -f "$OUTDIR"/.*.tmp
    say "=== $name: $word after $((SECONDS - t0))s"
    SUMMARY+="$(printf '%-9s %-22s %4ss of %ss' "$name" "$word" "$((SECONDS - t0))" "$limit")"$'\n'
    return "$s"
}

if [ "$REHEARSE" -eq 1 ]; then
    say "gpu_run: REHEARSAL on CPU (small shapes, cvxpy and clarabel blocked) into $OUTDIR"
else
    say "gpu_run: GPU run into $OUTDIR"
fi
plan | tee -a "$LOG"

# ---------------------------------------------------------------- 1. environment
run_step env "$T_ENV" "$KILL_AFTER" "$PY" - "$ENV_TXT" "$WORK/tag" "$REHEARSE" "$ROOT" <<'EOF'
import datetime, importlib, platform, shutil, subprocess, sys

env_txt, tag_file, rehearse, root = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
lines = [f"date: {datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%M:%SZ}",
         f"mode: {'rehearsal on CPU (small shapes)' if rehearse else 'GPU run'}",
         f"python: {sys.version.split()[0]} ({sys.executable})",
         f"machine: {platform.machine()} {platform.platform()}"]
try:
    rev = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                         text=True, timeout=5).stdout.strip()
except (OSError, subprocess.SubprocessError):
    rev = ""
lines.append(f"git commit: {rev or 'unknown (no git)'}")
missing = []
for mod in ("torch", "transformers", "safetensors", "tokenizers", "numpy", "scipy",
            "matplotlib", "cvxpy", "clarabel"):
    try:
        version = getattr(importlib.import_module(mod), "__version__", "?")
    except Exception as exc:  # noqa: BLE001 - report whatever stops the import
        version = f"not importable ({type(exc).__name__}: {exc})"
        if mod not in ("cvxpy", "clarabel"):
            missing.append(mod)
    lines.append(f"{mod}: {version}")
tag, status = "cpu", 0
try:
    import torch

    cuda = torch.cuda.is_available()
    lines.append(f"torch cuda: {torch.version.cuda}, available: {cuda}, "
                 f"threads: {torch.get_num_threads()}")
    if cuda:
        p = torch.cuda.get_device_properties(0)
        lines.append(f"gpu: {p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability "
                     f"{p.major}.{p.minor}, {p.multi_processor_count} SMs")
        words = p.name.split()
        tag = next((w for w in words if any(c.isdigit() for c in w)), words[-1]).lower()
    elif not rehearse:
        lines.append("no CUDA GPU visible: nothing to run")
        status = 3
except ImportError:
    status = 3
if shutil.which("nvidia-smi"):
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv"], capture_output=True, text=True, timeout=15)
        lines += ["nvidia-smi:", *("  " + x for x in smi.stdout.strip().splitlines())]
    except (OSError, subprocess.SubprocessError) as exc:
        lines.append(f"nvidia-smi: failed ({exc})")
if rehearse and not any(x.startswith("cvxpy: not importable") for x in lines):
    lines.append("ERROR: the rehearsal could not block cvxpy")
    status = 1
if missing:
    lines.append(f"ERROR: required packages missing: {', '.join(missing)}")
    status = status or 1
open(env_txt, "w").write("\n".join(lines) + "\n")
open(tag_file, "w").write("".join(c for c in tag if c.isalnum()) or "gpu")
print("\n".join(lines))
sys.exit(status)
EOF
s=$?
if [ "$s" -eq 3 ]; then
    say "gpu_run: no CUDA GPU visible to $PY ($PY_WHY); nothing measured (see env.txt;" \
        "PYTHON=/path/to/python chooses the interpreter)"
    exit 3
fi
TAG="$(cat "$WORK/tag" 2>/dev/null || echo gpu)"

# ---------------------------------------------------------------- 2. validation, float32
if [ "$REHEARSE" -eq 1 ]; then
    SIZE=(--prompts 1 --new-tokens 16 --law-samples 60)
else
    SIZE=()
fi
run_step validate "$T_VALIDATE" "$KILL_AFTER" "$PY" -m real_models.validate --device "$DEVICE" \
    --dtype float32 --quick "${SIZE[@]}" --out "$OUTDIR/validate.md" \
    --json "$OUTDIR/validate.json"

# ---------------------------------------------------------------- 3. bfloat16 probe
if [ "$REHEARSE" -eq 1 ]; then
    SIZE=(--prompts 1 --new-tokens 8)
else
    SIZE=()
fi
run_step bf16 "$T_BF16" "$KILL_AFTER" "$PY" -m real_models.validate --device "$DEVICE" \
    --dtype bfloat16 --quick --checks tree-rows greedy "${SIZE[@]}" \
    --out "$WORK/bf16.md" --json "$WORK/bf16.json"
run_step merge "$T_MERGE" "$T_MERGE_KILL" "$PY" - "$OUTDIR" "$WORK" <<'EOF'
import json, re, sys
from pathlib import Path

out, work = Path(sys.argv[1]), Path(sys.argv[2])
md, js = work / "bf16.md", work / "bf16.json"
if not js.is_file():
    sys.exit("no bfloat16 probe results to merge")
with open(out / "validate.md", "a") as f:
    f.write("\n---\n\n# bfloat16 probe (tree rows and greedy identity only)\n\n"
            + re.sub(r"(?m)^#", "##", md.read_text()))
p = out / "validate.json"
data = json.loads(p.read_text()) if p.is_file() else {}
data["bfloat16_probe"] = json.loads(js.read_text())
p.write_text(json.dumps(data, indent=1) + "\n")
print(f"merged the bfloat16 probe into {out / 'validate.md'} and {p}")
EOF

# ---------------------------------------------------------------- 4. latency profiles
if [ "$REHEARSE" -eq 1 ]; then
    PROF=(--device cpu --small --tokens 1 2 4 8 16 32 64 --contexts 32 128 256 --warmup 1
          --repeats 3)
    SUFFIX=small
    B8=60; B4=45
else
    PROF=(--device cuda --warmup 3 --repeats 9)
    SUFFIX=random
    # measurement budgets: the limit less ~45 s to start python, build the models on the GPU
    # and warm up; contexts that would not fit are skipped and recorded as "truncated"
    B8=55; B4=45
fi
run_step qwen3-8b "$T_8B" "$KILL_AFTER" "$PY" -m real_models.profile --arch qwen3-8b \
    --dtype bfloat16 "${PROF[@]}" --time-budget "$B8" --name "$TAG-qwen3-8b-$SUFFIX" \
    --out "$OUTDIR/${TAG}_qwen3_8b_$SUFFIX.json" --figure "$OUTDIR/${TAG}_qwen3_8b_$SUFFIX.png"
run_step qwen3-4b "$T_4B" "$KILL_AFTER" "$PY" -m real_models.profile --arch qwen3-4b \
    --dtype bfloat16 "${PROF[@]}" --time-budget "$B4" --name "$TAG-qwen3-4b-$SUFFIX" \
    --out "$OUTDIR/${TAG}_qwen3_4b_$SUFFIX.json" --figure "$OUTDIR/${TAG}_qwen3_4b_$SUFFIX.png"

say ""
say "summary ($((SECONDS))s in all; worst case ${WORST}s):"
printf '%s' "$SUMMARY" | tee -a "$LOG"
say "files: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
exit "$STATUS"
