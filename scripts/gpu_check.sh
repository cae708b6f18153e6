#!/usr/bin/env bash
# The GPU check in one command on a GPU machine without a package index, from the checkout's
# root, with the folders of scripts/gpu_prepare.sh carried beside it (.whl, .gpu):
#
#   bash scripts/gpu_check.sh "$OUT"                       # everything, in about 9 minutes
#   bash scripts/gpu_check.sh "$OUT" --parts bench ...     # one scripts/gpu_check.py call
#   BENCH=0 SWEEP_ROUNDS=1 bash scripts/gpu_check.sh "$OUT" # no benchmark; 1 round of the grid
#
# Installs the carried wheels (the machine's torch, numpy, ... stay) and puts the checkout on
# PYTHONPATH (fedmoo and its Hydra plugins, not installed). With OUT alone it runs
# scripts/gpu_check.py twice over: first the tests, the runs and the Table 8 grid side by side
# (three processes; CPU-bound tests beside light GPU work) within PHASE1_S seconds, then the
# round-time benchmark alone on the GPU within PHASE2_S seconds. It leaves 8 files, the most the
# device tool returns: OUT/tests/{summary.json,pytest_cuda.log,pytest_all.log},
# OUT/runs/{summary.json,runs.log,sweep_summary.json} (the grid's log appended to runs.log),
# OUT/bench/{summary.json,bench.log}.
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

p1=${PHASE1_S:-270}
p2=${PHASE2_S:-250}
work=${TMPDIR:-/tmp}/fedmoo-gpu-check
rc=0
"$PY" scripts/gpu_check.py "$out/tests" --parts tests --deadline "$p1" --work "$work/tests" &
a=$!
"$PY" scripts/gpu_check.py "$out/runs" --parts runs --deadline "$p1" --work "$work/runs" &
b=$!
"$PY" scripts/gpu_check.py "$out/sweep" --parts sweep --deadline "$p1" --work "$work/sweep" \
  --sweep-rounds "${SWEEP_ROUNDS:-3}" &
c=$!
for pid in $a $b $c; do wait "$pid" || rc=1; done
if [ -d "$out/sweep" ]; then
  cat "$out/sweep/sweep.log" >>"$out/runs/runs.log" 2>/dev/null || true
  mv "$out/sweep/summary.json" "$out/runs/sweep_summary.json" 2>/dev/null || true
  rm -rf "$out/sweep"
fi
[ "${BENCH:-1}" = 0 ] && exit $rc
"$PY" scripts/gpu_check.py "$out/bench" --parts bench --deadline "$p2" --work "$work/bench" \
  --bench-k 10,100,50 --bench-reps 3 || rc=1
exit $rc
