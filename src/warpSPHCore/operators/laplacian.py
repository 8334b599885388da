"""Placeholder: being written (issue 4)."""

LAPLACIAN_SPEC = None
