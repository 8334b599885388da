"""The Field registry: identity-keyed torch -> Warp view cache and permanent null fields.

Attached Fields
    `acquireView(t)` caches the zero-copy Warp view of a tensor **on the tensor object
    itself** (attribute ``_wsc_field``), so the cache is keyed by identity, never by storage
    address (an address-keyed cache once shared never-zeroed gradient buffers between unrelated
    calls). The Field holds no reference back to ``t``: its views are built from
    ``t.detach()`` (a distinct object sharing storage), so ``t`` dies by refcount alone and
    takes its views with it. A provenance check (data pointer, shape, strides, dtype,
    device, owner id) rebuilds the views when the tensor's storage was swapped
    (``t.data = …``, ``resize_``) or the attribute was copied onto another object.
    ``clone()`` drops the attribute; ``copy``/``deepcopy`` turn the Field into ``None``;
    pickling (``torch.save``) turns it into an empty ``collections.OrderedDict`` — an inert
    placeholder that ``torch.load(weights_only=True)`` accepts — so a device-pointer holder
    never survives a restart file. Anything that is not a Field under
    ``_wsc_field`` is ignored and overwritten.

    Views are keyed by (role, Warp dtype, requires_grad): a grad view owns a zero gradient
    buffer allocated by torch (on torch's current stream) that lives as long as the tensor;
    a no-grad view has none. Keeping the two apart means toggling ``t.requires_grad``
    never drops a gradient buffer a recorded `wp.Tape` still refers to. Zeroing the buffer
    before a launch ("zero-on-acquire") is the caller's job (`StateAwareWarpFunction`).

    Never cached: non-contiguous tensors and tensors with degenerate strides (a cached view
    of a contiguous copy would go stale after in-place writes to the original), empty
    tensors (replaced by a fresh empty tensor with canonical strides), and everything when
    ``WARPSPHCORE_DISABLE_FIELD_CACHE=1`` (`util.gates`: read once).

Null fields
    `nullField(kind, dim, device, dtype)` returns a permanent, never-differentiable
    standalone Field (it owns its tensor) used as the placeholder of disabled slots. Shapes:
    SCALAR/INT32/INT64/BOOL ``(1,)``, VECTOR ``(1, d)``, MATRIX ``(1, d, d)``, VEC2I
    ``(1, 2)``, VEC3I/VEC3L ``(1, 3)``. Filled with zeros, or with NaN (floats) / INT32_MIN
    (integers; bools stay false) when ``WARPSPHCORE_NULL_FILL=sentinel`` (`util.gates`;
    the registry is keyed by the fill mode) — proving that no disabled slot is read.
    ``tangent=True`` placeholders are always zero.
"""

from __future__ import annotations

import collections
import enum

import torch
import warp as wp

from .conversion import castTorchToWarp, warpDtypeAsBuiltins
from .gates import gate
from .warpContext import ensureWarp

__all__ = [
    "Field",
    "Role",
    "FieldKind",
    "acquireView",
    "nullField",
    "clearNullFieldRegistry",
    "fieldCacheDisabled",
    "nullFillMode",
    "FIELD_ATTR",
]

#: Attribute under which an attached Field lives on the caller's tensor.
FIELD_ATTR = "_wsc_field"

INT32_MIN = -(2**31)


class Role(enum.IntEnum):
    """What a view is used for; views of one tensor are cached per role."""

    PRIMAL = 0
    TANGENT = 1


class FieldKind(enum.IntEnum):
    """Element kind of a null-field placeholder (fixes its Warp dtype and shape)."""

    SCALAR = 0
    VECTOR = 1
    MATRIX = 2
    INT32 = 3
    INT64 = 4
    VEC2I = 5
    VEC3I = 6
    VEC3L = 7
    BOOL = 8


def fieldCacheDisabled() -> bool:
    """Gate ``WARPSPHCORE_DISABLE_FIELD_CACHE`` (`util.gates`: read once)."""
    return gate("WARPSPHCORE_DISABLE_FIELD_CACHE") == "1"


