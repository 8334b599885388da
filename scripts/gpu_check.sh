#!/usr/bin/env bash
# Prepared check for a lent CUDA machine (`make gpu-check`), one script under one deadline
# (GPU_CHECK_BUDGET seconds, default 420): every step gets its own timeout, never past the
# deadline, and is skipped when too little time is left.
#
#   1. cold time to first result on cuda:0 (benchmarks/first_result.py --fresh-cache), in the
#      background, in its own empty kernel cache;
#   2. the cold compile of every warpSPHCore Warp module for cuda:0, in parallel
#      (scripts/precompile_all.py), which also warms the cache for the steps that follow;
#   3. the CUDA-marked tests (the cuda_0 half of every device-parametrised test, the stream and
#      graph-capture tests), with pytest-xdist where the machine has it;
#   4. the benchmarks on cuda:0 and the host-sync census; the fluids cases (TGV and dam break)
#      and the Taylor-Green step at 2,500 and 1M particles (scripts/benchmarks/fluids_device.py);
#      the distributed check on two gloo ranks with CUDA tensors (`warpsph distributed-check`)
#      and the TGV case on two ranks against one process (`warpsph run tgv --nproc 2`);
#   5. a summary table. Logs and JSON go to a work folder, packed after every step into
#      $OUT/gpu-check.tar.gz (so a run stopped at its limit still returns what it did).
#
# On the lent machine there is no .venv: the system python3 carries torch. warp-lang travels
# either as a wheel in .whl/ (installed to /tmp/site) or already unpacked in /tmp/site (a
# wheel larger than one transfer: docs/gpu.md says how).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${WARP_SITE:-/tmp/site}
if [ ! -d "$SITE/warp" ] && [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
fi
[ -d "$SITE/warp" ] && export PYTHONPATH=$SITE:${PYTHONPATH:-}
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu-check-out}
W=${GPU_CHECK_WORK:-/tmp/gpu-check}
mkdir -p "$OUT" "$W"
BUDGET=${GPU_CHECK_BUDGET:-420}
DEV=${GPU_CHECK_DEVICE:-cuda:0}
T0=$(date +%s)
export WARP_CACHE_PATH=${WARP_CACHE_PATH:-$W/kernel-cache}

pack() { tar -czf "$OUT/gpu-check.tar.gz" -C "$W" --exclude=kernel-cache . 2>/dev/null; }
status=0
step() {  # step NAME SECONDS COMMAND...: run with a timeout (never past the deadline)
  local name=$1 limit=$2
  shift 2
  local left=$(( BUDGET - ($(date +%s) - T0) ))
  if [ "$left" -lt 15 ]; then
    echo "$name skipped (deadline)" | tee -a "$W/steps.txt"; status=1; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc ${limit}s-limit $(( $(date +%s) - t ))s" | tee -a "$W/steps.txt"
  tail -n 8 "$W/$name.txt"
  [ $rc -eq 0 ] || status=1
  pack
}
: > "$W/steps.txt"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import torch, warp as wp; wp.init(); print('torch', torch.__version__, 'cuda', torch.cuda.is_available()); print('warp', wp.config.version, [d.alias for d in wp.get_devices()])"
  nproc; } > "$W/gpu.txt" 2>&1
cat "$W/gpu.txt"

# 1. cold first result, in the background (its own fresh kernel cache)
( timeout 300 $PY benchmarks/first_result.py --device "$DEV" --fresh-cache \
    --json "$W/first-result-cold.json" > "$W/first-result-cold.txt" 2>&1
  echo "first-result-cold rc=$?" >> "$W/steps.txt" ) &
COLD=$!

# 2. the whole library compiled for cuda:0 in parallel (cold: the cache is new)
step precompile 240 $PY scripts/precompile_all.py --device "$DEV" --workers 14 --json "$W/precompile.json"
step first-result-warm 60 $PY benchmarks/first_result.py --device "$DEV" --json "$W/first-result-warm.json"

