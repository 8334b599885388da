#!/usr/bin/env bash
# Prepared check for a lent CUDA machine (`make gpu-check`): runs the CUDA-parametrised tests
# and the benchmarks on cuda:0 and prints one table. Designed to finish well inside the
# 15-minute device budget.
#
# On the lent machine there is no .venv: the system python3 carries torch. warp-lang travels as
# a wheel in .whl/ (see docs/gpu.md for the one-line download), installed to /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, warp as wp; wp.init(); print('torch', torch.__version__, 'cuda', torch.cuda.is_available()); print('warp', wp.config.version, [d.alias for d in wp.get_devices()])" | tee -a "$OUT/gpu.txt"
status=0
# The CUDA half of every device-parametrised test (ids end in cuda_0), plus cuda-marked tests.
timeout 420 $PY -m pytest -q -p no:cacheprovider -k "cuda_0" -m "not slow" tests 2>&1 | tee "$OUT/pytest-cuda.txt" | tail -n 25 || status=1
timeout 150 $PY benchmarks/run.py --device cuda:0 --json "$OUT/bench-cuda.json" 2>&1 | tee "$OUT/bench-cuda.txt" || status=1
timeout 90 $PY benchmarks/bench_density.py --device cuda:0 --json "$OUT/bench-density-cuda.json" 2>&1 | tee -a "$OUT/bench-cuda.txt" || status=1
timeout 120 $PY benchmarks/bench_gradient.py --device cuda:0 --json "$OUT/bench-gradient-cuda.json" 2>&1 | tee -a "$OUT/bench-cuda.txt" || status=1
exit $status