def nullFillMode() -> str:
    """Gate ``WARPSPHCORE_NULL_FILL`` (`util.gates`): "zeros" (default) or "sentinel"."""
    mode = gate("WARPSPHCORE_NULL_FILL").strip().lower()
    if mode not in ("zeros", "sentinel"):
        raise ValueError(
            f"WARPSPHCORE_NULL_FILL={mode!r} is not supported; accepted: zeros, sentinel"
        )
    return mode


def _inertPickle():
    # torch.load(weights_only=True) accepts collections.OrderedDict; None has no picklable
    # constructor that the weights-only unpickler allows.
    return collections.OrderedDict()


class Field:
    """A cached torch -> Warp view with provenance (module docstring).

    Slots: ``views`` (dict (role, Warp dtype, requires_grad) -> wp.array), ``_ptr``,
    ``_shape``, ``_strides``, ``_dtype``, ``_device`` (provenance of the viewed tensor),
    ``_owner`` (the owned tensor of a standalone Field, None when attached), ``_ownerId``
    (``id`` of the tensor an attached Field was created for — an int, not a reference).
    """

    __slots__ = ("views", "_ptr", "_shape", "_strides", "_dtype", "_device", "_owner",
                 "_ownerId")

    def __init__(self, t: torch.Tensor, owner: torch.Tensor | None = None):
        self.views = {}
        self._ptr = t.data_ptr()
        self._shape = tuple(t.shape)
        self._strides = tuple(t.stride())
        self._dtype = t.dtype
        self._device = t.device
        self._owner = owner
        self._ownerId = id(t) if owner is None else None

    def matches(self, t: torch.Tensor) -> bool:
        """Provenance check: does this Field still describe tensor object `t`?"""
        return (
            self._ownerId == id(t)
            and self._ptr == t.data_ptr()
            and self._shape == tuple(t.shape)
            and self._strides == tuple(t.stride())
            and self._dtype == t.dtype
            and self._device == t.device
        )

    @property
    def array(self) -> wp.array:
        """The permanent primal view of a standalone (null) Field."""
        return self.views[(Role.PRIMAL, None, False)]

    @property
    def tensor(self) -> torch.Tensor | None:
        """The owned tensor of a standalone Field (None for attached Fields)."""
        return self._owner

    @property
    def shape(self) -> tuple:
        return self._shape

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    # A device-pointer holder must never survive copies or restart files.
    def __copy__(self):
        return None

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return (collections.OrderedDict, ())

    def __repr__(self) -> str:
        kind = "standalone" if self._owner is not None else "attached"
        return (f"Field({kind}, shape={self._shape}, dtype={self._dtype}, "
                f"device={self._device}, views={len(self.views)})")


def _canonicalStrides(shape) -> tuple:
    strides = []
    s = 1
    for n in reversed(shape):
        strides.append(s)
        s *= int(n)
    return tuple(reversed(strides))


def _cacheable(t: torch.Tensor) -> bool:
    return t.numel() > 0 and tuple(t.stride()) == _canonicalStrides(t.shape)


def _freshView(t: torch.Tensor, dtype, requires_grad: bool) -> wp.array:
    if dtype is None:
        dtype = warpDtypeAsBuiltins(t)
    return castTorchToWarp(t, dtype, requires_grad=requires_grad)


