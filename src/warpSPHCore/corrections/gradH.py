"""Placeholder: being written (issue 4)."""


def computeOmega(*args, **kwargs):
    raise NotImplementedError("computeOmega: not implemented yet")
