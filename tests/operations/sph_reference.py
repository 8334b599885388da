"""Independent float64 NumPy references for the Density/Interpolate tests, plus case builders.

Written from `operators.md` (§2.0–2.2, §4.1, §4.3, §6, §8.2) and never calling library
maths: brute force over every (query, reference) pair, with the minimum image on periodic
axes, the pairwise support rule, kinds masking, apparent volumes and the CRK-corrected kernel.
The single-support kernel values come from the kernel tests' independent NumPy reference
(`tests/kernels/kernel_reference.py`, itself written from `kernels.md` only).
"""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import torch

from warpSPHCore import (
    DomainDescription,
    KernelFunctions,
    OperationProperties,
    ParticleState,
    SupportScheme,
    WarpOperation,
    buildCompactHashMap,
    getNextPrime,
    radiusSearchCompactHashMap,
)

_KR_PATH = pathlib.Path(__file__).resolve().parents[1] / "kernels" / "kernel_reference.py"
_spec = importlib.util.spec_from_file_location("ops_kernel_reference", _KR_PATH)
kr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kr)

# --- kinds masking (operators.md §6), written from the table ---------------------------
_ANY, _NOT_GHOST = "any", "not ghost"
MODE_TABLE = {
    0: (None, None),
    1: (0, 0),
    2: (1, 0),
    3: (0, 1),
    4: (1, 1),
    5: (2, 0),
    6: (0, 2),
    7: (2, 1),
    8: (1, 2),
    9: (_ANY, _NOT_GHOST),
    10: (2, _NOT_GHOST),
    11: (0, _NOT_GHOST),
    12: (1, _NOT_GHOST),
    13: (_NOT_GHOST, 0),
    14: (_NOT_GHOST, 1),
}


def _allowed(rule, kinds):
    kinds = np.asarray(kinds)
    if rule is None or rule == _ANY:
        return np.ones(kinds.shape, dtype=bool)
    if rule == _NOT_GHOST:
        return kinds != 2
    return kinds == rule


def masks(mode: int, qKinds, rKinds):
    """(query mask [N_q], reference mask [N_r]) of `operationMode` `mode`."""
    qr, rr = MODE_TABLE[int(mode)]
    return _allowed(qr, qKinds), _allowed(rr, rKinds)


# --- geometry and kernels --------------------------------------------------------------


def pairVectors(qPos, rPos, lo, hi, periodic):
    """x_ij [N_q, N_r, d], minimum image on periodic axes (operators.md §8.2)."""
    qPos, rPos = np.asarray(qPos, np.float64), np.asarray(rPos, np.float64)
    x = qPos[:, None, :] - rPos[None, :, :]
    for k, per in enumerate(periodic):
        if per:
            L = hi[k] - lo[k]
            pi = qPos[:, k] - L * np.floor((qPos[:, k] - lo[k]) / L)
            pj = rPos[:, k] - L * np.floor((rPos[:, k] - lo[k]) / L)
            dd = pi[:, None] - pj[None, :]
            x[:, :, k] = (dd + L / 2) - L * np.floor((dd + L / 2) / L) - L / 2
    return x


def pairKernel(kernel: int, d: int, x, hq, hr, mode: int):
    """W_ij [N_q, N_r] under the pairwise support rule (kernels.md §6)."""
    nq, nr = x.shape[0], x.shape[1]
    X = x.reshape(-1, d)
    Hi = np.repeat(np.asarray(hq, np.float64), nr)
    Hj = np.tile(np.asarray(hr, np.float64), nq)
    W = kr.pairValue(lambda h: kr.W(int(kernel), d, X, h), int(mode), Hi, Hj)
    return np.asarray(W).reshape(nq, nr)


def _np(t):
    return None if t is None else t.detach().cpu().to(torch.float64).numpy()


def _domainArrays(domain):
    return _np(domain.min), _np(domain.max), [bool(p) for p in domain.periodic.cpu().tolist()]


def densityReference(query, domain, props, reference=None, factor=1.0):
    """rho_i = N sum_j m_j W_ij with kinds masking (operators.md §2.1)."""
    ref = query if reference is None else reference
    lo, hi, per = _domainArrays(domain)
    d = query.positions.shape[1]
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    W = pairKernel(props.kernel, d, x, _np(query.supports), _np(ref.supports), props.supportMode)
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    rho = (W * rm[None, :]) @ _np(ref.masses)
    return factor * np.where(qm, rho, 0.0)


def interpolateReference(query, domain, props, values, reference=None, volumes=None, crk=None,
                         factor=1.0):
    """f_i = N sum_j f_j V_j W^R_ij (operators.md §2.2); values [N_r, *S] -> [N_q, *S]."""
    ref = query if reference is None else reference
    lo, hi, per = _domainArrays(domain)
    d = query.positions.shape[1]
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    W = pairKernel(props.kernel, d, x, _np(query.supports), _np(ref.supports), props.supportMode)
    if crk is not None:
        A, B = _np(crk[0]), _np(crk[1])
        W = A[:, None] * (1.0 + np.einsum("ijc,ic->ij", x, B)) * W
    V = _np(volumes) if volumes is not None else _np(ref.masses) / _np(ref.densities)
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    f = _np(values)
    nr = f.shape[0]
    F = f.reshape(nr, -1)
    out = (W * (V * rm)[None, :]) @ F
    out = factor * np.where(qm[:, None], out, 0.0)
    return out.reshape((query.positions.shape[0],) + tuple(f.shape[1:]))


