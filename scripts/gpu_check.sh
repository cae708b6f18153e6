#!/usr/bin/env bash
# The GPU check in one command on a GPU machine without a package index, from the checkout's
# root, with the folders of scripts/gpu_prepare.sh carried beside it (.whl, .gpu):
#
#   bash scripts/gpu_check.sh "$OUT"                       # everything, in about 9 minutes
#   bash scripts/gpu_check.sh "$OUT" --parts bench ...     # one scripts/gpu_check.py call
#   BENCH=0 SWEEP=0 bash scripts/gpu_check.sh "$OUT"       # tests and runs only
#
# Installs the carried wheels (the machine's torch, numpy, ... stay) and puts the checkout on
# PYTHONPATH (fedmoo and its Hydra plugins, not installed). With OUT alone it runs
# scripts/gpu_check.py in three phases: the tests and the runs side by side (two processes;
# CPU-bound tests beside light GPU work) within PHASE1_S seconds; then the round-time benchmark
# alone on the GPU within PHASE2_S; then FedMGDA+ Table 8's grid alone, with TF32, in float32
# and with TF32 and CUDA graphs (SWEEP_VARIANTS), SWEEP_ROUNDS rounds each, within PHASE3_S.
# It leaves 8 files, the most the device tool returns:
# OUT/tests/{summary.json,pytest_cuda.log,pytest_all.log}, OUT/runs/{summary.json,runs.log},
# OUT/bench/{summary.json,bench.log}, OUT/sweep_summary.json (the grid's log appended to
# OUT/bench/bench.log).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash scripts/gpu_check.sh OUT [gpu_check.py options]}
shift
PY=${PYTHON:-python3}
if ! ls .whl/*.whl >/dev/null 2>&1; then
  echo "gpu_check: no wheels in .whl (run scripts/gpu_prepare.sh where pip works; carry .whl)" >&2
  exit 2
fi
# Into the interpreter's own environment where it is writable (the tests' subprocesses then find
# them whatever PYTHONPATH they set), else into /tmp/site on PYTHONPATH.
if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
if [ $# -gt 0 ]; then
  exec "$PY" scripts/gpu_check.py "$out" "$@"
fi

p1=${PHASE1_S:-190}
p2=${PHASE2_S:-170}
p3=${PHASE3_S:-190}
work=${TMPDIR:-/tmp}/fedmoo-gpu-check
rc=0
"$PY" scripts/gpu_check.py "$out/tests" --parts tests --deadline "$p1" --work "$work/tests" &
a=$!
"$PY" scripts/gpu_check.py "$out/runs" --parts runs --deadline "$p1" --work "$work/runs" &
b=$!
for pid in $a $b; do wait "$pid" || rc=1; done
if [ "${BENCH:-1}" != 0 ]; then
  "$PY" scripts/gpu_check.py "$out/bench" --parts bench --deadline "$p2" --work "$work/bench" \
    --bench-k 10,100,50 --bench-reps 3 || rc=1
fi
if [ "${SWEEP:-1}" != 0 ]; then
  "$PY" scripts/gpu_check.py "$out/sweep" --parts sweep --deadline "$p3" --work "$work/sweep" \
    --sweep-rounds "${SWEEP_ROUNDS:-3}" --sweep-variants "${SWEEP_VARIANTS:-tf32,fp32,tf32_graph}" \
    || rc=1
  mkdir -p "$out/bench"
  cat "$out/sweep/sweep.log" >>"$out/bench/bench.log" 2>/dev/null || true
  mv "$out/sweep/summary.json" "$out/sweep_summary.json" 2>/dev/null || true
  rm -rf "$out/sweep"
fi
exit $rc
