"""Independent float64 NumPy references for the Density/Interpolate tests, plus case builders.

Written from `operators.md` and never calling library
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
    CRKState,
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

# --- kinds masking, written from the table ---------------------------
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
    """x_ij [N_q, N_r, d], minimum image on periodic axes."""
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
    """W_ij [N_q, N_r] under the pairwise support rule."""
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
    """rho_i = N sum_j m_j W_ij with kinds masking."""
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
    """f_i = N sum_j f_j V_j W^R_ij; values [N_r, *S] -> [N_q, *S]."""
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
    """Random particles in [lo, hi]^d with supports hMean (1 ± 15 %)."""
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
    neighbourhoods for finite differences); tries successive seeds."""
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
    """(rtol, atol) of the reference comparisons."""
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


def pairKernelGradient(kernel: int, d: int, x, hq, hr, mode: int):
    """grad W_ij [N_q, N_r, d] under the pairwise support rule."""
    nq, nr = x.shape[0], x.shape[1]
    X = x.reshape(-1, d)
    Hi = np.repeat(np.asarray(hq, np.float64), nr)
    Hj = np.tile(np.asarray(hr, np.float64), nq)
    G = kr.pairValue(lambda h: kr.gradW(int(kernel), d, X, h), int(mode), Hi, Hj)
    return np.asarray(G).reshape(nq, nr, d)


def correctedGradientReference(x, W, G, crk=None, renorm=None):
    """(G^R [N_q, N_r, d], W^R [N_q, N_r]): grad W^R_ij = A W B + A (1 + B.x) grad W
    + (1 + B.x) W grad A + A W (grad B x), with (grad B x)_g = sum_c gradB[g, c] x_c, then
    L_i G. crk = (A, B, gradA, gradB) tensors or None."""
    WR = W
    if crk is not None:
        A, B, gA, gB = (_np(t) for t in crk)
        s = 1.0 + np.einsum("ijc,ic->ij", x, B)
        gBx = np.einsum("igc,ijc->ijg", gB, x)
        G = (A[:, None, None] * W[..., None] * B[:, None, :]
             + (A[:, None] * s)[..., None] * G
             + (s * W)[..., None] * gA[:, None, :]
             + (A[:, None] * W)[..., None] * gBx)
        WR = A[:, None] * s * W
    if renorm is not None:
        G = np.einsum("iab,ijb->ija", _np(renorm), G)
    return G, WR


def correctedPairGeometry(query, ref, domain, props, crk=None, renorm=None):
    """(x [N_q, N_r, d], hq, hr, W, G^R, W^R) under the call's support scheme, with CRK then L
    applied to the gradient (`correctedGradientReference`)."""
    lo, hi, per = _domainArrays(domain)
    d = query.positions.shape[1]
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    hq, hr = _np(query.supports), _np(ref.supports)
    W = pairKernel(props.kernel, d, x, hq, hr, props.supportMode)
    G = pairKernelGradient(props.kernel, d, x, hq, hr, props.supportMode)
    G, WR = correctedGradientReference(x, W, G, crk, renorm)
    return x, hq, hr, W, G, WR


def gradientReference(query, domain, props, queryValues, referenceValues=None, reference=None,
                      volumes=None, crk=None, omegas=None, renorm=None, factor=1.0):
    """out_i = N sum_j c_ij (x) G_ij, derivative last.

    crk: (A [N_q], B [N_q, d], gradA [N_q, d], gradB [N_q, d, d]) with gradB[i, k, c] =
    d_k B_c; omegas: reference Omega [N_r] (f_j -> f_j / Omega_j only); renorm: L [N_q, d, d].
    Returns [N_q, *S, d]."""
    ref = query if reference is None else reference
    if referenceValues is None:
        referenceValues = queryValues
    d = query.positions.shape[1]
    nq, nr = query.positions.shape[0], ref.positions.shape[0]
    x, hq, hr, W, G, WR = correctedPairGeometry(query, ref, domain, props, crk, renorm)
    fq = _np(queryValues).reshape(nq, -1)
    fr = _np(referenceValues).reshape(nr, -1)
    if omegas is not None:
        fr = fr / _np(omegas)[:, None]
    scheme = int(props.gradientMode)
    if scheme == 2:
        rq, rr, m = _np(query.densities), _np(ref.densities), _np(ref.masses)
        c = m[None, :, None] * rq[:, None, None] * (fq[:, None, :] / rq[:, None, None] ** 2
                                                    + fr[None, :, :] / rr[None, :, None] ** 2)
    else:
        V = _np(volumes) if volumes is not None else _np(ref.masses) / _np(ref.densities)
        if scheme == 3:
            c = fr[None, :, :] - fq[:, None, :]
        elif scheme == 4:
            c = fr[None, :, :] + fq[:, None, :]
        else:
            c = np.broadcast_to(fr[None, :, :], (nq, nr, fr.shape[1]))
        c = c * V[None, :, None]
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    out = np.einsum("ija,ijg,j->iag", c, G, rm.astype(np.float64))
    out = factor * np.where(qm[:, None, None], out, 0.0)
    return out.reshape((nq,) + tuple(_np(referenceValues).shape[1:]) + (d,))


