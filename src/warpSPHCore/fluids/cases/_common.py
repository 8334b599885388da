"""What every case module shares: the config-field helper, the torch thread setting of a run
and the loop a case runs in."""

from __future__ import annotations

import contextlib
from dataclasses import field

import torch

from ..loop import LoopOptions, Simulation
from ..scheme import ParticleSet, Scheme

__all__ = ["option", "torchThreads", "caseSimulation", "simulationFactory", "THREADS_HELP"]

THREADS_HELP = ("torch CPU threads during the run, restored after it (0: leave torch's "
                "setting)")


def option(default, help: str):
    """A config dataclass field with its command-line help (``warpsph run CASE --help``)."""
    return field(default=default, metadata={"help": help})


@contextlib.contextmanager
def torchThreads(threads: int):
    """torch's CPU thread count set to `threads` (0: unchanged) inside the block, restored
    after it. The cases run with one thread by default: their small tensor operations gain
    nothing from intra-op threads, and on a loaded two-core machine two threads made a step
    30 to 100 times slower."""
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


_FACTORY: list = []


@contextlib.contextmanager
def simulationFactory(factory):
    """Inside the block `caseSimulation` returns ``factory(scheme, particles, state, dt,
    **keywords)`` (the keywords of `Scheme.simulation`) instead of a `Simulation`: how the
    distributed layer runs the unchanged cases across ranks. The object must offer what the
    cases read: ``run``, ``state`` (the whole system), ``step``, ``stepper``, ``frames``,
    ``monitor`` and ``neighbours.builds`` / ``.calls`` / ``.adjacency``."""
    _FACTORY.append(factory)
    try:
        yield
    finally:
        _FACTORY.pop()


_OPTIONS: list = []


@contextlib.contextmanager
def loopOptions(**overrides):
    """Inside the block every case's `LoopOptions` take `overrides` (e.g.
    ``verletCheckEvery=8, capture=True``): how ``warpsph run`` passes its loop options to
    the unchanged cases."""
    LoopOptions(**overrides)  # validated at once
    _OPTIONS.append(overrides)
    try:
        yield
    finally:
        _OPTIONS.pop()


def caseSimulation(config, out, writer, quiet: bool, scheme: Scheme, particles: ParticleSet,
                   state, dt, *, maxSpeed: float = 0.0, wrap: bool = True, frameFields=None,
                   stepper=None) -> Simulation:
    """The `Simulation` of a case: `scheme` on `particles` (`Scheme.simulation`: its rates,
    stepper and health monitor) with the time step `dt` (checked against the scheme's limit
    for the case's largest expected speed `maxSpeed`), the config's Verlet skin and frame
    interval (frames in ``out/frames``), a progress bar unless `quiet`; inside
    `simulationFactory`, that factory's simulation."""
    options = LoopOptions(skin=config.skin, frameEvery=config.frames, progress=not quiet,
                          wrap=wrap, **(_OPTIONS[-1] if _OPTIONS else {}))
    keywords = dict(maxSpeed=maxSpeed, options=options, writer=writer,
                    out=out / "frames" if config.frames else None, frameFields=frameFields,
                    stepper=stepper)
    if _FACTORY:
        return _FACTORY[-1](scheme, particles, state, dt, **keywords)
    return scheme.simulation(particles, state, dt, **keywords)
