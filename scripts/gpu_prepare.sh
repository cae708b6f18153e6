#!/usr/bin/env bash
# Lays out, in the checkout, what scripts/gpu_check.sh needs on a GPU machine that has torch but
# no package index (both folders are git-ignored; carry them):
#   .whl/        wheels of fedmoo's dependencies that machine lacks (hydra-core, omegaconf,
#                antlr4-python3-runtime, qpsolvers, daqp, quadprog) for CPython 3.12 on
#                manylinux x86-64, in the versions installed where this runs;
#   .gpu/data/   Fashion-MNIST's four gzip files as data_dir/FashionMNIST/raw (about 31 MB).
#
#   bash scripts/gpu_prepare.sh                 # PYTHON=...: the interpreter with fedmoo's deps
#   FMNIST_DIR=/path/to/gz bash scripts/gpu_prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
TARGET=${GPU_PYTHON_VERSION:-3.12}
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
version() {
  "$PY" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || {
    echo "gpu_prepare: $1 is not installed for $PY (PYTHON=the interpreter with fedmoo's deps)" >&2
    exit 2; }
}

rm -rf .whl && mkdir -p .whl
for pkg in hydra-core omegaconf qpsolvers daqp quadprog; do
  v=$(version "$pkg")
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$TARGET" \
    --implementation cp "${plat[@]}" -d .whl "$pkg==$v"
done
# antlr4-python3-runtime 4.9.3 (omegaconf 2.3's parser runtime) is published as a source archive
# only: build its pure-Python wheel here.
v=$(version antlr4-python3-runtime)
"$PY" -m pip wheel -q --no-deps -w .whl "antlr4-python3-runtime==$v"

src=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz
       t10k-labels-idx1-ubyte.gz)
mkdir -p .gpu/data/FashionMNIST/raw
for f in "${files[@]}"; do
  if [ ! -f "$src/$f" ]; then
    echo "gpu_prepare: $src/$f is missing (FMNIST_DIR=folder of Fashion-MNIST's gzip files)" >&2
    exit 2
  fi
  cp "$src/$f" .gpu/data/FashionMNIST/raw/
done
ls .whl
du -sh .whl .gpu | tr '\n' ' '; echo "(carry: .whl .gpu)"
