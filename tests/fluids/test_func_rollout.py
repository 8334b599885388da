"""`torch.func` over a whole rollout of the fluids layer: the neighbour search inside the
transform runs on the positions' values (it is never differentiated), so ``torch.func.grad``
of a rollout equals reverse mode; a ``vmap`` over initial states (a batch of positions in one
search) raises and points to scenes."""

from __future__ import annotations

import pytest
import torch

from warpSPHCore.demo import learn
from warpSPHCore.fluids import FluidState, rollout


def _flow():
    setup = learn.LearnSetup(12)
    particles, state = setup.batch(setup.coarseX, setup.coarse, [1])
    scheme = setup.base

    def final(v0):
        out = rollout(FluidState(state.positions, v0), setup.dt, 3, scheme.rates(particles),
                      scheme.neighbours(particles), stepper=scheme.stepper)
        return out.state.velocities.pow(2).sum()

    return state, final


def test_func_grad_through_a_rollout():
    state, final = _flow()
    got = torch.func.grad(final)(state.velocities)
    v = state.velocities.clone().requires_grad_(True)
    ref = torch.autograd.grad(final(v), v)[0]
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)
    assert float(ref.abs().max()) > 0


def test_vmap_over_initial_states_points_to_scenes():
    state, final = _flow()
    batch = state.velocities.unsqueeze(0).expand(2, *state.velocities.shape).clone()
    with pytest.raises(NotImplementedError, match="batchScenes"):
        torch.func.vmap(final)(batch)
