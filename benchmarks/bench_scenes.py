"""Many scenes in one launch (`make bench`): B Taylor-Green vortices of 15 x 15 particles as
one batch (`fluids.batchScenes`) against the same scenes run one after another and against one
scene of B x 225 particles, one CPU thread, float64, the case's scheme, stepper and Verlet
lists (`warpsph run tgv`'s code path).

Measured side by side in one run, medians of ``--repeats``:

* a forward step (``rollout`` under ``no_grad``, ``--steps`` steps, search and Verlet
  checks included): the particle-steps per second of the sequential scenes, of the batch
  and of the single large scene;
* a forward + backward of a ``--horizon``-step rollout (gradient of a loss of the final
  state w.r.t. the initial velocities), likewise.

The sequential figure is a rate, so it is measured on ``--sequential`` scenes (not all B):
running more of them one after another only multiplies the time. Writes
``benchmarks/results/scenes.json`` with ``sequentialParticleStepsPerSecond``,
``batchedParticleStepsPerSecond``, ``speedup`` (batched / sequential, forward),
``backwardSpeedup`` (the same for forward + backward), ``singleSceneRatio`` (the batch's
step time over the single large scene's, the larger of forward and forward + backward),
``equalityMaxRelErr`` (the batch's final positions and gradients against the sequential
runs', relative to their largest magnitude) and ``device``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenes", type=int, default=64, help="B, scenes in the batch")
    ap.add_argument("--n", type=int, default=15, help="particles per axis of one scene")
    ap.add_argument("--steps", type=int, default=20, help="forward steps timed")
    ap.add_argument("--horizon", type=int, default=20, help="rollout length of the backward")
    ap.add_argument("--sequential", type=int, default=8,
                    help="scenes timed one after another (the rate's sample)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "scenes.json"))
    args = ap.parse_args(argv)

    import math

    import torch

    from warpSPHCore.fluids import FluidState, batchScenes, rollout, splitScenes
    from warpSPHCore.fluids.cases.tgv import (
        TaylorGreenConfig,
        setup,
        taylorGreenParticles,
        taylorGreenScheme,
        taylorGreenVelocity,
    )

    torch.set_num_threads(1)
    device = torch.device(args.device)
    B, n = args.scenes, args.n
    K = min(args.sequential, B)

    base = setup(TaylorGreenConfig(n=n, t=0.0, relax=0, dtype=args.dtype, device=args.device))
    scheme = taylorGreenScheme(base)
    dt = base.dt

    def scene(seed):
        """The lattice start jittered by 0.1 dx (seeded), the analytic velocities there."""
        g = torch.Generator().manual_seed(seed)
        noise = (torch.rand(base.positions.shape, generator=g, dtype=torch.float64) - 0.5)
        x = (base.positions + 0.1 * base.dx * noise.to(base.positions)).remainder(1.0)
        return taylorGreenParticles(base), FluidState(x, taylorGreenVelocity(x, 1.0))

    scenes = [scene(s) for s in range(B)]
    batchP, batchS = batchScenes(scenes)
    big = setup(TaylorGreenConfig(n=int(round(n * math.sqrt(B))), t=0.0, relax=0,
                                  dtype=args.dtype, device=args.device))
    bigScheme = taylorGreenScheme(big)
    bigP, bigS = taylorGreenParticles(big), FluidState(big.positions, big.velocities)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def forward(particles, state, sch, steps):
        with torch.no_grad():
            return rollout(state, dt, steps, sch.rates(particles), sch.neighbours(particles),
                           stepper=sch.stepper).state

    def backward(particles, state, sch, steps):
        v0 = state.velocities.clone().requires_grad_(True)
        final = rollout(FluidState(state.positions, v0), dt, steps, sch.rates(particles),
                        sch.neighbours(particles), stepper=sch.stepper).state
        loss = (torch.sin(4.0 * final.positions).sum(1) * final.velocities.sum(1)).sum()
        return final, torch.autograd.grad(loss, v0)[0]

    def timed(fn):
        sync()
        t0 = time.perf_counter()
        out = fn()
        sync()
        return time.perf_counter() - t0, out

    def median(fn):
        fn()  # warm-up: kernels, allocator
        runs = [timed(fn) for _ in range(args.repeats)]
        return statistics.median(r[0] for r in runs), runs[-1][1]

    rows = {}
    # forward
    tSeq, seqFinals = median(lambda: [forward(p, s, scheme, args.steps) for p, s in scenes[:K]])
    tBatch, batchFinal = median(lambda: forward(batchP, batchS, scheme, args.steps))
    tBig, _ = median(lambda: forward(bigP, bigS, bigScheme, args.steps))
    rows["forward"] = (tSeq / K / args.steps, tBatch / args.steps, tBig / args.steps)
    # forward + backward
    tSeqB, seqGrads = median(lambda: [backward(p, s, scheme, args.horizon)
                                      for p, s in scenes[:K]])
    tBatchB, (batchFinalB, batchGrad) = median(
        lambda: backward(batchP, batchS, scheme, args.horizon))
    tBigB, _ = median(lambda: backward(bigP, bigS, bigScheme, args.horizon))
    rows["backward"] = (tSeqB / K / args.horizon, tBatchB / args.horizon,
                        tBigB / args.horizon)

    def relErr(a, b):
        return float((a - b).abs().max() / b.abs().max())

    errs = []
    xs = splitScenes(batchFinal.positions, batchP)
    gs = splitScenes(batchGrad, batchP)
    for k in range(K):
        errs.append(relErr(xs[k], seqFinals[k].positions))
        errs.append(relErr(gs[k], seqGrads[k][1]))

    perScene = n * n
    seqRate = perScene / rows["forward"][0]
    batchRate = B * perScene / rows["forward"][1]
    seqRateB = perScene / rows["backward"][0]
    batchRateB = B * perScene / rows["backward"][1]
    result = {
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        "dtype": args.dtype,
        "scenes": B,
        "particlesPerScene": perScene,
        "largeSceneParticles": int(bigP.supports.shape[0]),
        "sequentialParticleStepsPerSecond": seqRate,
        "batchedParticleStepsPerSecond": batchRate,
        "largeSceneParticleStepsPerSecond": bigP.supports.shape[0] / rows["forward"][2],
        "speedup": batchRate / seqRate,
        "sequentialBackwardParticleStepsPerSecond": seqRateB,
        "batchedBackwardParticleStepsPerSecond": batchRateB,
        "backwardSpeedup": batchRateB / seqRateB,
        "forwardSingleSceneRatio": rows["forward"][1] / rows["forward"][2],
        "backwardSingleSceneRatio": rows["backward"][1] / rows["backward"][2],
        "singleSceneRatio": max(rows["forward"][1] / rows["forward"][2],
                                rows["backward"][1] / rows["backward"][2]),
        "equalityMaxRelErr": max(errs),
        "msPerStep": {k: {"sequentialPerScene": v[0] * 1e3, "batched": v[1] * 1e3,
                          "largeScene": v[2] * 1e3} for k, v in rows.items()},
        "command": "python benchmarks/bench_scenes.py " + " ".join(argv or sys.argv[1:]),
    }
    print(f"{B} scenes of {perScene} particles, {args.dtype}, {result['device']}, one thread")
    print("| | one scene after another (per scene) | batch of B | one scene of B x N | "
          "batch / one large |")
    print("|---|---|---|---|---|")
    for k, (s, b, g) in rows.items():
        label = "step" if k == "forward" else f"forward + backward per step ({args.horizon})"
        print(f"| {label} | {s * 1e3:.2f} ms | {b * 1e3:.2f} ms | {g * 1e3:.2f} ms | "
              f"{b / g:.2f} |")
    print(f"speedup (particle-steps/s, batch / sequential): forward {result['speedup']:.1f}x, "
          f"forward + backward {result['backwardSpeedup']:.1f}x; "
          f"equality max rel err {result['equalityMaxRelErr']:.2e}")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
