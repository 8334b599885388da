"""The independent NumPy references and case builders of the operator tests
(`tests/operations/sph_reference.py`) for the fluids tests, loaded once by path (the two
test folders are separate rootless packages)."""

from __future__ import annotations

import importlib.util
import pathlib

_PATH = pathlib.Path(__file__).resolve().parents[1] / "operations" / "sph_reference.py"
_spec = importlib.util.spec_from_file_location("fluids_sph_reference", _PATH)
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)
