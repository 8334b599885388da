"""warpSPHCore: differentiable SPH building blocks on NVIDIA Warp, bridged into PyTorch."""

__version__ = "0.1.0.dev0"
