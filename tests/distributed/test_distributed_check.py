"""Acceptance: every operator (plain and with volumes, CRK, renormalization,
grad-h), its position and value gradients and its JVPs (dual tensors and
`warpOperationJVP`), and the Density HVP, on 2 and 4 gloo ranks equal one process to 1e-12
relative; a 20-step rollout with migration every step and one rebalance equals one process
to 1e-10 with particle count and mass conserved exactly.

The tests spawn the ranks themselves (`distributed.spawn`, no launcher). One spawn per rank
count and dimension runs every configuration (module-scoped fixtures); each assertion below
reads its part. The default suite runs 2D on 2 and 4 ranks with the rollouts; the 3D
problems (2 and 4 ranks) are `slow` (`make test-all`; `warpsph distributed-check` runs them
too).
"""

from __future__ import annotations

import pytest

from warpSPHCore.distributed.check import CASES, CheckConfig, RolloutConfig, runCheck

TOL = 1e-12
ROLLOUT_TOL = 1e-10
CONFIGS_2D = [CheckConfig(2, True, 16), CheckConfig(2, False, 16)]
CONFIGS_3D = [CheckConfig(3, True, 10, 2.0), CheckConfig(3, False, 10, 2.0)]


@pytest.fixture(scope="module")
def twoRanks():
    return runCheck(2, CONFIGS_2D, RolloutConfig(CheckConfig(2, True, 16)))


@pytest.fixture(scope="module")
def twoRanks3D():
    return runCheck(2, CONFIGS_3D, None)


@pytest.fixture(scope="module")
def fourRanks():
    return runCheck(4, CONFIGS_2D, RolloutConfig(CheckConfig(2, False, 16)))


@pytest.fixture(scope="module")
def fourRanks3D():
    return runCheck(4, CONFIGS_3D, None)


def _assertTable(entry, config):
    table = entry["table"]
    assert set(table) == set(CASES), "every registered check case ran"
    for case, row in table.items():
        _, field, _ = CASES[case]
        expected = {"out", "gradX", "jvp"} | ({"gradF"} if field else set()) \
            | ({"hvp"} if case == "Density" else set())
        assert expected <= set(row), (case, sorted(row))
        for quantity, value in row.items():
            if quantity == "jvpValuesOnly":
                continue
            assert value <= TOL, f"{config.name} {case} {quantity}: {value:.3e}"
    # the halo is not empty (the ranks really exchanged particles)
    assert min(entry["halo"]) > 0 and min(entry["owned"]) > 0


@pytest.mark.parametrize("config", CONFIGS_2D, ids=lambda c: c.name)
def test_two_ranks_equal_one_process(twoRanks, config):
    _assertTable(twoRanks["configs"][config.name], config)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS_3D, ids=lambda c: c.name)
def test_two_ranks_3d_equal_one_process(twoRanks3D, config):
    _assertTable(twoRanks3D["configs"][config.name], config)


@pytest.mark.parametrize("config", CONFIGS_2D, ids=lambda c: c.name)
def test_four_ranks_equal_one_process(fourRanks, config):
    _assertTable(fourRanks["configs"][config.name], config)


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS_3D, ids=lambda c: c.name)
def test_four_ranks_3d_equal_one_process(fourRanks3D, config):
    _assertTable(fourRanks3D["configs"][config.name], config)


@pytest.mark.parametrize("ranks", ["twoRanks", "fourRanks"])
def test_rollout_with_migration_and_rebalance(ranks, request):
    report = request.getfixturevalue(ranks)["rollout"]
    assert report["steps"] == 20
    assert report["countConserved"] and report["massConserved"]
    assert report["positions"] <= ROLLOUT_TOL and report["velocities"] <= ROLLOUT_TOL
    assert sum(report["counts"]) == 256 and min(report["counts"]) > 0
