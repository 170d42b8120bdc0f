#!/usr/bin/env bash
# The whole GPU check in one command (issue 37 and docs/gpu.md), sized for a lent GPU's 8 minutes:
#
#     bash bench/gpu_all.sh            # results under $OUT (default ./gpu-results)
#
# 1. issue 37's GPU proof first (tests/test_gpu_use.py, tests/test_gpu_issue37.py: MFU vs analytic and
#    torch.utils.benchmark, SM activity busy vs trickle, TF32 off, .item()/print(loss) named at their line,
#    pageable copies, input-bound on CUDA with its time split, no sync from the hooks in a plain loop, Lightning
#    and the HF Trainer, the queued --gpu-mem run, the idle-held alert; issue 52's memory history window and
#    a real OOM's largest block named at its line by the doctor, tests/test_gpu_pymem.py), one test at a time (-n 0: a shared GPU
#    would spoil the MFU figure);
# 2. bench/gpu_check.py: every panel field against nvidia-smi, SM activity (GPM) beside
#    `nvidia-smi dmon --gpm-metrics` in the same second, sampling and hook costs, leak latency;
# 3. the older GPU tests (tests/test_gpu.py, tests/test_gpu_runs.py) and issue 51's stuck collective under NCCL
#    (tests/test_gpu_stuck.py, 2 GPUs) with the time left.
# Each part has its own time limit; what each printed is in $OUT/*.log, the lines for docs/gpu.md in
# $OUT/for-docs-gpu.md. Without a GPU each part says why and the script exits 2.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-results}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
BUDGET="${GPU_ALL_BUDGET_S:-460}"  # seconds for all three parts
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

{
  echo "# gpu_all $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "no nvidia-smi"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" 2>&1
  "$PY" -c "import pynvml; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml, '__version__') else '?')" 2>&1
  "$PY" -c "import transformers, lightning; print('transformers', transformers.__version__, 'lightning', lightning.__version__)" 2>&1
} | tee "$OUT/env.txt"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "gpu_all: torch sees no CUDA GPU here: nothing to check (pytest -m gpu skips with the reason)" | tee -a "$OUT/env.txt"
  "$PY" -m pytest -m gpu -n 0 -q -rs tests/test_gpu_use.py tests/test_gpu_issue37.py tests/test_gpu_pymem.py 2>&1 | tail -20 | tee "$OUT/skipped.log"
  exit 2
fi

rc=0
part() {  # part NAME SECONDS CMD...: runs CMD with its limit, its output in $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  if [ "$limit" -lt 20 ]; then echo "gpu_all: no time left for $name" | tee "$OUT/$name.log"; rc=1; return; fi
  echo "== $name (limit ${limit}s)"
  timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local code=$?
  tail -25 "$OUT/$name.log"
  echo "== $name: exit $code after $(( $(date +%s) - START ))s in all"
  [ $code -ne 0 ] && rc=1
}

PYTEST=("$PY" -m pytest -m gpu -n 0 -s -rA -p no:cacheprovider --durations=0)
part issue37 $(( $(left) * 60 / 100 )) "${PYTEST[@]}" --junitxml="$OUT/issue37.xml" \
  tests/test_gpu_use.py tests/test_gpu_issue37.py tests/test_gpu_pymem.py
part gpu_check $(( $(left) * 55 / 100 )) "$PY" bench/gpu_check.py --idle-seconds 5
part older $(( $(left) - 5 )) "${PYTEST[@]}" --junitxml="$OUT/older.xml" tests/test_gpu.py tests/test_gpu_runs.py \
  tests/test_gpu_stuck.py  # issue 51: the stuck collective under NCCL (skips with fewer than 2 GPUs)

{
  echo "## GPU check $(date -u +%F) ($(head -2 "$OUT/env.txt" | tail -1))"
  echo
  grep -hE "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/issue37.log" "$OUT/older.log" 2>/dev/null | sed 's/^/- /'
  echo
  echo "Figures printed by the tests and gpu_check:"
  grep -hE "TFLOP|SM active|util .*% SM|started .* after|MISMATCH|agree|ms|busy:|largest blocks at the OOM" \
    "$OUT/issue37.log" "$OUT/gpu_check.log" 2>/dev/null | grep -v "^=" | head -60 | sed 's/^/    /'
} > "$OUT/for-docs-gpu.md"
echo "gpu_all: exit $rc after $(( $(date +%s) - START ))s; results in $OUT (for-docs-gpu.md: the lines for docs/gpu.md)"
exit $rc