def covarianceReference(query, domain, props, reference=None, volumes=None, crk=None,
                        renorm=None, factor=1.0):
    """(C [N_q, d, d], n [N_q]) of the renormalization: C_i = N sum_j V_j (x_j - x_i) (x) G_ij
    (rows: position component) and n_i = #{admitted j : W^R_ij > 0}; masked queries 0."""
    ref = query if reference is None else reference
    x, hq, hr, W, G, WR = correctedPairGeometry(query, ref, domain, props, crk, renorm)
    V = _np(volumes) if volumes is not None else _np(ref.masses) / _np(ref.densities)
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    C = np.einsum("ija,ijb,j->iab", -x, G, V * rm)
    C = factor * np.where(qm[:, None, None], C, 0.0)
    n = ((WR > 0) & rm[None, :]).sum(axis=1)
    n = np.where(qm, n, 0).astype(np.int32)
    return C, n


def randomCorrections(nq, nr, d, dtype, device, seed):
    """Well-conditioned random CRK (A, B, gradA, gradB), reference Omegas, L and volumes."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    A = 1.0 + 0.2 * torch.rand(nq, generator=g, dtype=f64)
    B = 0.3 * torch.randn(nq, d, generator=g, dtype=f64)
    gA = 0.3 * torch.randn(nq, d, generator=g, dtype=f64)
    gB = 0.3 * torch.randn(nq, d, d, generator=g, dtype=f64)
    om = 0.8 + 0.4 * torch.rand(nr, generator=g, dtype=f64)
    L = torch.eye(d, dtype=f64) + 0.2 * torch.randn(nq, d, d, generator=g, dtype=f64)
    vol = 0.5 + torch.rand(nr, generator=g, dtype=f64)
    cast = dict(dtype=dtype, device=device)
    return dict(crk=tuple(t.to(**cast) for t in (A, B, gA, gB)), omegas=om.to(**cast),
                L=L.to(**cast), vol=vol.to(**cast))


def randomCorrectionTensors(nq, nr, d, device, seed):
    """(volumes [N_r], Omega [N_r], A, B, gradA, gradB, L): well-conditioned random values."""
    g = torch.Generator().manual_seed(seed)
    vol = 0.05 + 0.1 * torch.rand(nr, generator=g, dtype=torch.float64)
    om = 0.8 + 0.4 * torch.rand(nr, generator=g, dtype=torch.float64)
    A = 1.0 + 0.2 * torch.rand(nq, generator=g, dtype=torch.float64)
    B = 0.3 * torch.randn(nq, d, generator=g, dtype=torch.float64)
    gA = 0.3 * torch.randn(nq, d, generator=g, dtype=torch.float64)
    gB = 0.3 * torch.randn(nq, d, d, generator=g, dtype=torch.float64)
    L = torch.eye(d, dtype=torch.float64) + 0.2 * torch.randn(nq, d, d, generator=g, dtype=torch.float64)
    return [t.to(device) for t in (vol, om, A, B, gA, gB, L)]


def correctionInputs(corr, c):
    """The correction tensors differentiated for the correction set `corr`."""
    vol, om, A, B, gA, gB, L = c
    out = []
    if "volumes" in corr:
        out.append(vol)
    if "gradH" in corr:
        out.append(om)
    if "crk" in corr:
        out += [A, B, gA, gB]
    if "renorm" in corr:
        out.append(L)
    return out


def correctionKwargs(corr, tensors):
    """Keyword arguments of warpOperation for the correction set `corr` (tensors in the
    order of `correctionInputs`)."""
    it = iter(tensors)
    kw = {}
    if "volumes" in corr:
        kw["referenceVolumes"] = next(it)
    if "gradH" in corr:
        kw["gradHState"] = next(it)
    if "crk" in corr:
        kw["crkState"] = CRKState(next(it), next(it), next(it), next(it))
    if "renorm" in corr:
        kw["renormalizationState"] = next(it)
    return kw


# --- Divergence and Curl -------------------------------------


def fieldPairTerms(query, domain, props, queryValues, referenceValues=None, reference=None,
                   volumes=None, crk=None, omegas=None, renorm=None, consistent=False):
    """(c [N_q, N_r, F], G [N_q, N_r, d], qm [N_q], rm [N_r]) of Divergence / Curl.

    c: the Gradient scheme table with f_i / Omega_i and f_j / Omega_j (omegas = (query
    Omega [N_q], reference Omega [N_r])); consistent: V_j -> volumes_j rho_j / rho_i with
    volumes, m_j / rho_i otherwise. G: grad W, CRK (query side), then L_i G."""
    ref = query if reference is None else reference
    if referenceValues is None:
        referenceValues = queryValues
    nq, nr = query.positions.shape[0], ref.positions.shape[0]
    x, hq, hr, W, G, WR = correctedPairGeometry(query, ref, domain, props, crk, renorm)
    fq = _np(queryValues).reshape(nq, -1)
    fr = _np(referenceValues).reshape(nr, -1)
    if omegas is not None:
        fq = fq / _np(omegas[0])[:, None]
        fr = fr / _np(omegas[1])[:, None]
    scheme = int(props.gradientMode)
    if scheme == 2:
        rq, rr, m = _np(query.densities), _np(ref.densities), _np(ref.masses)
        c = m[None, :, None] * rq[:, None, None] * (fq[:, None, :] / rq[:, None, None] ** 2
                                                    + fr[None, :, :] / rr[None, :, None] ** 2)
    else:
        if consistent:
            rq = _np(query.densities)
            if volumes is not None:
                V = _np(volumes)[None, :] * _np(ref.densities)[None, :] / rq[:, None]
            else:
                V = _np(ref.masses)[None, :] / rq[:, None]
        else:
            V0 = _np(volumes) if volumes is not None else _np(ref.masses) / _np(ref.densities)
            V = np.broadcast_to(V0[None, :], (nq, nr))
        if scheme == 3:
            c = fr[None, :, :] - fq[:, None, :]
        elif scheme == 4:
            c = fr[None, :, :] + fq[:, None, :]
        else:
            c = np.broadcast_to(fr[None, :, :], (nq, nr, fr.shape[1]))
        c = c * V[:, :, None]
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    return c, G, qm, rm


def divergenceReference(query, domain, props, queryValues, referenceValues=None,
                        reference=None, volumes=None, crk=None, omegas=None, renorm=None,
                        consistent=False, factor=1.0):
    """Divergence: default contracts the first field axis
    (out[b...] = sum_delta d_delta f[delta, b...]), props.divergenceDotMode the last one."""
    c, G, qm, rm = fieldPairTerms(query, domain, props, queryValues, referenceValues, reference,
                                  volumes, crk, omegas, renorm, consistent)
    nq, nr, F = c.shape
    d = G.shape[-1]
    S = tuple(_np(queryValues).shape[1:])
    full = S if S else (1,)
    c = c.reshape((nq, nr) + full)
    if props.divergenceDotMode:
        out = np.einsum("ij...g,ijg,j->i...", c, G, rm.astype(np.float64))
    else:
        out = np.einsum("ijg...,ijg,j->i...", c, G, rm.astype(np.float64))
    assert full[0 if not props.divergenceDotMode else -1] == d
    qmask = qm.reshape((nq,) + (1,) * (out.ndim - 1))
    return factor * np.where(qmask, out, 0.0)


_LEVI_CIVITA = np.zeros((3, 3, 3))
for _a, _b, _c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _LEVI_CIVITA[_a, _b, _c] = 1.0
    _LEVI_CIVITA[_a, _c, _b] = -1.0


def curlReference(query, domain, props, queryValues, referenceValues=None, reference=None,
                  volumes=None, crk=None, omegas=None, renorm=None, factor=1.0):
    """Curl: 3D out[a, s...] = sum_j eps_abc G_b c[c, s...]; 2D
    out[s...] = sum_j (G_x c[1, s...] - G_y c[0, s...]) ([N, 1] for a vector); 1D zeros."""
    nq = query.positions.shape[0]
    d = query.positions.shape[1]
    if d == 1:
        return np.zeros(nq)
    c, G, qm, rm = fieldPairTerms(query, domain, props, queryValues, referenceValues, reference,
                                  volumes, crk, omegas, renorm)
    nr = c.shape[1]
    S = tuple(_np(queryValues).shape[1:])
    c = c.reshape((nq, nr) + S)
    w = rm.astype(np.float64)
    if d == 2:
        out = (np.einsum("ij...,ij,j->i...", c[:, :, 1], G[..., 0], w)
               - np.einsum("ij...,ij,j->i...", c[:, :, 0], G[..., 1], w))
        if len(S) == 1:
            out = out[:, None]
    else:
        out = np.einsum("abc,ijb,ijc...,j->ia...", _LEVI_CIVITA, G, c, w)
    qmask = qm.reshape((nq,) + (1,) * (out.ndim - 1))
    return factor * np.where(qmask, out, 0.0)


def laplacianReference(query, domain, props, queryValues, referenceValues=None, reference=None,
                       volumes=None, crk=None, omegas=None, renorm=None, factor=1.0, eps=1e-15):
    """lap f_i = N sum_j term_ij: q_ij = (f_j - f_i) V_j, or
    (f_j - f_i) m_j rho_i / rho_j^2 (Symmetric), f / Omega on both sides under grad-h; terms
    Naive q_ij lap W_ij (helper support rule), Brookshaw / Default -2 q_ij (G.n)/(r + c h_ij),
    Dot (G.n)/(r + 1e-8 h_ij) [q_ij - (d+2)(q_ij.n) n] blockwise over d-blocks (r > 0 only);
    positiveDivergence keeps pairs with x_ij . q_ij >= 0. The caller passes crk / renorm only
    where they apply (never for Naive). omegas: (query [N_q], reference [N_r]). eps: the
    kernel Laplacian's precision. Returns [N_q, *S]."""
    ref = query if reference is None else reference
    if referenceValues is None:
        referenceValues = queryValues
    lo, hi, per = _domainArrays(domain)
    d = query.positions.shape[1]
    nq, nr = query.positions.shape[0], ref.positions.shape[0]
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    r = np.linalg.norm(x, axis=-1)
    hq, hr = _np(query.supports), _np(ref.supports)
    fq = _np(queryValues).reshape(nq, -1)
    fr = _np(referenceValues).reshape(nr, -1)
    F = fq.shape[1]
    if omegas is not None:
        fq = fq / _np(omegas[0])[:, None]
        fr = fr / _np(omegas[1])[:, None]
    if int(props.gradientMode) == 2:
        rq, rr, m = _np(query.densities), _np(ref.densities), _np(ref.masses)
        scale = m[None, :] * rq[:, None] / rr[None, :] ** 2
    else:
        V = _np(volumes) if volumes is not None else _np(ref.masses) / _np(ref.densities)
        scale = np.broadcast_to(V[None, :], (nq, nr))
    qd = (fr[None, :, :] - fq[:, None, :]) * scale[..., None]
    scheme = int(props.laplacianMode)
    mode = int(props.supportMode)
    if scheme == 1:
        X = x.reshape(-1, d)
        Hi, Hj = np.repeat(hq, nr), np.tile(hr, nq)
        lapW = kr.pairHelper(lambda h: kr.laplacian(int(props.kernel), d, X, h, eps)[0], mode,
                             Hi, Hj).reshape(nq, nr)
        term = qd * lapW[..., None]
    else:
        W = pairKernel(props.kernel, d, x, hq, hr, mode)
        G = pairKernelGradient(props.kernel, d, x, hq, hr, mode)
        G, WR = correctedGradientReference(x, W, G, crk, renorm)
        hij = kr.pairSupport(mode, hq[:, None] + 0 * hr[None, :], hr[None, :] + 0 * hq[:, None])
        D = r + 1e-8 * hij
        n = x / D[..., None]
        Gn = np.einsum("ijc,ijc->ij", G, n)
        if scheme == 3:
            qb = qd.reshape(nq, nr, F // d, d)
            proj = np.einsum("ijpc,ijc->ijp", qb, n)
            term = ((Gn / D)[..., None, None]
                    * (qb - (d + 2) * proj[..., None] * n[:, :, None, :])).reshape(nq, nr, F)
        elif scheme == 4:
            term = -2.0 * qd * (Gn / (r + 1e-12 * hij))[..., None]
        else:
            term = -2.0 * qd * (Gn / D)[..., None]
        term = np.where((r > 0)[..., None], term, 0.0)
    if props.positiveDivergence:
        keep = np.einsum("ijc,ijc->ij", x, qd) >= 0.0
        term = term * keep[..., None]
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    out = np.einsum("ijk,j->ik", term, rm.astype(np.float64))
    out = factor * np.where(qm[:, None], out, 0.0)
    return out.reshape((nq,) + tuple(_np(queryValues).shape[1:]))


# --- renormalization and grad-h references -------------------


def renormalizationReference(C, n):
    """(C', L, eigVals) of the consistent Laplacian from C [N, d, d] and counts n [N] (float64 NumPy):
    rows with n < d + 2 -> identity; 1D 1/C above 1e-10; 2D eigen-reconstruction of the
    symmetrised C with each eigenvalue inverted on its own test (big > 1e-12, small >
    1e-6 big), eigVals (big, small) by magnitude; 3D np.linalg.pinv with rcond 1e-6 on the
    unsymmetrised C, eigVals of the symmetric part by decreasing magnitude."""
    C = np.array(C, dtype=np.float64)
    N, d = C.shape[0], C.shape[1]
    low = np.asarray(n) < d + 2
    C[low] = np.eye(d)
    L = np.zeros_like(C)
    ev = np.zeros((N, d))
    for i in range(N):
        if d == 1:
            c = C[i, 0, 0]
            L[i, 0, 0] = 1.0 / c if c > 1e-10 else 0.0
            ev[i, 0] = c
            continue
        S = 0.5 * (C[i] + C[i].T)
        w, v = np.linalg.eigh(S)
        order = np.argsort(-np.abs(w), kind="stable")
        w, v = w[order], v[:, order]
        ev[i] = w
        if d == 2:
            keep = [abs(w[0]) > 1e-12, abs(w[1]) > 1e-6 * abs(w[0])]
            L[i] = sum((1.0 / w[k]) * np.outer(v[:, k], v[:, k]) for k in range(2) if keep[k])
        else:
            L[i] = np.linalg.pinv(C[i], rcond=1e-6)
    return C, L, ev


def omegaReference(query, domain, props, reference=None, factor=1.0):
    """Omega_i = 1 + h_i / (d rho_i) N sum_j m_j dW(x_ij, h_i)/dh_i (query support h_i,
    any support scheme), kinds masking (masked query -> 1)."""
    ref = query if reference is None else reference
    lo, hi, per = _domainArrays(domain)
    d = query.positions.shape[1]
    x = pairVectors(_np(query.positions), _np(ref.positions), lo, hi, per)
    nq, nr = x.shape[0], x.shape[1]
    hq = _np(query.supports)
    dW = np.asarray(kr.dWdh(int(props.kernel), d, x.reshape(-1, d), np.repeat(hq, nr)))
    dW = dW.reshape(nq, nr)
    qm, rm = masks(props.operationMode, query.kinds.cpu().numpy(), ref.kinds.cpu().numpy())
    s = factor * (dW * rm[None, :]) @ _np(ref.masses)
    om = 1.0 + hq / (d * _np(query.densities)) * s
    return np.where(qm, om, 1.0)


def reverseRoute(out):
    """The route of the bridged call under `out` (its graph node's ``reverse_route``: the
    hand-written reverse kernel's name, or None for the tape), through any reshape."""
    fn = out.grad_fn
    while fn is not None and not hasattr(fn, "reverse_route"):
        fn = fn.next_functions[0][0]
    return fn.reverse_route


def momentumTestField(n, d, seed, dtype=torch.float64):
    """A Momentum field ``[n, 4 + 2 d]`` (p, rho, V, mu, u, u~) of random values with positive
    densities, volumes and viscosities."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    cols = [r(n, 1) - 0.5, 0.8 + 0.4 * r(n, 1), 0.5 + r(n, 1), 0.1 + 0.2 * r(n, 1),
            r(n, d) - 0.5, r(n, d) - 0.5]
    return torch.cat(cols, dim=1).to(dtype)