# --- case builders ---------------------------------------------------------------------

TRAVERSALS = ("csr", "grid", "none")


def makeDomain(d, dtype, device, lo=-1.0, hi=1.0, periodic=False):
    per = [periodic] * d if isinstance(periodic, bool) else list(periodic)
    return DomainDescription(torch.full((d,), lo, dtype=dtype, device=device),
                             torch.full((d,), hi, dtype=dtype, device=device), per)


def cloud(n, d, dtype, device, seed, lo=-1.0, hi=1.0, hMean=None, kinds=None, densities=True):
    """Random particles in [lo, hi]^d with supports hMean (1 ± 15 %) (testing.md §2)."""
    gen = torch.Generator().manual_seed(seed)
    if hMean is None:
        hMean = {1: 0.6, 2: 0.7, 3: 0.9}[d] * (hi - lo) / 2
    pos = lo + (hi - lo) * torch.rand(n, d, generator=gen, dtype=torch.float64)
    h = hMean * (1.0 + 0.3 * (torch.rand(n, generator=gen, dtype=torch.float64) - 0.5))
    m = 0.5 + torch.rand(n, generator=gen, dtype=torch.float64)
    rho = 0.8 + 0.4 * torch.rand(n, generator=gen, dtype=torch.float64)
    if kinds is None:
        k = torch.zeros(n, dtype=torch.int32)
    else:
        k = torch.as_tensor(kinds, dtype=torch.int32)
    cast = dict(dtype=dtype, device=device)
    return ParticleState(pos.to(**cast), h.to(**cast), m.to(**cast), k.to(device),
                         rho.to(**cast) if densities else None)


def supportMargin(query, domain, reference=None):
    """min over pairs of |r_ij - t| / h_i for every threshold t a scheme can use."""
    ref = query if reference is None else reference
    lo, hi, per = _domainArrays(domain)
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    r = np.linalg.norm(x, axis=-1)
    hq, hr = _np(query.supports)[:, None], _np(ref.supports)[None, :]
    ts = [hq + 0 * hr, hr + 0 * hq, (hq + hr) / 2, np.maximum(hq, hr)]
    return min(float(np.min(np.abs(r - t) / np.minimum(hq, hr))) for t in ts)


def marginCloud(n, d, dtype, device, seed, margin=1e-3, **kw):
    """A `cloud` whose pairs all keep `margin` h from every support threshold (frozen
    neighbourhoods for finite differences, testing.md §1); tries successive seeds."""
    dom = kw.pop("domain")
    for s in range(seed, seed + 200):
        p = cloud(n, d, dtype, device, s, **kw)
        if supportMargin(p, dom) > margin:
            return p
    raise AssertionError("no cloud with the requested support margin")


def neighbourStructure(kind, query, domain, reference=None):
    """A frozen neighbour structure from detached positions: CSR (SuperSymmetric search, so
    every scheme's pairs are present), a prebuilt CompactHashMap, or None."""
    if kind == "none":
        return None
    ref = query if reference is None else reference
    det = ParticleState(query.positions.detach(), query.supports.detach(),
                        query.masses.detach(), query.kinds)
    rdet = None if reference is None else ParticleState(
        ref.positions.detach(), ref.supports.detach(), ref.masses.detach(), ref.kinds)
    if kind == "csr":
        return radiusSearchCompactHashMap(det, domain, mode=SupportScheme.SuperSymmetric,
                                          referenceParticles=rdet)
    if kind == "grid":
        return buildCompactHashMap(det.positions, ref.positions.detach(), det.supports,
                                   ref.supports.detach(), domain.periodic, domain,
                                   mode=SupportScheme.SuperSymmetric,
                                   hashMapLength=getNextPrime(ref.positions.shape[0]))
    raise ValueError(kind)


def props(op=WarpOperation.Density, kernel=KernelFunctions.Wendland2, **kw):
    return OperationProperties(kernel, operation=op, **kw)


def tolerances(dtype, scale):
    """(rtol, atol) of testing.md §8."""
    if dtype == torch.float32:
        return 1e-5, 1e-6 * scale
    return 1e-12, 1e-13 * scale


def marginPair(nq, nr, d, dtype, device, seed, domain, margin=1e-3, cloned=False, **kw):
    """(query, reference) clouds whose cross pairs (and the query's own pairs) keep `margin` h
    from every support threshold; `cloned`: the reference repeats the query coordinates."""
    for s in range(seed, seed + 200):
        q = cloud(nq, d, dtype, device, s, **kw)
        if cloned:
            r = cloud(nq, d, dtype, device, s + 1000, **kw)
            r = ParticleState(q.positions.clone(), r.supports, r.masses, r.kinds, r.densities)
        else:
            r = cloud(nr, d, dtype, device, s + 1000, **kw)
        if supportMargin(q, domain) > margin and supportMargin(q, domain, r) > margin:
            return q, r
    raise AssertionError("no clouds with the requested support margin")


def leaves(*tensors):
    """Detached float64 leaves requiring grad."""
    return [t.detach().clone().requires_grad_() for t in tensors]


GRADCHECK = dict(eps=1e-6, atol=1e-6, rtol=1e-4)
