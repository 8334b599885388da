"""Persistent Warp struct instances for the no-grad path.

Building a Warp struct (and assigning its array fields, each a dtype check plus a ctype
rebuild) costs tens of microseconds per launch. On the **no-grad path only**, `build_fn`
may refresh one persistent instance per (struct class, call signature) in place instead:
an array field is reassigned only when the incoming array object differs from the previous
call's (identity compare), scalar and nested-struct fields are always rewritten.

Why never under a tape: ``wp.Tape`` does not snapshot a struct's field values at launch; it
keeps a live reference to the instance and re-reads its fields at ``tape.backward()``.
Reusing (mutating) an instance between a grad-requiring launch and its backward routes the
first call's gradient into the second call's arrays. Deferring backward past a later
forward is ordinary torch usage, so grad-requiring launches always get fresh call-local
structs; `StateAwareWarpFunction` passes ``use_bundle=True`` only when nothing requires
grad. ``WARPSPHCORE_DISABLE_BUNDLE=1`` (`util.gates`: read once) disables reuse as a
measurement hatch, not a correctness one.

Typical `build_fn` code::

    q = makeStruct(particleDataSoA_2_f32, {"positions": wa[0], ...},
                   use_bundle=use_bundle, key=("query", 2, torch.float32))

or, holding one bundle per (d, dtype)::

    bundle = stateBundleFor((d, dtype))
    s = bundle.struct(domainData, "domain")   # the reusable instance
    bundle.refresh(s, domainMin=wa[33], domainMax=wa[34], periodicity=wa[35], dim=d)
"""

from __future__ import annotations

import warp as wp

from .gates import gate

__all__ = [
    "StateBundle",
    "stateBundleFor",
    "makeStruct",
    "bundleDisabled",
    "clearStateBundles",
]


def bundleDisabled() -> bool:
    """Gate ``WARPSPHCORE_DISABLE_BUNDLE`` (`util.gates`: read once)."""
    return gate("WARPSPHCORE_DISABLE_BUNDLE") == "1"


class StateBundle:
    """Persistent struct instances keyed by (struct class, key), refreshed in place.

    Use only for launches that are not recorded on a `wp.Tape` (module docstring).
    """

    __slots__ = ("_structs", "hits", "misses")

    def __init__(self):
        self._structs = {}
        self.hits = 0
        self.misses = 0

    def struct(self, structClass, key=None):
        """The reusable instance of `structClass` for `key` (created on first use)."""
        k = (structClass, key)
        inst = self._structs.get(k)
        if inst is None:
            inst = structClass()
            self._structs[k] = inst
            self.misses += 1
        else:
            self.hits += 1
        return inst

    @staticmethod
    def refresh(inst, **fields):
        """Overwrite `fields` of a struct instance: arrays only when the object differs."""
        for name, value in fields.items():
            if isinstance(value, wp.array) or value is None:
                if getattr(inst, name) is value:
                    continue
            setattr(inst, name, value)
        return inst

    def __len__(self) -> int:
        return len(self._structs)

    def clear(self) -> None:
        self._structs.clear()


_BUNDLES: dict = {}


def stateBundleFor(key) -> StateBundle:
    """The process-wide bundle for `key` (e.g. ``(d, dtype)``)."""
    b = _BUNDLES.get(key)
    if b is None:
        b = StateBundle()
        _BUNDLES[key] = b
    return b


def makeStruct(structClass, fields: dict, *, use_bundle: bool = False, key=None):
    """A `structClass` instance holding `fields`: fresh, or the bundled one refreshed in place.

    ``use_bundle`` must be False for any launch recorded on a tape (the tape re-reads the
    struct's fields at backward; module docstring); with
    ``WARPSPHCORE_DISABLE_BUNDLE=1`` a fresh instance is returned regardless.
    """
    if use_bundle and not bundleDisabled():
        inst = stateBundleFor(key).struct(structClass, key)
        return StateBundle.refresh(inst, **fields)
    inst = structClass()
    for name, value in fields.items():
        setattr(inst, name, value)
    return inst


def clearStateBundles() -> None:
    """Drop every persistent bundle (tests only)."""
    _BUNDLES.clear()
