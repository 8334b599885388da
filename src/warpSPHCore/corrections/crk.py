"""Placeholder: being written (issue 4)."""


def computeCRKFactors(*args, **kwargs):
    raise NotImplementedError("computeCRKFactors: not implemented yet")
