"""Shared fixtures: every test takes a device (cpu, and cuda:0 when available) and both
precisions run in the same process (difference a)."""

from __future__ import annotations

import os

import pytest
import torch

from warpSPHCore.util.warpContext import ensureWarp

ensureWarp()

DEVICES = ["cpu"]
if torch.cuda.is_available():
    DEVICES.append("cuda:0")


def _device_params():
    params = [pytest.param("cpu", id="cpu")]
    params.append(
        pytest.param(
            "cuda:0",
            id="cuda_0",
            marks=[
                pytest.mark.cuda,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
            ],
        )
    )
    return params


@pytest.fixture(scope="session", autouse=True)
def _precompileLibrary():
    """Compile the library's Warp modules for the CPU in parallel before the first test (one
    thread per core, Warp's parallel module loading): on a cold kernel cache this replaces
    the one-module-at-a-time compiles of the first tests that use them; on a warm cache it
    only checks the cache. WARPSPHCORE_TEST_PRECOMPILE=0 turns it off."""
    if os.environ.get("WARPSPHCORE_TEST_PRECOMPILE", "1") != "0":
        from warpSPHCore.precompile import precompile

        # the specialised kernels of the default configuration only when the run uses them
        everywhere = os.environ.get("WARPSPHCORE_TEST_SPECIALIZE", "") == "all"
        precompile(["cpu"], workers=max(1, os.cpu_count() or 1), verbose=False,
                   kernels=(0,) if everywhere else ())
    yield


@pytest.fixture(scope="session", autouse=True)
def _specializationScope():
    """Per-configuration specialised kernels (`operators._specialized`) in the test run.

    Each configuration a test uses compiles one small Warp module, and the whole suite would
    generate some 360 of them (several minutes on a cold cache). The default run therefore
    keeps the generic kernels, which the references and gradchecks check, and
    tests/operations/test_specialized.py checks the specialised kernels against them over a
    covering design of the configurations (every option value with every specialised
    operator). ``WARPSPHCORE_TEST_SPECIALIZE=all`` (`make test-all`) runs every test with
    specialisation on, i.e. the full product the suite reaches."""
    from warpSPHCore.autograd.specialize import setSpecialization

    everywhere = os.environ.get("WARPSPHCORE_TEST_SPECIALIZE", "") == "all"
    previous = setSpecialization(everywhere)
    yield
    setSpecialization(previous)


@pytest.fixture
def specialized():
    """Specialised kernels on for one test (restored afterwards)."""
    from warpSPHCore.autograd.specialize import setSpecialization

    previous = setSpecialization(True)
    yield
    setSpecialization(previous)


def _refreshingEnv(method):
    """`pytest.MonkeyPatch.setenv`/`delenv` that re-read the library's environment gates
    (`util.gates`: read once) when a test changes one of them."""
    def wrapped(self, name, *args, **kw):
        result = method(self, name, *args, **kw)
        if str(name).startswith("WARPSPHCORE_"):
            from warpSPHCore.util.gates import refreshGates

            refreshGates()
        return result
    return wrapped


pytest.MonkeyPatch.setenv = _refreshingEnv(pytest.MonkeyPatch.setenv)
pytest.MonkeyPatch.delenv = _refreshingEnv(pytest.MonkeyPatch.delenv)


@pytest.fixture(autouse=True)
def _freshGates():
    """Each test starts from the gates of the environment it runs in (a previous test's
    monkeypatch has been undone by then)."""
    from warpSPHCore.util.gates import refreshGates

    refreshGates()
    yield


@pytest.fixture(autouse=True)
def _isolateErrorBuffers():
    """A test that corrupts a neighbour structure on purpose must not leave its recorded
    error to the next test's readback (`util.errorFlags`)."""
    yield
    from warpSPHCore.util import errorFlags

    for key in list(errorFlags._BUFFERS):
        errorFlags.resetErrors(key)


@pytest.fixture(params=_device_params())
def device(request):
    return torch.device(request.param)


@pytest.fixture(params=[torch.float32, torch.float64], ids=["f32", "f64"])
def dtype(request):
    return request.param


@pytest.fixture(params=[1, 2, 3], ids=["1d", "2d", "3d"])
def dim(request):
    return request.param


def pytest_terminal_summary(terminalreporter):
    """Report how many per-configuration specialised kernels the run generated (each is one
    small Warp module, compiled once per configuration: `operators._specialized`)."""
    import sys

    mod = sys.modules.get("warpSPHCore.operators._specialized")
    if mod is not None:
        terminalreporter.write_line(
            f"warpSPHCore: {mod.specializedKernelCount()} specialised kernels generated")
