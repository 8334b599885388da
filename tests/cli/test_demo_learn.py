"""`warpsph demo learn` at its tiny size: the training gradient through the batched,
checkpointed rollout equals a central difference of the loss; training lowers the loss; the
learned closure lowers the held-out velocity error at the horizon and at four horizons; the
coarse and fine runs start equal (the twins); results.json carries the documented keys."""

from __future__ import annotations

import json

import torch

from warpSPHCore.cli import main
from warpSPHCore.demo import learn


def test_training_gradient_matches_central_difference():
    setup = learn.LearnSetup(12)
    seeds = [learn.TRAIN_SEEDS]
    fine = setup.fineVelocities(seeds, 10)
    model = learn.MomentumClosure(learn.NU, setup.coarse.spacing)
    scheme = setup.scheme(model)

    def loss():
        e = learn.velocityErrors(setup.coarseVelocities(seeds, 10, scheme), fine)
        return e[1:].pow(2).mean()

    with torch.no_grad():
        model.theta.copy_(torch.tensor([0.3, 0.5, -0.2], dtype=torch.float64))
    (g,) = torch.autograd.grad(loss(), model.theta)
    eps = 1e-5
    fd = torch.zeros(3, dtype=torch.float64)
    with torch.no_grad():
        for k in range(3):
            model.theta[k] += eps
            up = loss()
            model.theta[k] -= 2 * eps
            down = loss()
            model.theta[k] += eps
            fd[k] = (up - down) / (2 * eps)
    torch.testing.assert_close(g, fd, rtol=1e-6, atol=1e-12)
    assert float(g.abs().max()) > 0


def test_twins_start_equal_and_errors_start_at_zero():
    setup = learn.LearnSetup(12)
    seeds = [learn.TEST_SEEDS]
    with torch.no_grad():
        e = learn.velocityErrors(setup.coarseVelocities(seeds, 10, setup.base),
                                 setup.fineVelocities(seeds, 10))
    assert float(e[0]) < 1e-14
    assert 0 < float(e[1]) < 0.1


def test_cli_learn_part(tmp_path, capsys):
    out = tmp_path / "learn"
    assert main(["demo", "learn", "--size", "tiny", "--out", str(out), "--quiet"]) == 0
    results = json.loads((out / "results.json").read_text())["learn"]
    for key in ("learnedErrorRatio", "learnedErrorRatio4x", "trainSeconds", "trainingCurve",
                "secondsPerIteration", "peakMemoryMB"):
        assert key in results
    assert results["trainingCurve"][-1] < results["trainingCurve"][0]
    assert results["learnedErrorRatio"] < 1.0 and results["learnedErrorRatio4x"] < 1.0
    assert results["correctedError"] < results["uncorrectedError"]
    assert (out / "learn.png").stat().st_size > 10_000
    assert "learnedErrorRatio" in (out / "report.md").read_text()
    assert "warpSPHCore demo summary" in capsys.readouterr().out
