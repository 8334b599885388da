"""Double backward through a whole rollout of the fluids layer (what meta-learning and
gradient penalties on a trained closure need): the gradient of |dL/dtheta|^2, with L a
trajectory loss of a 5-step rollout of a scheme with an `nn.Module` term (Verlet lists, the
Density and Momentum operators, torch terms), against central differences of the
create_graph gradient."""

from __future__ import annotations

import torch

from warpSPHCore.demo import learn
from warpSPHCore.fluids import rollout


def test_gradient_of_a_gradient_through_a_rollout():
    setup = learn.LearnSetup(12)
    seeds = [learn.TRAIN_SEEDS]
    fine = setup.fineVelocities(seeds, 5)
    model = learn.MomentumClosure(learn.NU, setup.coarse.spacing)
    scheme = setup.scheme(model)

    def loss():
        P, S = setup.batch(setup.coarseX, setup.coarse, seeds)
        tr = rollout(S, setup.dt, 5, scheme.rates(P), scheme.neighbours(P),
                     stepper=scheme.stepper, trajectoryEvery=5).trajectory
        v = tr.velocities.reshape(tr.velocities.shape[0], 1, -1, 2)
        return learn.velocityErrors(v, fine)[1:].pow(2).mean()

    def gradNorm():
        (g,) = torch.autograd.grad(loss(), model.theta, create_graph=True)
        return g.pow(2).sum()

    with torch.no_grad():
        model.theta.copy_(torch.tensor([0.3, 0.5, -0.2], dtype=torch.float64))
    (h,) = torch.autograd.grad(gradNorm(), model.theta)
    eps = 1e-5
    fd = torch.zeros(3, dtype=torch.float64)
    for k in range(3):
        with torch.no_grad():
            model.theta[k] += eps
        up = gradNorm().detach()
        with torch.no_grad():
            model.theta[k] -= 2 * eps
        down = gradNorm().detach()
        with torch.no_grad():
            model.theta[k] += eps
        fd[k] = (up - down) / (2 * eps)
    torch.testing.assert_close(h, fd, rtol=1e-6, atol=1e-15)
    assert float(h.abs().max()) > 0