# 3. the CUDA-marked tests
XDIST=()
$PY -c "import xdist" 2>/dev/null && XDIST=(-p xdist -n 12)
step pytest-cuda 180 $PY -m pytest -q -p no:cacheprovider "${XDIST[@]}" -m "cuda and not slow" tests

# 4. benchmarks and census on cuda:0
step bench-search 40 $PY benchmarks/run.py --device "$DEV" --json "$W/bench-search.json"
step bench-density 40 $PY benchmarks/bench_density.py --device "$DEV" --json "$W/bench-density.json"
step bench-gradient 40 $PY benchmarks/bench_gradient.py --device "$DEV" --json "$W/bench-gradient.json"
step bench-jvp 40 $PY benchmarks/bench_jvp.py --device "$DEV" --json "$W/bench-jvp.json"
step census 25 $PY scripts/benchmarks/count_host_syncs.py --device "$DEV"
step fluids 120 $PY scripts/benchmarks/fluids_device.py --device "$DEV" --json "$W/fluids.json"
# 64 scenes of 225 particles as one batch against one after another (the GPU speedup)
step scenes 90 $PY benchmarks/bench_scenes.py --device "$DEV" --sequential 4 --repeats 2 --json "$W/scenes.json"
# the distributed check on one GPU: gloo with CUDA tensors (NCCL needs a GPU per rank), 2 ranks, 2D
step distributed 120 $PY -m warpSPHCore distributed-check --nproc 2 --dims 2 --device "$DEV" --json "$W/distributed.json"
# a simulation across two ranks on CUDA tensors, against the same run in one process
step distributed-tgv 90 bash -c "$PY -m warpSPHCore run tgv --n 24 --relax 0 --t 0.05 --device $DEV --quiet --out $W/tgv-one && $PY -m warpSPHCore run tgv --n 24 --relax 0 --t 0.05 --device $DEV --nproc 2 --rebalance 2 --quiet --out $W/tgv-two"

# the cold first result gets what is left of the budget
left=$(( BUDGET - ($(date +%s) - T0) ))
( sleep $(( left > 0 ? left : 1 )); kill $COLD 2>/dev/null ) & wait $COLD 2>/dev/null
tail -n 8 "$W/first-result-cold.txt"
pack

echo
echo "== summary ($(( $(date +%s) - T0 )) s) =="
cat "$W/steps.txt"
grep -E "passed|failed" "$W/pytest-cuda.txt" | tail -n 1
$PY - "$W" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    p = out / name
    try:
        return json.loads(p.read_text()) if p.exists() else None
    except ValueError:
        return None
rows = []
p = load("precompile.json")
if p:
    rows.append((f"compile all ({p['modules']} modules, {p['workers']} thr) s", p["compile_s"]))
for tag in ("cold", "warm"):
    r = load(f"first-result-{tag}.json")
    if r:
        for k, v in r["steps_s"].items():
            rows.append((f"first result {tag}: {k} s", v))
g = load("bench-gradient.json")
if g:
    t = g.get("throughput", {})
    rows += [("Gradient fwd+bwd ours/floor", t.get("fwd_bwd_ratio_floor")),
             ("Gradient fwd+bwd ours/torch", t.get("fwd_bwd_ratio_torch")),
             ("Gradient fwd ours/floor", t.get("fwd_ratio_floor"))]
j = load("bench-jvp.json")
if j:
    rows += [("JVP / primal", j.get("jvp_over_primal")),
             ("JVP / torch fwd AD", j.get("jvp_over_torch_fwd_ad")),
             ("dead dual / primal", j.get("dead_dual_over_primal"))]
d = load("bench-density.json")
if d:
    rows.append(("Density ours/floor", d.get("throughput", {}).get("ratio")))
    rows.append(("Density call overhead ratio", d.get("overhead", {}).get("ratio")))
f = load("fluids.json")
if f:
    for k, v in f.items():
        if isinstance(v, dict):
            rows.append((f"fluids {k}: ms per step", v.get("msPerStep")))
for name, v in rows:
    print(f"{name:44s} {v if not isinstance(v, float) else round(v, 3)}")
EOF
exit $status
