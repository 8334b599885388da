"""Placeholder: being written (issue 4)."""

DIVERGENCE_SPEC = None