def acquireView(t: torch.Tensor, role: Role = Role.PRIMAL, dtype=None, *,
                requires_grad: bool = False) -> wp.array:
    """The Warp view of `t`, cached on the tensor object when allowed (module docstring).

    Args:
        t: the tensor (the caller's object itself — never ``t.detach()``, which is a new
            object every call and would never hit the cache).
        role: `Role` of the view (views are cached per role).
        dtype: Warp dtype of the view; None selects `castTorchToWarpAsBuiltins`'s mapping.
        requires_grad: return the view that owns a gradient buffer (float tensors only).
            The buffer is NOT zeroed here.

    In-place torch writes to ``t`` stay visible through a cached view.
    """
    requires_grad = bool(requires_grad) and t.is_floating_point()
    if fieldCacheDisabled() or not _cacheable(t):
        return _freshView(t, dtype, requires_grad)
    key = (role, dtype, requires_grad)
    f = getattr(t, FIELD_ATTR, None)
    if isinstance(f, Field) and f.matches(t):
        view = f.views.get(key)
        if view is not None:
            return view
    else:
        f = Field(t)
        try:
            setattr(t, FIELD_ATTR, f)
        except (AttributeError, TypeError, RuntimeError):
            # tensor subclasses that refuse attributes are simply not cached
            return _freshView(t, dtype, requires_grad)
    view = _freshView(t, dtype, requires_grad)
    f.views[key] = view
    return view


# --------------------------------------------------------------------------- null fields

_NULL_FIELDS: dict = {}

_INT_KINDS = {
    FieldKind.INT32: (torch.int32, None, (1,)),
    FieldKind.INT64: (torch.int64, None, (1,)),
    FieldKind.BOOL: (torch.bool, None, (1,)),
    FieldKind.VEC2I: (torch.int32, wp.vec2i, (1, 2)),
    FieldKind.VEC3I: (torch.int32, wp.vec3i, (1, 3)),
    FieldKind.VEC3L: (torch.int64, wp.vec3l, (1, 3)),
}


def _normDevice(device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def nullField(kind: FieldKind, dim: int, device, dtype: torch.dtype | None = None, *,
              tangent: bool = False) -> Field:
    """Permanent never-differentiable placeholder Field for a disabled slot.

    Args:
        kind: `FieldKind` of the slot.
        dim: spatial dimension d (shapes of VECTOR ``(1, d)`` and MATRIX ``(1, d, d)``).
        device: torch device (or string) of the call.
        dtype: float dtype of SCALAR/VECTOR/MATRIX (default torch.float32); ignored for
            integer and bool kinds.
        tangent: a tangent placeholder (always zero-filled).

    The same Field object is returned for the same (kind, dim, device, dtype, fill mode,
    tangent) for the life of the process (until `clearNullFieldRegistry`). Its view has
    no gradient buffer and is never re-converted.
    """
    ensureWarp()
    kind = FieldKind(kind)
    dim = int(dim)
    dev = _normDevice(device)
    fill = "zeros" if tangent else nullFillMode()
    if kind in _INT_KINDS:
        tdtype, wdtype, shape = _INT_KINDS[kind]
    else:
        tdtype = torch.float32 if dtype is None else dtype
        if tdtype not in (torch.float32, torch.float64):
            raise TypeError(f"nullField: dtype {tdtype} is not supported for {kind.name}; "
                            "accepted: torch.float32, torch.float64")
        if kind is FieldKind.SCALAR:
            shape = (1,)
        elif kind is FieldKind.VECTOR:
            shape = (1, dim)
        else:
            shape = (1, dim, dim)
        wdtype = None
    key = (kind, dim, str(dev), tdtype, fill, bool(tangent))
    f = _NULL_FIELDS.get(key)
    if f is not None:
        return f
    if fill == "sentinel":
        if tdtype.is_floating_point:
            value = float("nan")
        elif tdtype == torch.bool:
            value = False
        else:
            value = INT32_MIN
        t = torch.full(shape, value, dtype=tdtype, device=dev)
    else:
        t = torch.zeros(shape, dtype=tdtype, device=dev)
    f = Field(t, owner=t)
    f.views[(Role.PRIMAL, None, False)] = _freshView(t, wdtype, False)
    _NULL_FIELDS[key] = f
    return f


def clearNullFieldRegistry() -> None:
    """Forget every null field (tests only; live Fields stay valid for their holders)."""
    _NULL_FIELDS.clear()
