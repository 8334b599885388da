"""Internal utilities (precision helpers, Warp initialisation, launch helpers)."""
