"""Placeholder: being written (issue 4)."""


def _todo(*args, **kwargs):
    raise NotImplementedError("renormalization: not implemented yet")


computeRenormalizationMatrices = pinv_warp = pinv1x1 = pinv2x2_warpBackend = _todo
