"""Host-sync census: a diagnostic used by the tests
(`tests/operations/test_no_host_sync.py`, `tests/neighborhood/test_census.py`) and by
`scripts/benchmarks/count_host_syncs.py`.

`Census` patches, for the duration of a ``with`` block, every operation that reads device
memory back to the host or synchronises (the lists below: tensor readbacks, ops with
data-dependent output shapes, synchronising `torch.linalg` routines, Warp synchronisations,
boolean-mask indexing) and counts each call, on any device. Counting is deliberately
device-agnostic so the census runs on CPU. Each hit is attributed to the innermost stack
frame inside the package (``sites``; ``byModule()`` and ``bySite()`` aggregate them). Not
thread-safe: it patches torch and Warp globally.
"""

from __future__ import annotations

import collections
import contextlib
import traceback

import torch
import warp as wp

__all__ = ["Census", "census"]

_TENSOR_METHODS = ["item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__",
                   "__index__", "nonzero"]
_TORCH_FUNCTIONS = ["nonzero", "unique", "unique_consecutive", "masked_select", "bincount"]
_LINALG = ["svd", "svdvals", "pinv", "eig", "eigvals", "eigh", "eigvalsh", "inv", "solve",
           "cholesky", "lstsq", "matrix_rank"]
_WARP_FUNCTIONS = ["synchronize", "synchronize_device", "synchronize_stream",
                   "synchronize_event"]


def _isBoolIndex(index) -> bool:
    if isinstance(index, torch.Tensor):
        return index.dtype == torch.bool
    if isinstance(index, tuple):
        return any(isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in index)
    return False


class Census:
    """Count readbacks/synchronisations. ``hits`` maps a name to its call count; ``sites``
    keeps the innermost warpSPHCore frame of each hit (for diagnostics)."""

    def __init__(self):
        self.hits = collections.Counter()
        self.sites = []
        self._active = 0

    @property
    def total(self) -> int:
        return sum(self.hits.values())

    def bySite(self) -> collections.Counter:
        """Hits per ``/module.py:line (function)`` site."""
        return collections.Counter(site for _, site in self.sites)

    def byModule(self) -> dict:
        """Hits per package module (``"neighborhood/flags.py"``), as a plain dict."""
        out = collections.Counter(site.split(":")[0].lstrip("/") for _, site in self.sites)
        return dict(out)

    def _record(self, name):
        if self._active:
            return
        self.hits[name] += 1
        site = "<outside warpSPHCore>"
        for frame in reversed(traceback.extract_stack()[:-2]):
            if ("warpSPHCore" in frame.filename and "tests" not in frame.filename
                    and not frame.filename.endswith("hostSyncCensus.py")):
                site = f"{frame.filename.split('warpSPHCore')[-1]}:{frame.lineno} ({frame.name})"
                break
        self.sites.append((name, site))

    def _wrap(self, name, fn, predicate=None):
        census = self

        def wrapper(*args, **kwargs):
            if predicate is None or predicate(*args, **kwargs):
                census._record(name)
            census._active += 1  # nested calls (e.g. tolist -> item) count once
            try:
                return fn(*args, **kwargs)
            finally:
                census._active -= 1

        return wrapper

    @contextlib.contextmanager
    def patched(self):
        saved = []

        def patch(owner, attr, name, predicate=None):
            if not hasattr(owner, attr):
                return
            original = getattr(owner, attr)
            saved.append((owner, attr, original))
            setattr(owner, attr, self._wrap(name, original, predicate))

        for m in _TENSOR_METHODS:
            patch(torch.Tensor, m, f"Tensor.{m}")
        patch(torch.Tensor, "__getitem__", "Tensor.__getitem__[bool]",
              lambda self_, index: _isBoolIndex(index))
        patch(torch.Tensor, "__setitem__", "Tensor.__setitem__[bool]",
              lambda self_, index, value: _isBoolIndex(index))
        patch(torch.Tensor, "repeat_interleave", "Tensor.repeat_interleave",
              lambda *a, **k: "output_size" not in k)
        patch(torch, "repeat_interleave", "torch.repeat_interleave",
              lambda *a, **k: "output_size" not in k)
        for f in _TORCH_FUNCTIONS:
            patch(torch, f, f"torch.{f}")
        for f in _LINALG:
            patch(torch.linalg, f, f"torch.linalg.{f}")
        patch(torch.cuda, "synchronize", "torch.cuda.synchronize")
        for f in _WARP_FUNCTIONS:
            patch(wp, f, f"wp.{f}")
        patch(wp.array, "numpy", "wp.array.numpy")
        patch(wp.array, "list", "wp.array.list")
        try:
            yield self
        finally:
            for owner, attr, original in reversed(saved):
                setattr(owner, attr, original)


@contextlib.contextmanager
def census():
    """``with census() as c: ...``: count the readbacks of the block (`Census`)."""
    c = Census()
    with c.patched():
        yield c
