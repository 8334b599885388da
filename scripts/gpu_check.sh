#!/usr/bin/env bash
# Prepared check for a lent CUDA machine (`make gpu-check`): the CUDA-marked tests (the cuda_0
# half of every device-parametrised test, the stream and graph-capture tests), the
# benchmarks and the host-sync census on cuda:0, then one summary table. Every step has its
# own timeout; the whole script is sized to finish inside 8 minutes (270 s of tests, 4 x 45 s
# of benchmarks, 30 s of census).
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
step() {  # step NAME SECONDS COMMAND...: run with a timeout, log to $OUT/NAME.txt
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc" >> "$OUT/steps.txt"
  tail -n 12 "$OUT/$name.txt"
  [ $rc -eq 0 ] || status=1
}
: > "$OUT/steps.txt"
step pytest-cuda 270 $PY -m pytest -q -p no:cacheprovider -m "cuda and not slow" tests
step bench-search 45 $PY benchmarks/run.py --device cuda:0 --quick --json "$OUT/bench-search.json"
step bench-density 45 $PY benchmarks/bench_density.py --device cuda:0 --json "$OUT/bench-density.json"
step bench-gradient 45 $PY benchmarks/bench_gradient.py --device cuda:0 --json "$OUT/bench-gradient.json"
step bench-jvp 45 $PY benchmarks/bench_jvp.py --device cuda:0 --json "$OUT/bench-jvp.json"
step census 30 $PY scripts/benchmarks/count_host_syncs.py --device cuda:0
echo
echo "== summary =="
cat "$OUT/steps.txt"
grep -E "passed|failed" "$OUT/pytest-cuda.txt" | tail -n 1
$PY - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.exists() else None
rows = []
g = load("bench-gradient.json")
if g:
    t = g.get("throughput", {})
    rows += [("Gradient fwd+bwd ours/floor", t.get("fwd_bwd_ratio_floor")),
             ("Gradient fwd+bwd ours/torch", t.get("fwd_bwd_ratio_torch")),
             ("Gradient fwd ours/floor", t.get("fwd_ratio_floor"))]
j = load("bench-jvp.json")
if j:
    rows += [("JVP / primal", j["jvp_over_primal"]), ("JVP / torch fwd AD", j["jvp_over_torch_fwd_ad"]),
             ("dead dual / primal", j["dead_dual_over_primal"])]
d = load("bench-density.json")
if d:
    rows.append(("Density ours/floor", d.get("throughput", {}).get("ratio")))
for name, v in rows:
    print(f"{name:32s} {v if v is None else round(v, 3)}")
EOF
exit $status
