"""Forward-only operator kernels specialised on the call's configuration.

`Configuration` is what a call fixes and what changes the pair loop's code: scalar type,
dimension, smoothing kernel, support scheme, interaction mode, traversal (CSR or grid),
calibration and, for the Gradient's forward kernel, the gradient scheme. Each configuration's kernel is generated once (`functools.cache`), with every
one of these values a Python constant resolved by ``wp.static``, and lives in its own Warp
module (``module="unique"``, compiled on first launch and cached by Warp as any module,
without adjoint code: ``enable_backward=False``). The generic kernels of the operator
modules remain for taped launches, JVP kernels and the configurations not covered here.

What the pair loop keeps (the generated code for one configuration):

* the neighbour loop of the traversal (CSR row, or the 3^d stencil of the query's cell with
  one partial sum per cell, as `_traversal.makeNeighborSum`), the int64 index check and the
  error-buffer flag of an out-of-range index;
* the kind test of a reference only when the interaction mode can reject one (every mode
  but `Unmasked`);
* the minimum image ``x_ij - L round(x_ij / L)`` per axis, with ``L`` and ``1 / L`` read
  once per query (0 on a non-periodic axis, so the plain difference is exact there);
* the kernel quantity of `kernels.specialized.pairKernels` (no kernel-id dispatch);
* the operator's own term (Gradient: the scheme coefficient of `fieldCoefficientOf(scheme)`,
  the generic `fieldCoefficient_ij` with the scheme a constant: no scheme branch, and Naive
  never reads f_i; measured at 2D 16384, Naive: forward 1.47x -> about 1.3x the lean kernel).
  The reverse kernel keeps the run-time scheme (its configurations do not multiply by four).

Agreement with the generic kernels: the same per-pair arithmetic except the periodic wrap
(the generic `kernels.geometry.minimumImage` wraps both coordinates into the box first), so
results are bitwise identical without periodic axes and agree to rounding with them
(tests/test_specialized.py asserts both).

Several field columns in one traversal (CPU, CSR list: `Configuration.wide`): the
Interpolate's, Gradient's and Laplacian's forward kernels split their pair term into a
per-pair ``geometry`` and a per-column ``column`` (`_splitRowKernel`); thread (i, 0) of a
row sums every column in register blocks of eight (`_wideRowSum`), the row's other threads
return at once (the launch keeps its N x F threads and ABI), and a one-column call keeps the
per-column loop. With ``Configuration.plain`` (no grad-h or volumes, densities on both sides)
the column code takes the pair coefficients' copies without run-time state tests. Each
column adds its terms in the row's order, so the sums equal the per-column kernels' bit for
bit (tests/operations/test_wide_rows.py).

Covered: Density (every configuration: it reads no correction), Interpolate without CRK,
Gradient without CRK (grad-h
and volumes enter through `fieldCoefficient_ij`; the renormalization ``G_ij <- L_i G_ij`` is
a configuration flag, `Configuration.renormalize`), the Gradient's
hand-written reverse kernel (the same kernel body, compiled per configuration) and the
Gradient's forward-mode (Tier-2) kernel without support tangents (dG_ij = H_ij dx_ij from
the same specialised evaluation as the reverse kernel's H u; the coefficient and its tangent
are `fieldCoefficientJVP_ij`'s, the tangent pack's presence flags stay run-time values), and
the Laplacian's forward kernel for the Brookshaw, Dot, Default and Consistent schemes without CRK and
positiveDivergence, with or without renormalization (the scheme a constant; q_ij is
`laplacianDifference_ij`'s, G_ij the specialised grad W under the support scheme), and the
Momentum's forward kernel (every configuration: it reads no correction; the pair arithmetic
is `momentum.momentumPair`'s, the field read per column without the generic unit-vector
accumulation, G_ij the specialised grad W), the Covariance's kernel without CRK and
renormalization (the renormalization builder's C_i), and the Divergence's and the Curl's
forward kernels without CRK (d = 2, 3 for the Curl; the gradient scheme and the
Divergence's contraction axis constants, the renormalization a flag, the plain coefficient
where the states allow it; grad-h, volumes and the consistent volumes through the
coefficient's run-time tests).

The Gradient's reverse kernel is also specialised on what the backward asks for
(`Configuration.geometryAdjoint`, `Configuration.valuesOnly`: `autograd.reverse` reads
which inputs hold gradient buffers when it records the launch): without a position or
support adjoint the pair's Hessian terms are not evaluated, and with the values' adjoint
alone and plain states the gradient scheme is fixed and no state is tested at run time.
"""

# no `from __future__ import annotations`: the generated Warp functions' annotations name
# closure variables, which Warp evaluates when it parses them

import dataclasses
import functools
from dataclasses import dataclass

import warp as wp

from ..autograd.arg_extract import structFor
from ..kernels.geometry import checkDirectionality_i, checkDirectionality_j
from ..kernels.specialized import SPECIALIZED_KERNELS, pairKernels, specialFunction
from ..kernels.support import computePairwiseSupport
from ..neighborhood.traversal import (
    KIND_GRID_INDEX_W,
    KIND_NEIGHBOR_INDEX_W,
    checkOffset,
    flagError,
    getIndexRange,
    gridQueryCell,
)
from ._coefficients import (
    LAPLACIAN_REG_DEFAULT,
    LAPLACIAN_REG_N,
    apparentVolume_j,
    coefficientOfValuesOf,
    curlAxes,
    curlPairVJP_ij,
    densityPairVJP_ij,
    divergenceCoefficients_ij,
    divergencePairVJP_ij,
    fieldCoefficientJVP_ij,
    fieldCoefficientOf,
    fieldCoefficientValuesVJPOf,
    fieldCoefficientVJP_ij,
    gradientPairVJP_ij,
    interpolatePairVJP_ij,
    laplacianDenominators_ij,
    laplacianDifference_ij,
    laplacianDifferenceOf,
    laplacianDifferenceOfValues,
    laplacianPairVJP_ij,
    plainStates,
    referenceBase,
)
from ._momentumPair import momentumPair, momentumRows
from ._tangents import coefficientTangentPresent, pairTangent_ij

__all__ = ["Configuration", "configurationOf", "neighborSum", "queryAdmitted",
           "specializedKernel", "specializedStructs", "densitySpecialized", "densityVJPSpecialized",
           "densityPairedSpecialized", "gradientSpecialized", "interpolateSpecialized",
           "gradientVJPSpecialized", "gradientJVPSpecialized", "laplacianSpecialized",
           "momentumSpecialized", "covarianceSpecialized", "divergenceSpecialized",
           "divergenceVJPSpecialized", "curlVJPSpecialized", "laplacianVJPSpecialized",
           "curlSpecialized", "gradientDualSpecialized", "gradientDualCovers", "specialCodeCovers",
           "interpolateVJPSpecialized",
           "specializedKernelCount"]

# interaction modes whose query test admits every kind (checkDirectionality_i: Unmasked and
# AllQueriesNonGhostReferences) and whose reference test admits every kind
# (checkDirectionality_j: Unmasked); `enumTypes.interactionKinds` tabulates both tests
_ALL_QUERIES = (0, 9)
_ALL_REFERENCES = (0,)

_SUPPORT_NAMES = {11: "gather", 12: "scatter", 13: "mean", 14: "kmean", 15: "super",
                  16: "partial"}


@dataclass(frozen=True)
class Configuration:
    """What one call fixes (module docstring); hashable, the cache key of its kernels."""

    dim: int
    scalar: type
    kernel: int
    supportMode: int
    operationMode: int
    useAdjacency: bool
    calibrate: bool
    #: `GradientScheme` value of the Gradient's forward kernel; 0 where the kernel does not
    #: depend on it (Density, the Gradient's reverse kernel)
    gradientScheme: int = 0
    #: `LaplacianScheme` value of the Laplacian's forward kernel; 0 elsewhere
    laplacianScheme: int = 0
    #: G_ij <- L_i G_ij (gradient renormalization) in the Gradient's and the Laplacian's
    #: forward kernels
    renormalize: bool = False
    #: one thread per query row computes every field column (`_wideRowKernel`): the
    #: Interpolate's, Gradient's and Laplacian's forward kernels on the CPU with a CSR list
    wide: bool = False
    #: no grad-h terms or volumes, densities on both sides (`_coefficients.plainStates`): the
    #: wide kernels' column code takes the copies of the pair coefficients without run-time
    #: state tests (`fieldCoefficientOf`, `laplacianDifferenceOf`)
    plain: bool = False
    #: the reverse kernel computes the adjoints of the positions and supports (the pair's
    #: Hessian terms); False where the call asks for none of them (d/d values, masses,
    #: densities, volumes only): the Gradient's reverse kernel evaluates grad W alone
    geometryAdjoint: bool = True
    #: the only adjoint asked is the field values' (with `plain` states and the gradient
    #: scheme fixed: `fieldCoefficientValuesVJPOf`)
    valuesOnly: bool = False
    #: the forward-mode kernel's field coefficient can carry a tangent (a value, mass,
    #: density, volume or Omega tangent); False: positions tangents alone, dc_ij = 0, the
    #: coefficient with the scheme fixed (and plain where the states allow it)
    coefficientTangent: bool = True
    #: the Momentum's or the Density's forward kernel on the CPU takes a symmetric
    #: self-list's pairs once, adding the other row's term to its output (`_forwardOnce`)
    pairsOnce: bool = False

    @property
    def tag(self) -> str:
        """Short name used in the generated kernels' names (and so in compile notices)."""
        s = "f32" if self.scalar == wp.float32 else "f64"
        trav = "csr" if self.useAdjacency else "grid"
        cal = "_cal" if self.calibrate else ""
        sm = _SUPPORT_NAMES.get(self.supportMode, str(self.supportMode))
        g = f"_g{self.gradientScheme}" if self.gradientScheme else ""
        g += f"_l{self.laplacianScheme}" if self.laplacianScheme else ""
        g += "_L" if self.renormalize else ""
        g += "_w" if self.wide else ""
        g += "p" if self.plain else ""
        g += "" if self.geometryAdjoint else "_v"
        g += "o" if self.valuesOnly else ""
        g += "" if self.coefficientTangent else "_x"
        g += "_o" if self.pairsOnce else ""
        return f"k{self.kernel}_{sm}_m{self.operationMode}{g}_{trav}{cal}_{self.dim}d_{s}"


def configurationOf(config: dict, scheme: bool = False) -> Configuration | None:
    """The `Configuration` of a call's `build_fn.config` (with its gradient scheme when
    `scheme`), or None when no specialised kernel covers it (an unknown kernel id or support
    scheme: the generic kernel reports it)."""
    if int(config["kernelFunction"]) not in SPECIALIZED_KERNELS:
        return None
    if int(config["supportMode"]) not in _SUPPORT_NAMES:
        return None
    return Configuration(dim=int(config["dim"]), scalar=config["scalar"],
                         kernel=int(config["kernelFunction"]),
                         supportMode=int(config["supportMode"]),
                         operationMode=int(config["operationMode"]),
                         useAdjacency=bool(config["useAdjacency"]),
                         calibrate=bool(config["calibrateNormalization"]),
                         gradientScheme=int(config["gradientMode"]) if scheme else 0)


def _widened(cfg: Configuration, config: dict) -> Configuration:
    """`cfg` with the row-per-thread layout where it pays (`_wideRowKernel`): on the CPU,
    where threads run one after another and a field of F columns would traverse each row F
    times, with a CSR list. On CUDA one thread per (row, column) keeps the device busy."""
    wide = config.get("deviceType") == "cpu" and bool(config["useAdjacency"])
    return dataclasses.replace(cfg, wide=wide, plain=wide and plainStates(config))


#: r_ij <= max(h_i, h_j) (1 + 1e-6): the Momentum's pairs evaluated (every pair term is a
#: compact kernel's quantity; the margin keeps every pair the kernel evaluates)
_BEYOND_SUPPORT = 1.0 + 1.0e-6

_BUILT: set = set()


def specializedKernelCount() -> int:
    """How many specialised kernels this process has generated (tests, docs)."""
    return len(_BUILT)


def _kernel(fn, name: str, cfg: Configuration, module: str = "unique"):
    """`fn` as a forward-only Warp kernel named `name`, in a module of its own (or in the
    Warp module named `module`, shared with the kernels built for it)."""
    fn.__name__ = fn.__qualname__ = f"warpSPHCore_{name}_{cfg.tag}"
    _BUILT.add((name, cfg))
    kernel = wp.kernel(fn, enable_backward=False, module=module)
    # built from `kernels.specialized`, never from the generic kernel functions: the launch
    # need not register their custom adjoints (`autograd.launcher._registerAdjointsFor`)
    kernel.callsKernelFunctions = False
    return kernel


def _structs(cfg: Configuration):
    d, s = cfg.dim, cfg.scalar
    return (structFor("particle", d, s), structFor("domain", d, s),
            structFor("correction", d, s), structFor("kernelState", d, s),
            structFor("adjacency", d, s), structFor("grid", d, s))


@functools.cache
def _boxOf(D: int, S):
    """``box(dom) -> (L, 1/L)`` per axis, 0 on a non-periodic axis: the minimum image
    ``x - L round(x / L)`` of the specialised loops (dimension D, scalar type S)."""
    V = wp.types.vector(length=D, dtype=S)
    DOM = structFor("domain", D, S)

    @specialFunction(f"{D}d_{'f32' if S == wp.float32 else 'f64'}")
    def box(dom: DOM):
        ext = V()
        inv = V()
        for a in range(wp.static(D)):
            if dom.periodicity[a]:
                ext[a] = dom.domainMax[a] - dom.domainMin[a]
                inv[a] = S(1.0) / ext[a]
        return ext, inv

    return box


@functools.cache
def _referenceOf(cfg: Configuration):
    """``reference(j, x_i, ext, inv, r) -> (admitted, x_ij)``: whether the interaction mode
    admits reference j (no test where it admits every kind) and the minimum image
    ``x_ij = x_i - x_j - L round((x_i - x_j) / L)`` (`_boxOf`'s L, 1/L)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P = _structs(cfg)[0]
    mode = cfg.operationMode
    allReferences = mode in _ALL_REFERENCES

    @specialFunction(cfg.tag)
    def reference(j: wp.int32, x_i: V, ext: V, inv: V, r: P):
        admitted = True
        if wp.static(not allReferences):
            admitted = checkDirectionality_j(wp.static(mode), r.kinds[j])
        x_ij = V()
        if admitted:
            x_ij = x_i - r.positions[j]
            for a in range(wp.static(D)):
                x_ij[a] = x_ij[a] - ext[a] * wp.round(x_ij[a] * inv[a])
        return admitted, x_ij

    return reference


@functools.cache
def _neighborSum(pairTerm, cfg: Configuration, vector: bool, extraType, accumulator=None,
                 skip=None, stopRow=None):
    """``rowSum(adj, grid, i, k, F, q, r, dom, corr, ks, extra)``: the sum of
    ``pairTerm(i, j, k, F, x_ij, h_i, q, r, corr, ks, extra)`` over the references j of query
    i that the interaction mode admits, by the configuration's traversal (module docstring).
    The sum is a scalar, a d-vector (`vector`) or a value of the Warp type `accumulator` (the
    Momentum's 2 x d matrix). `skip`, a Warp function ``(i, j, h_i, q, r, extra) -> bool``,
    passes over a list's entries before their reference is read (`_pairOnceSkip`: the pairs
    another row's thread takes); the grid traversal has none to pass over. `stopRow`, a Warp
    function ``(adj, extra) -> bool`` evaluated once per row (`_pairOnceStop`), ends the
    row at its first entry j < i: every later entry is one `skip` would pass over."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    tag = f"{pairTerm.key}"
    if skip is None:
        @specialFunction(tag)
        def skip(i: wp.int32, j: wp.int32, h_i: S, q: P, r: P, extra: extraType):
            return False
    if stopRow is None:
        @specialFunction(tag)
        def stopRow(adj: A, extra: extraType):
            return False

    if accumulator is not None:
        @specialFunction(tag)
        def zero():
            return accumulator()
    elif vector:
        @specialFunction(tag)
        def zero():
            return V()
    else:
        @specialFunction(tag)
        def zero():
            return S(0.0)

    box = _boxOf(D, S)
    reference = _referenceOf(cfg)

    @specialFunction(tag)
    def term(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_i: V, h_i: S, ext: V,
             inv: V, q: P, r: P, corr: C, ks: KS, extra: extraType):
        res = zero()
        admitted, x_ij = reference(j, x_i, ext, inv, r)
        if admitted:
            res = pairTerm(i, j, k, F, x_ij, h_i, q, r, corr, ks, extra)
        return res

    @specialFunction(tag, inline=None)
    def csrSum(adj: A, i: wp.int32, k: wp.int32, F: wp.int32, q: P, r: P, dom: DOM, corr: C,
               ks: KS, extra: extraType):
        rng = getIndexRange(adj, i)
        nR = wp.int64(r.masses.shape[0])
        x_i = q.positions[i]
        h_i = q.supports[i]
        ext, inv = box(dom)
        acc = zero()
        stop = stopRow(adj, extra)
        # the sum is updated on one path only (`continue` past the pairs it skips): a sum
        # chosen after a branch is a select of the whole accumulator, which a compiler keeps
        # in memory when it is wide
        for e in range(rng[0], rng[0] + rng[1]):
            jl = adj.neighborList[e]
            if jl < wp.int64(0) or jl >= nR:
                flagError(adj.errors, adj.site, KIND_NEIGHBOR_INDEX_W, wp.int64(e), jl, i, nR,
                          wp.int64(0))
                continue
            j = wp.int32(jl)
            if stop and j < i:  # the rest of the row is the lower part, other rows' pairs
                break
            if skip(i, j, h_i, q, r, extra):
                continue
            admitted, x_ij = reference(j, x_i, ext, inv, r)
            if not admitted:
                continue
            acc += pairTerm(i, j, k, F, x_ij, h_i, q, r, corr, ks, extra)
        return acc

    @specialFunction(tag, inline=None)
    def gridSum(grid: G, i: wp.int32, k: wp.int32, F: wp.int32, q: P, r: P, dom: DOM,
                corr: C, ks: KS, extra: extraType):
        nR = wp.int64(r.masses.shape[0])
        x_i = q.positions[i]
        h_i = q.supports[i]
        ext, inv = box(dom)
        cell = gridQueryCell(grid, x_i)
        acc = zero()
        for o in range(grid.numOffsets):
            rng = checkOffset(grid, cell, o)
            part = zero()  # one partial sum per cell, as the generic traversal
            for slot in range(rng[0], rng[0] + rng[1]):
                jl = grid.sortIndex[slot]
                if jl >= wp.int64(0) and jl < nR:
                    part += term(i, wp.int32(jl), k, F, x_i, h_i, ext, inv, q, r, corr, ks,
                                 extra)
                else:
                    flagError(grid.errors, grid.site, KIND_GRID_INDEX_W, wp.int64(slot), jl, i,
                              nR, wp.int64(0))
            acc += part
        return acc

    @specialFunction(tag)
    def rowSum(adj: A, grid: G, i: wp.int32, k: wp.int32, F: wp.int32, q: P, r: P, dom: DOM,
               corr: C, ks: KS, extra: extraType):
        res = zero()
        if wp.static(cfg.useAdjacency):
            res = csrSum(adj, i, k, F, q, r, dom, corr, ks, extra)
        else:
            res = gridSum(grid, i, k, F, q, r, dom, corr, ks, extra)
        return res

    return rowSum


#: field columns one pass of `_wideRowSum` keeps in registers
_WIDE_COLUMNS = 8


@functools.cache
def _rowView(S, n: int):
    """``rowView(values, base)``: ``values[base : base + n]`` of a flat array of scalar type S
    re-viewed from its first entry (``wp.array(ptr=..., shape=(n,))``), read at constant
    indices: an indexed Warp read adds a negative-index wrap and a run-time stride, so n reads
    of ``values[base + c]`` are n separate loads the compiler cannot combine. The bridge's
    views are contiguous (`util.conversion.canonical` copies a strided tensor), which this
    relies on."""
    SIZE = wp.types.type_size_in_bytes(S)

    @specialFunction(f"{n}_{'f32' if S == wp.float32 else 'f64'}")
    def rowView(values: wp.array(dtype=S), base: wp.int32):
        return wp.array(ptr=wp.uint64(values.ptr) + wp.uint64(base) * wp.uint64(SIZE),
                        shape=(wp.static(n),), dtype=S)

    return rowView


@functools.cache
def _wideRowSum(geometry, column, cfg: Configuration, extraType, vector: bool,
                columnOfValues=None, queryHalf: bool = True):
    """``wideSum(adj, i, F, q, r, dom, corr, ks, extra, out)``: adds, for every reference j
    of query i's CSR row that the interaction mode admits and every column k < F,
    ``column(i, j, k, F, x_ij, h_i, g_ij, q, r, corr, ks, extra)`` to the query's output row
    (``out[i F + k]``, or the d-vector at ``out[(i F + k) d]`` when `vector`), where
    ``g_ij = geometry(i, j, x_ij, h_i, q, r, corr, ks)`` is evaluated once per pair: the
    smoothing kernel's quantities are shared by the F columns. Each column's terms are added
    in the row's order, as `_neighborSum`'s CSR loop adds them, so the sums are the same.

    With `columnOfValues` (``(i, j, k, x_ij, h_i, g_ij, f_i, f_j, q, r, corr, ks)``, the
    same arithmetic as `column` on the values it would read), a whole block of eight
    columns reads the reference's eight values as one row of its own, ``extra`` re-viewed
    at the row's first value with the indices 0..7 (constants: the compiler then loads them
    together instead of one indexed read each, and no accumulator entry is picked at run
    time, so the block's sums stay in registers), and the query's eight (`queryHalf`:
    ``extra`` holds the query rows first, ``[N_q F | N_r F]``) once per block. The bridge's
    Warp views are contiguous (`util.conversion.canonical` copies a strided tensor), so
    eight adjacent values are eight adjacent entries."""
    D, S = cfg.dim, cfg.scalar
    P, DOM, C, KS, A, G = _structs(cfg)
    box = _boxOf(D, S)
    reference = _referenceOf(cfg)
    W = D if vector else 1
    BLOCK = wp.types.vector(length=_WIDE_COLUMNS, dtype=S)
    rowView = _rowView(S, _WIDE_COLUMNS)

    ACC = wp.types.vector(length=_WIDE_COLUMNS * W, dtype=S)
    ofValues = columnOfValues

    @specialFunction(column.key)
    def rowAt(extra: extraType, start: wp.int32):
        """The eight values from ``extra[start]`` as a vector (`_rowView`)."""
        row = rowView(extra, start)
        v = BLOCK()
        for kk in range(wp.static(_WIDE_COLUMNS)):
            v[kk] = row[kk]
        return v

    @specialFunction(column.key, inline=None)
    def wideSum(adj: A, i: wp.int32, F: wp.int32, q: P, r: P, dom: DOM, corr: C, ks: KS,
                extra: extraType, out: wp.array(dtype=S)):
        rng = getIndexRange(adj, i)
        refStart = wp.int32(0)
        if wp.static(queryHalf):
            refStart = referenceBase(extra, q, F)
        nR = wp.int64(r.masses.shape[0])
        x_i = q.positions[i]
        h_i = q.supports[i]
        ext, inv = box(dom)
        base = i * F * wp.static(W)
        # columns in blocks whose sums stay in registers: nothing is stored inside the loop,
        # so the compiler may share a column-independent read or quotient between columns
        for k0 in range(0, F, wp.static(_WIDE_COLUMNS)):
            acc = ACC()
            full = k0 + wp.static(_WIDE_COLUMNS) <= F
            fi = BLOCK()
            if wp.static(columnOfValues is not None and queryHalf):
                if full:
                    fi = rowAt(extra, i * F + k0)
            for e in range(rng[0], rng[0] + rng[1]):
                jl = adj.neighborList[e]
                if jl >= wp.int64(0) and jl < nR:
                    j = wp.int32(jl)
                    admitted, x_ij = reference(j, x_i, ext, inv, r)
                    if admitted:
                        g = geometry(i, j, x_ij, h_i, q, r, corr, ks)
                        if full:
                            # a whole block: no per-column test (the columns vectorise)
                            if wp.static(columnOfValues is not None):
                                fj = rowAt(extra, refStart + j * F + k0)
                                for kk in range(wp.static(_WIDE_COLUMNS)):
                                    v = ofValues(i, j, k0 + kk, x_ij, h_i, g, fi[kk], fj[kk],
                                                 q, r, corr, ks)
                                    if wp.static(vector):
                                        for delta in range(wp.static(D)):
                                            acc[delta * wp.static(_WIDE_COLUMNS) + kk] += \
                                                v[delta]
                                    else:
                                        acc[kk] += v
                            else:
                                for kk in range(wp.static(_WIDE_COLUMNS)):
                                    v = column(i, j, k0 + kk, F, x_ij, h_i, g, q, r, corr, ks,
                                               extra)
                                    if wp.static(vector):
                                        for delta in range(wp.static(D)):
                                            acc[delta * wp.static(_WIDE_COLUMNS) + kk] += \
                                                v[delta]
                                    else:
                                        acc[kk] += v
                        else:
                            # the last, partial block; the accumulation is written out twice
                            # on purpose: as a shared function it cost the full block 15-20 %
                            # (bench_func.py)
                            for kk in range(F - k0):
                                v = column(i, j, k0 + kk, F, x_ij, h_i, g, q, r, corr, ks,
                                           extra)
                                if wp.static(vector):
                                    for delta in range(wp.static(D)):
                                        acc[delta * wp.static(_WIDE_COLUMNS) + kk] += v[delta]
                                else:
                                    acc[kk] += v
                elif k0 == 0:
                    flagError(adj.errors, adj.site, KIND_NEIGHBOR_INDEX_W, wp.int64(e), jl, i,
                              nR, wp.int64(0))
            for kk in range(wp.static(_WIDE_COLUMNS)):
                k = k0 + kk
                if k < F:
                    for delta in range(wp.static(W)):
                        out[base + k * wp.static(W) + delta] = acc[
                            delta * wp.static(_WIDE_COLUMNS) + kk]

    return wideSum


def _splitRowKernel(name: str, cfg: Configuration, geometry, column, X, vector: bool,
                    module: str = "unique", columnOfValues=None, queryHalf: bool = True):
    """The forward kernel of an operator whose pair term splits into a per-pair part and a
    per-column part, ``column(i, j, k, F, x_ij, h_i, geometry(i, j, x_ij, h_i, q, r, corr,
    ks), q, r, corr, ks, extra)``, with the ABI of `_rowKernel`: one thread per output (row,
    column), or, for a `Configuration.wide`
    configuration, the same launch in which thread (i, 0) computes every column of row i in
    one traversal (`_wideRowSum`) and the other threads of the row return at once."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)

    @specialFunction(name + "_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P,
             r: P, corr: C, ks: KS, extra: X):
        return column(i, j, k, F, x_ij, h_i, geometry(i, j, x_ij, h_i, q, r, corr, ks),
                      q, r, corr, ks, extra)

    if not cfg.wide:
        return _rowKernel(name, cfg, pair, X, vector, module)

    # a one-column field (the common call) keeps the per-column loop: one accumulator
    store = _rowStore(pair, cfg, X, vector)
    wideSum = _wideRowSum(geometry, column, cfg, X, vector, columnOfValues, queryHalf)
    admitted = _queryAdmitted(cfg)
    W = D if vector else 1

    def kernel(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
               adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
               extra: X, fieldWidth: wp.int32, out: wp.array(dtype=S)):
        tid = wp.tid()
        i = tid / fieldWidth
        ok = admitted(queryState.kinds[i])
        if fieldWidth == 1:
            store(tid, i, 0, 1, ok, queryState, referenceState, domainState, adjacencyState,
                  gridState, correctionData, kernelProperties, extra, out)
        elif tid - i * fieldWidth == 0:
            base = i * fieldWidth * wp.static(W)
            n = fieldWidth * wp.static(W)
            for m in range(n):
                out[base + m] = S(0.0)
            if ok:
                wideSum(adjacencyState, i, fieldWidth, queryState, referenceState,
                        domainState, correctionData, kernelProperties, extra, out)
                if wp.static(cfg.calibrate):
                    for m in range(n):
                        out[base + m] = out[base + m] * kernelProperties.normalizationCoefficient

    return _kernel(kernel, name, cfg, module)


@functools.cache
def _rowStore(pair, cfg: Configuration, X, vector: bool):
    """``store(tid, i, a, F, ok, q, r, dom, adj, grid, corr, ks, extra, out)``: the sum of
    `pair` over the references of query i for column a (0 where not `ok`, the query's kind
    test), calibrated, stored at ``out[tid]`` (scalar) or ``out[tid d + delta]`` (`vector`)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    rowSum = _neighborSum(pair, cfg, vector, X)

    @specialFunction(pair.key)
    def store(tid: wp.int32, i: wp.int32, a: wp.int32, F: wp.int32, ok: wp.bool, q: P, r: P,
              dom: DOM, adj: A, grid: G, corr: C, ks: KS, extra: X, out: wp.array(dtype=S)):
        if wp.static(vector):
            val = V()
            if ok:
                val = rowSum(adj, grid, i, a, F, q, r, dom, corr, ks, extra)
                if wp.static(cfg.calibrate):
                    val = val * ks.normalizationCoefficient
            for delta in range(wp.static(D)):
                out[tid * wp.static(D) + delta] = val[delta]
        else:
            sv = S(0.0)
            if ok:
                sv = rowSum(adj, grid, i, a, F, q, r, dom, corr, ks, extra)
                if wp.static(cfg.calibrate):
                    sv = sv * ks.normalizationCoefficient
            out[tid] = sv

    return store


def _rowKernel(name: str, cfg: Configuration, pair, X, vector: bool, module: str = "unique"):
    """A kernel with the Interpolate's, Gradient's and Laplacian's ABI: thread (i, a) sums
    `pair` (a scalar, or a d-vector when `vector`) over the references of query i (CSR or
    grid, by the configuration) and stores it at ``out[i F + a]`` (or the d-vector at
    ``out[(i F + a) d]``); `X` is the type of the argument after the eight states (the
    values, or the tangent pack of the forward-mode kernel)."""
    P, DOM, C, KS, A, G = _structs(cfg)
    S = cfg.scalar
    store = _rowStore(pair, cfg, X, vector)
    admitted = _queryAdmitted(cfg)

    def kernel(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
               adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
               extra: X, fieldWidth: wp.int32, out: wp.array(dtype=S)):
        tid = wp.tid()
        i = tid / fieldWidth
        store(tid, i, tid - i * fieldWidth, fieldWidth, admitted(queryState.kinds[i]),
              queryState, referenceState, domainState, adjacencyState, gridState,
              correctionData, kernelProperties, extra, out)

    return _kernel(kernel, name, cfg, module)


def _rowReverseKernel(name: str, cfg: Configuration, pair, X, perQuery=None,
                      module: str = "unique", skip=None, stopRow=None):
    """A hand-written reverse kernel with one thread per output element: thread tid is
    (i, k) = divmod(tid, n) with n = F outputs per query (or ``perQuery(F)``, a Warp function
    of the field width); it sums the vector `pair` (which scatters the reference side and
    returns the x_i adjoint) over query i's references and adds the sum to the query
    positions' adjoint; nothing for a masked query. `X` is the reverse pack's type; `skip`
    and `stopRow` as `_neighborSum`'s."""
    P, DOM, C, KS, A, G = _structs(cfg)
    rowSum = _neighborSum(pair, cfg, True, X, skip=skip, stopRow=stopRow)
    admitted = _queryAdmitted(cfg)

    def kernel(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
               adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
               cotangents: X, fieldWidth: wp.int32):
        tid = wp.tid()
        n = fieldWidth
        if wp.static(perQuery is not None):
            n = perQuery(fieldWidth)
        i = tid / n
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, tid - i * n, fieldWidth, queryState,
                         referenceState, domainState, correctionData, kernelProperties,
                         cotangents)
            if cotangents.hasQPositions:
                wp.atomic_add(cotangents.qPositions, i, val)

    return _kernel(kernel, name, cfg, module)


@functools.cache
def _divergenceRows(D: int):
    """Outputs per query of the Divergence: F / d."""
    @specialFunction(f"divergenceRows_{D}d")
    def rows(F: wp.int32):
        return F / wp.static(D)
    return rows


@functools.cache
def _curlRows(D: int):
    """Outputs per query of the Curl: F in 3D, F / 2 (the z component) in 2D."""
    @specialFunction(f"curlRows_{D}d")
    def rows(F: wp.int32):
        n = F
        if wp.static(D == 2):
            n = F / 2
        return n
    return rows


def _queryAdmitted(cfg: Configuration):
    mode = cfg.operationMode

    @specialFunction(f"m{mode}")
    def admitted(kind: wp.int32):
        ok = True
        if wp.static(mode not in _ALL_QUERIES):
            ok = checkDirectionality_i(wp.static(mode), kind)
        return ok

    return admitted


def _forwardOnce(config: dict, cfg: Configuration | None) -> Configuration | None:
    """`cfg` with ``pairsOnce`` where a forward kernel may take each pair once: a mirrored
    call with a symmetric list (the configuration's ``pairsOnce``) on the CPU, where the
    threads run one after another in index order, so the sum into a row is made in one fixed
    order. On CUDA the forward stays one gather per row (no atomics: the same bits every
    run)."""
    if cfg is None or not (config.get("pairsOnce") and config.get("deviceType") == "cpu"):
        return cfg
    return dataclasses.replace(cfg, pairsOnce=True)


@functools.cache
def _densityKernel(cfg: Configuration, module: str = "unique"):
    """The Density's forward kernel (`density.densityKernel`) for one configuration; with
    ``pairsOnce`` (`_forwardOnce`, the CPU) a pair of equal supports is evaluated once by the
    thread of the smaller index, which adds row j's term m_i W_ji = m_i W_ij to row j's
    zero-allocated output (as `_momentumKernel`)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    X = wp.array(dtype=S)
    XO = _onceExtra(S) if cfg.pairsOnce else X
    once = _pairOnceOf(cfg)

    @specialFunction("density_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: XO):
        h_j = r.supports[j]
        w = pk.W_ij(x_ij, h_i, h_j)
        if wp.static(cfg.pairsOnce):
            if once(i, j, h_i, h_j, q, r, True):
                other = r.masses[i] * w
                if wp.static(cfg.calibrate):
                    other = other * ks.normalizationCoefficient
                wp.atomic_add(extra.out, j, other)
        return r.masses[j] * w

    rowSum = _neighborSum(pair, cfg, False, XO, None,
                          _pairOnceSkip(cfg, XO) if cfg.pairsOnce else None,
                          _pairOnceStop(cfg, XO) if cfg.pairsOnce else None)
    admitted = _queryAdmitted(cfg)

    def density(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                out: wp.array(dtype=S)):
        i = wp.tid()
        rho = S(0.0)
        if admitted(queryState.kinds[i]):
            if wp.static(cfg.pairsOnce):
                extra = XO()
                extra.values = referenceState.masses
                extra.out = out
            else:
                extra = referenceState.masses
            rho = rowSum(adjacencyState, gridState, i, 0, 1, queryState, referenceState,
                         domainState, correctionData, kernelProperties, extra)
            if wp.static(cfg.calibrate):
                rho = rho * kernelProperties.normalizationCoefficient
        if wp.static(cfg.pairsOnce):  # the earlier rows' terms are in it already
            out[i] = out[i] + rho
        else:
            out[i] = rho

    return _kernel(density, "density", cfg, module)


def densitySpecialized(config: dict):
    """`OperatorSpec.specialize` of the Density: every configuration with a known kernel
    (pairs taken once where `_forwardOnce` allows)."""
    cfg = _forwardOnce(config, configurationOf(config))
    return None if cfg is None else _densityKernel(cfg)


def _pairOnceOf(cfg: Configuration):
    """``once(i, j, h_i, h_j, q, r, pairsOnce) -> bool``: whether a kernel (a reverse one,
    or a forward one on the CPU, `_forwardOnce`) takes the pair (i, j) once for both of its
    rows. That holds on a mirrored call with a symmetric list
    and no support adjoint asked (``pairsOnce``, `AdjacencyList.symmetric`) for two particles
    (i != j: a self pair is its row's alone) of equal supports whose other row also holds the
    pair: j a query and i a reference the interaction mode admits. Row j then lists i (the
    list is symmetric), the pair's terms of the two rows are the same
    function of the pair's inputs (the Density's) or its negative (the Momentum's,
    antisymmetric in x_ij), and the thread of the smaller index evaluates it with both rows'
    cotangents while the other skips it (docs/design.md). The supports are the exception:
    row j's term is row i's with h_i and h_j exchanged, so their adjoints are not those of
    the summed cotangent, and a call that asks for them takes every pair per row."""
    mode = cfg.operationMode
    allQueries = mode in _ALL_QUERIES
    allReferences = mode in _ALL_REFERENCES
    P = _structs(cfg)[0]
    S = cfg.scalar

    @specialFunction(cfg.tag)
    def once(i: wp.int32, j: wp.int32, h_i: S, h_j: S, q: P, r: P, pairsOnce: wp.bool):
        ok = pairsOnce and i != j and h_i == h_j
        if wp.static(not allQueries):
            ok = ok and checkDirectionality_i(wp.static(mode), q.kinds[j])
        if wp.static(not allReferences):
            ok = ok and checkDirectionality_j(wp.static(mode), r.kinds[i])
        return ok

    return once


@functools.cache
def _pairOnceSkip(cfg: Configuration, extraType=None):
    """``skip(i, j, h_i, q, r, extra) -> bool`` for `_neighborSum`: the list entries (i, j)
    with j < i whose pair row j's thread takes for both rows (`_pairOnceOf`), passed over
    before the reference's position is read. `extraType` None: a reverse kernel's, whose
    extra is the reverse pack with its run-time ``pairsOnce``; else a forward kernel's with
    ``pairsOnce`` in its configuration (`_forwardOnce`), whose extra is of that type."""
    once = _pairOnceOf(cfg)
    P = _structs(cfg)[0]
    reverse = extraType is None
    E = structFor("cotangent", cfg.dim, cfg.scalar) if reverse else extraType

    @specialFunction(("pairOnceSkip_" if reverse else "forwardOnceSkip_") + cfg.tag)
    def skip(i: wp.int32, j: wp.int32, h_i: cfg.scalar, q: P, r: P, extra: E):
        res = False
        flag = True
        if wp.static(reverse):
            flag = extra.pairsOnce
        if flag and j < i:
            res = once(i, j, h_i, r.supports[j], q, r, True)
        return res

    return skip


@functools.cache
def _pairOnceStop(cfg: Configuration, extraType=None):
    """``stopRow(adj, extra) -> bool`` for `_neighborSum`: whether a row of the call's
    symmetric list may end at its first entry j < i. It may where pairs are taken once
    (`_pairOnceSkip`'s run-time or configuration flag) and the call's ``adj.lowerTaken``
    device flag holds (`autograd.arg_extract.lowerTakenFlag`: equal supports, kinds the
    interaction mode admits on both sides): every entry j < i is then one `_pairOnceSkip`
    passes over, and a symmetric list holds them after the row's entries j >= i
    (`AdjacencyList.symmetric`)."""
    reverse = extraType is None
    E = structFor("cotangent", cfg.dim, cfg.scalar) if reverse else extraType
    A = _structs(cfg)[4]

    @specialFunction(("pairOnceStop_" if reverse else "forwardOnceStop_") + cfg.tag)
    def stopRow(adj: A, extra: E):
        res = False
        flag = True
        if wp.static(reverse):
            flag = extra.pairsOnce
        if flag and adj.lowerTaken.shape[0] > 0:
            res = adj.lowerTaken[0] != 0
        return res

    return stopRow


@functools.cache
def _densityVJPKernel(cfg: Configuration, module: str = "unique"):
    """The Density's hand-written reverse kernel (`density.densityVJPKernel`) for one
    configuration: the same per-pair adjoint with the specialised (W, G, dW/dh_i, dW/dh_j)
    of `kernels.specialized` (`valueVJP_ij`). On a mirrored call with a symmetric list a pair
    of equal supports is evaluated once for both rows (`_pairOnceOf`): m_j W_ij of row i
    and m_i W_ji of row j are one W, so x_i gets (u_i m_j + u_j m_i) G_ij and x_j its
    negative, each particle's adjoints summed on one side (the two sides are one tensor)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    once = _pairOnceOf(cfg)

    @specialFunction("densityVJPOnce_" + cfg.tag)
    def bothRows(i: wp.int32, j: wp.int32, r: P, p: X, u: S, ks: KS, Wv: S, Gv: V, wh_i: S,
                 wh_j: S):
        u_j = p.scalarSeed[j]
        if wp.static(cfg.calibrate):
            u_j = u_j * ks.normalizationCoefficient
        um = u * r.masses[j]
        vm = u_j * r.masses[i]
        res = (um + vm) * Gv
        if p.hasRPositions:
            wp.atomic_sub(p.rPositions, j, res)
        if p.hasQSupports:
            wp.atomic_add(p.qSupports, i, um * wh_i + vm * wh_j)
        if p.hasRSupports:
            wp.atomic_add(p.rSupports, j, um * wh_j + vm * wh_i)
        if p.hasRMasses:
            wp.atomic_add(p.rMasses, j, u * Wv)
            wp.atomic_add(p.rMasses, i, u_j * Wv)
        return res

    @specialFunction("densityVJP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        res = V()
        h_j = r.supports[j]
        both = once(i, j, h_i, h_j, q, r, p.pairsOnce)
        if not (both and j < i):  # the pair is row j's thread's to take
            u = p.scalarSeed[i]
            if wp.static(cfg.calibrate):
                u = u * ks.normalizationCoefficient
            if both and not (p.hasQSupports or p.hasRSupports or p.hasRMasses):
                # the positions' adjoint alone (a rollout's): grad W, no W or dW/dh
                u_j = p.scalarSeed[j]
                if wp.static(cfg.calibrate):
                    u_j = u_j * ks.normalizationCoefficient
                res = (u * r.masses[j] + u_j * r.masses[i]) * pk.gradW_ij(x_ij, h_i, h_j)
                if p.hasRPositions:
                    wp.atomic_sub(p.rPositions, j, res)
            else:
                Wv, Gv, wh_i, wh_j = pk.valueVJP_ij(x_ij, h_i, h_j)
                if both:
                    res = bothRows(i, j, r, p, u, ks, Wv, Gv, wh_i, wh_j)
                else:
                    res = densityPairVJP_ij(i, j, r, p, u, Wv, Gv, wh_i, wh_j)
        return res

    rowSum = _neighborSum(pair, cfg, True, X, skip=_pairOnceSkip(cfg),
                          stopRow=_pairOnceStop(cfg))
    admitted = _queryAdmitted(cfg)

    def densityVJP(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                   adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                   cotangents: X):
        i = wp.tid()
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, 0, 1, queryState, referenceState,
                         domainState, correctionData, kernelProperties, cotangents)
            if cotangents.hasQPositions:
                wp.atomic_add(cotangents.qPositions, i, val)

    return _kernel(densityVJP, "densityVJP", cfg, module)


#: Density configuration -> its reverse kernel built in a forward + reverse module
_PAIRED_DENSITY_VJP: dict = {}


def densityVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Density: every configuration with a known kernel; the
    copy that shares a module with the forward kernel (`densityPairedSpecialized`) when one
    was built."""
    cfg = configurationOf(config)
    if cfg is None:
        return None
    paired = _PAIRED_DENSITY_VJP.get(cfg)
    return paired if paired is not None else _densityVJPKernel(cfg)


@functools.cache
def _densityPair(cfg: Configuration, forward: Configuration):
    """The Density's forward kernel of `forward` (`cfg`, or `cfg` with ``pairsOnce``) built in
    one Warp module with the reverse kernel of `cfg` (as `_gradientPair`): a differentiated
    call compiles one module instead of two."""
    module = f"warpSPHCore_densityAndVJP_{forward.tag}_pair"
    # both kernels exist before either is launched: a kernel added to a loaded module would
    # rebuild it
    _PAIRED_DENSITY_VJP[cfg] = _densityVJPKernel(cfg, module)
    return _densityKernel(forward, module)


def densityPairedSpecialized(config: dict):
    """`ReverseSpec.pairedForward` of the Density: the forward kernel of a call that its
    reverse kernel will differentiate, compiled with it (`_densityPair`)."""
    cfg = configurationOf(config)
    return None if cfg is None else _densityPair(cfg, _forwardOnce(config, cfg))


@functools.cache
def _gradientKernel(cfg: Configuration, module: str = "unique"):
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    X = wp.array(dtype=S)
    fieldCoefficient_ij = fieldCoefficientOf(cfg.gradientScheme, cfg.plain)

    @specialFunction("gradientGeometry_" + cfg.tag)
    def geometry(i: wp.int32, j: wp.int32, x_ij: V, h_i: S, q: P, r: P, corr: C, ks: KS):
        Gv = pk.gradW_ij(x_ij, h_i, r.supports[j])
        if wp.static(cfg.renormalize):
            Gv = wp.mul(corr.renormalizationMatrices[i], Gv)
        return Gv

    @specialFunction("gradientColumn_" + cfg.tag)
    def column(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, Gv: V,
               q: P, r: P, corr: C, ks: KS, extra: X):
        return fieldCoefficient_ij(i, j, k, F, q, r, corr, ks, extra, False, False) * Gv

    if not cfg.plain:
        return _splitRowKernel("gradient", cfg, geometry, column, X, True, module)
    ofValues = coefficientOfValuesOf(cfg.gradientScheme, True)

    @specialFunction("gradientColumnOfValues_" + cfg.tag)
    def columnOfValues(i: wp.int32, j: wp.int32, k: wp.int32, x_ij: V, h_i: S, Gv: V, f_i: S,
                       f_j: S, q: P, r: P, corr: C, ks: KS):
        return ofValues(i, j, f_i, f_j, q, r, corr, ks, False) * Gv

    return _splitRowKernel("gradient", cfg, geometry, column, X, True, module,
                           columnOfValues=columnOfValues)


def gradientSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Gradient: calls without CRK (which corrects G_ij
    through W_ij and four states; `corrected.correctedGradient_ij` keeps it generic); the
    renormalization ``G_ij <- L_i G_ij`` is a configuration flag."""
    if config["useCRK"]:
        return None
    cfg = configurationOf(config, scheme=True)
    if cfg is None:
        return None
    return _gradientKernel(dataclasses.replace(
        _widened(cfg, config), renormalize=bool(config["useGradientRenormalization"])))


@functools.cache
def _gradientVJPKernel(cfg: Configuration, module: str = "unique"):
    """The Gradient's hand-written reverse kernel (`gradient.gradientVJPKernel`) for one
    configuration: the same per-pair adjoint (`gradient.gradientVJPPairTerm`) with the
    specialised (G, H u, u . dG/dh) of `kernels.specialized`. The gradient scheme stays a
    run-time value here (a configuration's scheme is ignored), except in the values-only
    kernel, which also takes a symmetric list's pairs once for both rows (`_pairOnceOf`)."""
    if cfg.gradientScheme and not cfg.valuesOnly:
        return _gradientVJPKernel(dataclasses.replace(cfg, gradientScheme=0), module)
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    valuesVJP = fieldCoefficientValuesVJPOf(cfg.gradientScheme) if cfg.valuesOnly else None
    once = _pairOnceOf(cfg)

    @specialFunction("gradientVJP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        u = p.seed[i * F + k]
        if wp.static(cfg.calibrate):
            u = u * ks.normalizationCoefficient
        res = V()
        if wp.static(cfg.geometryAdjoint):
            Gv, Hu, gh_i, gh_j = pk.gradVJP_ij(x_ij, h_i, r.supports[j], u)
            res = gradientPairVJP_ij(i, j, k, F, q, r, corr, ks, p, u, Gv, Hu, gh_i, gh_j)
        elif wp.static(cfg.valuesOnly):  # the values' adjoint alone, no run-time tests
            h_j = r.supports[j]
            # both rows' pair at once (`_pairOnceOf`): row j's term c_ji G_ji has
            # G_ji = -G_ij, and its values' adjoint is the scheme's with i and j exchanged
            both = once(i, j, h_i, h_j, q, r, p.pairsOnce)
            if not (both and j < i):
                Gv = pk.gradW_ij(x_ij, h_i, h_j)
                valuesVJP(i, j, k, F, q, r, p.gValues, wp.dot(Gv, u))
                if both:
                    u_j = p.seed[j * F + k]
                    if wp.static(cfg.calibrate):
                        u_j = u_j * ks.normalizationCoefficient
                    valuesVJP(j, i, k, F, q, r, p.gValues, -wp.dot(Gv, u_j))
        else:  # no position or support adjoint asked: grad W alone, no Hessian
            Gv = pk.gradW_ij(x_ij, h_i, r.supports[j])
            fieldCoefficientVJP_ij(i, j, k, F, q, r, corr, ks, p, wp.dot(Gv, u))
        return res

    return _rowReverseKernel("gradientVJP", cfg, pair, X, module=module,
                             skip=_pairOnceSkip(cfg) if cfg.valuesOnly else None,
                             stopRow=_pairOnceStop(cfg) if cfg.valuesOnly else None)


#: reverse configuration -> its kernel built in a forward + reverse module (`_gradientPair`)
_PAIRED_VJP: dict = {}


def gradientVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Gradient: every call eligible for its reverse kernel
    (no CRK, renormalization or grad-h; `gradient._reverseEligible`). The copy that shares a
    module with the forward kernel (`gradientPairedSpecialized`) when one was built."""
    cfg = configurationOf(config)
    if cfg is None:
        return None
    if not config.get("geometryAdjoint", True):
        if config.get("valuesOnly", False) and plainStates(config):
            return _gradientVJPKernel(dataclasses.replace(
                cfg, geometryAdjoint=False, valuesOnly=True, plain=True,
                gradientScheme=int(config["gradientMode"])))
        return _gradientVJPKernel(dataclasses.replace(cfg, geometryAdjoint=False))
    paired = _PAIRED_VJP.get(cfg)
    return paired if paired is not None else _gradientVJPKernel(cfg)


@functools.cache
def _gradientPair(cfg: Configuration):
    """The forward kernel of `cfg` built in one Warp module with the reverse kernel of its
    configuration: a differentiated call compiles one module instead of two (the module's
    structs and shared functions once; about 0.15 s of a cold first call on 2 cores)."""
    reverseCfg = dataclasses.replace(cfg, gradientScheme=0, wide=False, plain=False)
    module = f"warpSPHCore_gradientAndVJP_{cfg.tag}_pair"
    # both kernels exist before either is launched: a kernel added to a loaded module would
    # rebuild it
    _PAIRED_VJP[reverseCfg] = _gradientVJPKernel(reverseCfg, module)
    return _gradientKernel(cfg, module)


def gradientPairedSpecialized(config: dict):
    """`ReverseSpec.pairedForward` of the Gradient: the forward kernel of a call that will be
    differentiated by the reverse kernel, compiled with it (`_gradientPair`); None where the
    forward kernel is not specialised (`gradientSpecialized`)."""
    if config["useCRK"] or config["useGradientRenormalization"]:
        return None
    cfg = configurationOf(config, scheme=True)
    # one column per thread here even on the CPU: the wide variant's extra code in the
    # forward + reverse module made a cold first differentiated call 0.3 s slower to
    # compile (benchmarks/first_result.py), and the calls that need many columns at once
    # (torch.func.vmap over fields) run without grad; the plain coefficient (no run-time
    # state tests) where the states allow it, as the forward without grad
    if cfg is None:
        return None
    return _gradientPair(dataclasses.replace(cfg, plain=plainStates(config)))


@functools.cache
def _gradientJVPKernel(cfg: Configuration):
    """The Gradient's Tier-2 JVP kernel (`gradient.gradientJVPKernel`, the `jvpCommon` ABI)
    for one configuration, without support tangents: per pair dc_ij G_ij + c_ij H_ij dx_ij
    with (G, H dx) from `kernels.specialized` (`gradVJP_ij` with u = dx: H is symmetric)."""
    if cfg.gradientScheme and cfg.coefficientTangent:
        return _gradientJVPKernel(dataclasses.replace(cfg, gradientScheme=0))
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    T = structFor("tangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    coefficient = fieldCoefficientOf(cfg.gradientScheme, cfg.plain)

    @specialFunction("gradientJVP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, t: T):
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        res = V()
        if wp.static(cfg.coefficientTangent):
            Gv, Hdx, gh_i, gh_j = pk.gradVJP_ij(x_ij, h_i, r.supports[j], dx)
            c, dc = fieldCoefficientJVP_ij(i, j, k, F, q, r, corr, ks, t, False)
            res = c * Hdx
            if coefficientTangentPresent(t):
                res = dc * Gv + res
        else:  # positions tangents alone: dc_ij = 0 (H dx as the one-traversal route's)
            Gv, Hdx = pk.gradHessDot_ij(x_ij, h_i, r.supports[j], dx)
            res = coefficient(i, j, k, F, q, r, corr, ks, t.values, False, False) * Hdx
        return res

    return _rowKernel("gradientJVP", cfg, pair, T, True)


def gradientJVPSpecialized(config: dict):
    """`JVPSpec.geometrySpecialize` of the Gradient: calls without CRK, renormalization and
    support tangents (``config["supportTangents"]``, set by `jvpCommon.launchGeometryJVP`)."""
    if (config["useCRK"] or config["useGradientRenormalization"]
            or config.get("supportTangents", True)):
        return None
    cfg = configurationOf(config)
    if cfg is None:
        return None
    if not config.get("coefficientTangents", True):
        cfg = _positionTangentsOnly(cfg, config)
    return _gradientJVPKernel(cfg)


def _positionTangentsOnly(cfg: Configuration, config: dict) -> Configuration:
    """`cfg` for a forward-mode call whose only tangents are the positions': no coefficient
    tangent, the gradient scheme fixed, the plain coefficient where the states allow it."""
    return dataclasses.replace(cfg, coefficientTangent=False,
                               gradientScheme=int(config["gradientMode"]),
                               plain=plainStates(config))


@functools.cache
def _gradientDualKernel(cfg: Configuration):
    """The Gradient's primal and position tangent in one traversal (the dual-tensor route of
    a call whose only tangent is on the positions): per pair ``c_ij G_ij`` and ``c_ij H_ij
    dx_ij``, with G_ij the forward kernel's `gradW_ij` (the primal's bits) and H dx the
    forward-mode kernel's; thread (i, k) stores the primal at ``out[(i F + k) d]`` and the
    tangent at ``out[half + (i F + k) d]`` (``half`` = ``out.shape[0] / 2``). The ABI of the
    forward-mode kernel (`jvpCommon`). G and H dx come from one shape evaluation
    (`kernels.specialized`'s ``gradHessDot_ij``), G with the forward kernel's arithmetic."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    W2 = wp.types.vector(length=2 * D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    T = structFor("tangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    coefficient = fieldCoefficientOf(cfg.gradientScheme, cfg.plain)

    @specialFunction("gradientDual_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, t: T):
        dx, dh_i, dh_j = pairTangent_ij(t, i, j, x_ij, h_i)
        Gv, Hdx = pk.gradHessDot_ij(x_ij, h_i, r.supports[j], dx)
        c = coefficient(i, j, k, F, q, r, corr, ks, t.values, False, False)
        primal = c * Gv
        tangent = c * Hdx
        res = W2()
        for a in range(wp.static(D)):
            res[a] = primal[a]
            res[a + wp.static(D)] = tangent[a]
        return res

    rowSum = _neighborSum(pair, cfg, False, T, W2)
    admitted = _queryAdmitted(cfg)

    def kernel(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
               adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
               tangents: T, fieldWidth: wp.int32, out: wp.array(dtype=S)):
        tid = wp.tid()
        i = tid / fieldWidth
        acc = W2()
        if admitted(queryState.kinds[i]):
            acc = rowSum(adjacencyState, gridState, i, tid - i * fieldWidth, fieldWidth,
                         queryState, referenceState, domainState, correctionData,
                         kernelProperties, tangents)
            if wp.static(cfg.calibrate):
                acc = acc * kernelProperties.normalizationCoefficient
        half = out.shape[0] / 2
        for a in range(wp.static(D)):
            out[tid * wp.static(D) + a] = acc[a]
            out[half + tid * wp.static(D) + a] = acc[a + wp.static(D)]

    return _kernel(kernel, "gradientDual", cfg)


def specialCodeCovers(kernel, supportMode) -> bool:
    """Whether the specialised kernels have code for this smoothing kernel and support
    scheme (`configurationOf` returns None otherwise)."""
    return int(kernel) in SPECIALIZED_KERNELS and int(supportMode) in _SUPPORT_NAMES


def gradientDualCovers(config: dict) -> bool:
    """Whether `gradientDualSpecialized` covers a call: no CRK, renormalization, support or
    coefficient tangent, and a smoothing kernel and support scheme with specialised code."""
    return not (config["useCRK"] or config["useGradientRenormalization"]
                or config.get("supportTangents", True)
                or config.get("coefficientTangents", True)) \
        and configurationOf(config) is not None


def gradientDualSpecialized(config: dict):
    """`JVPSpec.dualSpecialize` of the Gradient (`_gradientDualKernel`); raises where it does
    not cover the call (the caller checks first: a generic kernel in its place would fill
    half the output)."""
    if not gradientDualCovers(config):
        raise RuntimeError("gradientDualSpecialized: the call is not covered (CRK, "
                           "renormalization, support or coefficient tangents)")
    return _gradientDualKernel(_positionTangentsOnly(configurationOf(config), config))


@functools.cache
def _interpolateKernel(cfg: Configuration):
    """The Interpolate's forward kernel (`interpolate.interpolateKernel`: thread (i, k),
    ``f_j[k] V_j W_ij``) for one configuration, without CRK."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    GEO = wp.types.vector(length=2, dtype=S)

    @specialFunction("interpolateGeometry_" + cfg.tag)
    def geometry(i: wp.int32, j: wp.int32, x_ij: V, h_i: S, q: P, r: P, corr: C, ks: KS):
        return GEO(apparentVolume_j(r, corr, j), pk.W_ij(x_ij, h_i, r.supports[j]))

    @specialFunction("interpolateColumn_" + cfg.tag)
    def column(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, g: GEO,
               q: P, r: P, corr: C, ks: KS, extra: X):
        return extra[j * F + k] * g[0] * g[1]

    @specialFunction("interpolateColumnOfValues_" + cfg.tag)
    def columnOfValues(i: wp.int32, j: wp.int32, k: wp.int32, x_ij: V, h_i: S, g: GEO,
                       f_i: S, f_j: S, q: P, r: P, corr: C, ks: KS):
        return f_j * g[0] * g[1]

    return _splitRowKernel("interpolate", cfg, geometry, column, X, False,
                           columnOfValues=columnOfValues, queryHalf=False)


def _contractedGradient(cfg: Configuration):
    """``G(i, j, x_ij, h_i, r, corr)``: grad W of the configuration, renormalized
    (``L_i G``) when `Configuration.renormalize` (the Divergence's and the Curl's G_ij
    without CRK)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)

    @specialFunction("contractedGradient_" + cfg.tag)
    def gradient(i: wp.int32, j: wp.int32, x_ij: V, h_i: S, r: P, corr: C):
        Gv = pk.gradW_ij(x_ij, h_i, r.supports[j])
        if wp.static(cfg.renormalize):
            Gv = wp.mul(corr.renormalizationMatrices[i], Gv)
        return Gv

    return gradient


def _contractionConfiguration(config: dict) -> Configuration | None:
    """The `Configuration` of a Divergence or Curl call without CRK: the gradient scheme
    fixed, the renormalization a flag, the plain coefficient where the states allow it."""
    if config["useCRK"]:
        return None
    cfg = configurationOf(config, scheme=True)
    if cfg is None:
        return None
    return dataclasses.replace(cfg, renormalize=bool(config["useGradientRenormalization"]),
                               plain=plainStates(config))


@functools.cache
def _divergenceKernel(cfg: Configuration, dotMode: bool):
    """The Divergence's forward kernel (`divergence.divergenceKernel`: thread (i, p),
    ``sum_delta c_ij[idx(delta, p)] G_ij[delta]``, the consistent volumes a run-time flag
    packed into the component as the generic kernel does) for one configuration and
    contraction (`dotMode`: the last field axis)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    coefficient = fieldCoefficientOf(cfg.gradientScheme, cfg.plain)
    gradient = _contractedGradient(cfg)
    name = "divergenceDot" if dotMode else "divergence"

    @specialFunction(name + "_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: X):
        p = k / 2
        consistent = (k - 2 * p) == 1
        NP = F / wp.static(D)
        Gv = gradient(i, j, x_ij, h_i, r, corr)
        res = S(0.0)
        for delta in range(wp.static(D)):
            idx = delta * NP + p
            if wp.static(dotMode):
                idx = p * wp.static(D) + delta
            res = res + coefficient(i, j, idx, F, q, r, corr, ks, extra, consistent,
                                    True) * Gv[delta]
        return res

    rowSum = _neighborSum(pair, cfg, False, X)
    admitted = _queryAdmitted(cfg)

    def kernel(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
               adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
               values: X, fieldWidth: wp.int32, consistentDivergence: wp.bool,
               out: wp.array(dtype=S)):
        tid = wp.tid()
        NP = fieldWidth / wp.static(D)
        i = tid / NP
        k = 2 * (tid - i * NP)
        if consistentDivergence:
            k = k + 1
        val = S(0.0)
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, k, fieldWidth, queryState,
                         referenceState, domainState, correctionData, kernelProperties,
                         values)
            if wp.static(cfg.calibrate):
                val = val * kernelProperties.normalizationCoefficient
        out[tid] = val

    return _kernel(kernel, name, cfg)


@functools.cache
def _divergenceVJPKernel(cfg: Configuration):
    """The Divergence's hand-written reverse kernel (`divergence.divergenceVJPKernel`) for
    one configuration: the same per-pair adjoint (`_coefficients.divergencePairVJP_ij`, the
    scheme and the contraction axis run-time values) with the specialised
    (G, H g, g . dG/dh) of `kernels.specialized`."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)

    @specialFunction("divergenceVJP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        u = p.scalarSeed[i * (F / wp.static(D)) + k]
        if wp.static(cfg.calibrate):
            u = u * ks.normalizationCoefficient
        c = divergenceCoefficients_ij(i, j, k, F, q, r, corr, ks, p.values, wp.static(D), x_ij)
        Gv, Hg, gh_i, gh_j = pk.gradVJP_ij(x_ij, h_i, r.supports[j], u * c)
        return divergencePairVJP_ij(i, j, k, F, q, r, corr, ks, p, u, Gv, Hg, gh_i, gh_j,
                                    wp.static(D))

    return _rowReverseKernel("divergenceVJP", cfg, pair, X, perQuery=_divergenceRows(cfg.dim))


def divergenceVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Divergence: every call eligible for its reverse kernel
    (`divergence._reverseEligible`: no CRK, renormalization, grad-h or consistent
    volumes)."""
    cfg = configurationOf(config)
    return None if cfg is None else _divergenceVJPKernel(cfg)


def divergenceSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Divergence: the calls without CRK (grad-h, volumes,
    consistent volumes and the renormalization included; the contraction axis a
    configuration constant)."""
    cfg = _contractionConfiguration(config)
    return None if cfg is None else _divergenceKernel(cfg, bool(config["divergenceMode"]))


@functools.cache
def _curlKernel(cfg: Configuration):
    """The Curl's forward kernel (`curl.curlKernel`: thread (i, k), ``G[a1] c[a2 P + s] -
    G[a2] c[a1 P + s]``; 2D the z component, 3D the index map of the generic kernel) for one
    configuration, d = 2 or 3."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    coefficient = fieldCoefficientOf(cfg.gradientScheme, cfg.plain)
    gradient = _contractedGradient(cfg)

    @specialFunction("curl_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: X):
        NP = F / wp.static(D)
        a1, a2, s = curlAxes(k, NP, wp.static(D))
        Gv = gradient(i, j, x_ij, h_i, r, corr)
        c2 = coefficient(i, j, a2 * NP + s, F, q, r, corr, ks, extra, False, True)
        c1 = coefficient(i, j, a1 * NP + s, F, q, r, corr, ks, extra, False, True)
        return Gv[a1] * c2 - Gv[a2] * c1

    rowSum = _neighborSum(pair, cfg, False, X)
    admitted = _queryAdmitted(cfg)

    def kernel(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
               adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
               values: X, fieldWidth: wp.int32, out: wp.array(dtype=S)):
        tid = wp.tid()
        n = fieldWidth
        if wp.static(D == 2):
            n = fieldWidth / 2
        i = tid / n
        k = tid - i * n
        val = S(0.0)
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, k, fieldWidth, queryState,
                         referenceState, domainState, correctionData, kernelProperties,
                         values)
            if wp.static(cfg.calibrate):
                val = val * kernelProperties.normalizationCoefficient
        out[tid] = val

    return _kernel(kernel, "curl", cfg)


@functools.cache
def _curlVJPKernel(cfg: Configuration):
    """The Curl's hand-written reverse kernel (`curl.curlVJPKernel`) for one configuration,
    d = 2 or 3: the same per-pair adjoint (`_coefficients.curlPairVJP_ij`, the scheme a
    run-time value) with the specialised (G, H g, g . dG/dh) of `kernels.specialized`."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    coefficient = fieldCoefficientOf(0)  # the scheme a run-time value

    @specialFunction("curlVJP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        NP = F / wp.static(D)
        n = F
        if wp.static(D == 2):
            n = NP
        a1, a2, s = curlAxes(k, NP, wp.static(D))
        u = p.scalarSeed[i * n + k]
        if wp.static(cfg.calibrate):
            u = u * ks.normalizationCoefficient
        c2 = coefficient(i, j, a2 * NP + s, F, q, r, corr, ks, p.values, False, True)
        c1 = coefficient(i, j, a1 * NP + s, F, q, r, corr, ks, p.values, False, True)
        g = V()
        g[a1] = u * c2
        g[a2] = -u * c1
        Gv, Hg, gh_i, gh_j = pk.gradVJP_ij(x_ij, h_i, r.supports[j], g)
        return curlPairVJP_ij(i, j, F, q, r, corr, ks, p, u, Gv, Hg, gh_i, gh_j, a1, a2, s, NP)

    return _rowReverseKernel("curlVJP", cfg, pair, X, perQuery=_curlRows(cfg.dim))


def curlVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Curl: the calls eligible for its reverse kernel in 2D
    and 3D (the 1D curl, exactly 0, keeps the generic kernel)."""
    if int(config["dim"]) < 2:
        return None
    cfg = configurationOf(config)
    return None if cfg is None else _curlVJPKernel(cfg)


def curlSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Curl: the calls without CRK in 2D and 3D (the 1D
    curl, exactly 0, keeps the generic kernel)."""
    if int(config["dim"]) < 2:
        return None
    cfg = _contractionConfiguration(config)
    return None if cfg is None else _curlKernel(cfg)


@functools.cache
def _interpolateVJPKernel(cfg: Configuration):
    """The Interpolate's hand-written reverse kernel (`interpolate.interpolateVJPKernel`)
    for one configuration, without CRK: the same per-pair adjoint
    (`_coefficients.interpolatePairVJP_ij`) with the specialised (W, G, dW/dh_i, dW/dh_j) of
    `kernels.specialized` (`valueVJP_ij`)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)

    @specialFunction("interpolateVJP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        u = p.scalarSeed[i * F + k]
        if wp.static(cfg.calibrate):
            u = u * ks.normalizationCoefficient
        Wv, Gv, wh_i, wh_j = pk.valueVJP_ij(x_ij, h_i, r.supports[j])
        return interpolatePairVJP_ij(i, j, k, F, q, r, corr, p, u, Wv, Gv, wh_i, wh_j)

    return _rowReverseKernel("interpolateVJP", cfg, pair, X)


def interpolateVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Interpolate: the calls its reverse kernel takes (no
    CRK)."""
    if config["useCRK"]:
        return None
    cfg = configurationOf(config)
    return None if cfg is None else _interpolateVJPKernel(cfg)


def interpolateSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Interpolate: the calls without CRK (which corrects
    W_ij with the query's A, B)."""
    if config["useCRK"]:
        return None
    cfg = configurationOf(config)
    return None if cfg is None else _interpolateKernel(_widened(cfg, config))


_REG_N = LAPLACIAN_REG_N
_REG_DEFAULT = LAPLACIAN_REG_DEFAULT


@functools.cache
def _laplacianKernel(cfg: Configuration):
    """The Laplacian's forward kernel (`laplacian.laplacianKernel`, thread (i, k), scalar
    output) for one configuration and geometric scheme (Brookshaw 2, Dot 3, Default 4)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    scheme = cfg.laplacianScheme
    # the plain copy has the gradient scheme (which picks s_ij) fixed
    difference_ij = laplacianDifferenceOf(cfg.gradientScheme) if cfg.plain \
        else laplacianDifference_ij

    @specialFunction("laplacianDot_" + cfg.tag)
    def blockDot(i: wp.int32, j: wp.int32, base: wp.int32, F: wp.int32, v: V, q: P, r: P,
                 corr: C, ks: KS, values: X):
        """sum_{c < d} q_ij[base + c] v[c] (`laplacian._blockDot`)."""
        acc = S(0.0)
        for c in range(wp.static(D)):
            acc += difference_ij(i, j, base + c, F, q, r, corr, ks, values) * v[c]
        return acc

    # the pair's geometry, shared by the columns: (r_ij, the factor of q_ij[k], D_ij); the
    # factor is G_ij . n_ij / D_ij (Dot), -2 G_ij . n_ij / D_ij (Brookshaw), the same over
    # r_ij + 1e-2 h_ij (Default), G_ij . v_ij (Consistent): one quotient per pair, not per
    # column (the generic kernel divides per term: the results agree to rounding)
    GEO = wp.types.vector(length=3, dtype=S)

    @specialFunction("laplacianGeometry_" + cfg.tag)
    def geometry(i: wp.int32, j: wp.int32, x_ij: V, h_i: S, q: P, r: P, corr: C, ks: KS):
        g = GEO()
        r_ij = wp.length(x_ij)
        g[0] = r_ij
        if r_ij > S(0.0):  # the generic kernel's r > 0 guard
            h_j = r.supports[j]
            h_ij = computePairwiseSupport(h_i, h_j, ks.supportMode)
            Gv = pk.gradW_ij(x_ij, h_i, h_j)
            if wp.static(cfg.renormalize):
                Gv = wp.mul(corr.renormalizationMatrices[i], Gv)
            Dn = r_ij + S(_REG_N) * h_ij
            Gn = wp.dot(Gv, x_ij / Dn)
            g[2] = Dn
            if wp.static(scheme == 5):
                # laplacian.consistentDirection_ij with a state (the factory's condition)
                v = wp.mul(corr.laplacianMatrices[i], x_ij) / (Dn * Dn) \
                    - corr.laplacianVectors[i]
                g[1] = wp.dot(Gv, v)
            elif wp.static(scheme == 3):
                g[1] = Gn / Dn
            elif wp.static(scheme == 4):
                g[1] = S(-2.0) * Gn / (r_ij + S(_REG_DEFAULT) * h_ij)
            else:
                g[1] = S(-2.0) * Gn / Dn
        return g

    @specialFunction("laplacianColumn_" + cfg.tag)
    def column(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, g: GEO,
               q: P, r: P, corr: C, ks: KS, extra: X):
        res = S(0.0)
        if g[0] > S(0.0):
            q_k = difference_ij(i, j, k, F, q, r, corr, ks, extra)
            if wp.static(scheme == 3):
                base = (k / wp.static(D)) * wp.static(D)
                n_ij = x_ij / g[2]
                qn = blockDot(i, j, base, F, n_ij, q, r, corr, ks, extra)
                res = g[1] * (q_k - S(wp.static(float(D + 2))) * qn * n_ij[k - base])
            else:
                res = q_k * g[1]
        return res

    if not cfg.plain or scheme == 3:
        # the Dot scheme's column reads the other columns of its d-block
        return _splitRowKernel("laplacian", cfg, geometry, column, X, False)
    ofValues = laplacianDifferenceOfValues(cfg.gradientScheme)

    @specialFunction("laplacianColumnOfValues_" + cfg.tag)
    def columnOfValues(i: wp.int32, j: wp.int32, k: wp.int32, x_ij: V, h_i: S, g: GEO,
                       f_i: S, f_j: S, q: P, r: P, corr: C, ks: KS):
        res = S(0.0)
        if g[0] > S(0.0):
            res = ofValues(i, j, f_i, f_j, q, r) * g[1]
        return res

    return _splitRowKernel("laplacian", cfg, geometry, column, X, False,
                           columnOfValues=columnOfValues)


def laplacianSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Laplacian: the Brookshaw, Dot, Default and
    Consistent (with its state) schemes without CRK (which corrects G_ij through W_ij) and positiveDivergence (a pair selection by
    the values), with or without renormalization (a configuration flag); Naive (the analytic
    kernel Laplacian) stays generic."""
    scheme = int(config["laplacianMode"])
    if scheme not in (2, 3, 4, 5) or config["useCRK"] or config["positiveDivergenceMode"]:
        return None
    if scheme == 5 and not config["useConsistentLaplacian"]:
        return None
    cfg = configurationOf(config)
    if cfg is None:
        return None
    cfg = _widened(cfg, config)
    if cfg.plain:
        cfg = dataclasses.replace(cfg, gradientScheme=int(config["gradientMode"]))
    return _laplacianKernel(dataclasses.replace(
        cfg, laplacianScheme=scheme, renormalize=bool(config["useGradientRenormalization"])))


@functools.cache
def _laplacianVJPKernel(cfg: Configuration):
    """The Laplacian's hand-written reverse kernel (`laplacian.laplacianVJPKernel`, Brookshaw
    and Default) for one configuration: the same per-pair adjoint
    (`_coefficients.laplacianPairVJP_ij`, the schemes run-time values) with the specialised
    (G, H g, g . dG/dh) and support partials of `kernels.specialized`."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    mode = cfg.supportMode

    @specialFunction("laplacianVJP_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        res = V()
        r_ij = wp.length(x_ij)
        if r_ij > S(0.0):
            h_j = r.supports[j]
            u = p.scalarSeed[i * F + k]
            if wp.static(cfg.calibrate):
                u = u * ks.normalizationCoefficient
            q_k = laplacianDifference_ij(i, j, k, F, q, r, corr, ks, p.values)
            Dn, E, regE = laplacianDenominators_ij(
                r_ij, computePairwiseSupport(h_i, h_j, wp.static(mode)), ks.laplacianMode)
            g = x_ij * (S(-2.0) * u * q_k / (Dn * E))
            Gv, Hg, gh_i, gh_j = pk.gradVJP_ij(x_ij, h_i, h_j, g)
            dh_i, dh_j = pk.supportAdjoint(S(1.0), h_i, h_j)
            res = laplacianPairVJP_ij(i, j, k, F, q, r, corr, ks, p, u, q_k, x_ij, r_ij, Dn, E,
                                      regE, Gv, Hg, gh_i, gh_j, dh_i, dh_j)
        return res

    return _rowReverseKernel("laplacianVJP", cfg, pair, X)


def laplacianVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Laplacian: every call eligible for its reverse kernel
    (`laplacian._reverseEligible`: Brookshaw and Default without positiveDivergence, CRK,
    renormalization or grad-h)."""
    cfg = configurationOf(config)
    return None if cfg is None else _laplacianVJPKernel(cfg)


@functools.cache
def _momentumKernel(cfg: Configuration):
    """The Momentum's forward kernel (`momentum.momentumKernel`, thread i, rows (F_i, B_i))
    for one configuration."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    M = momentumRows(D, S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    supportMode = cfg.supportMode

    # a particle's field values[base : base + 4 + 2 d] (`momentum.momentumFieldWidth`) read
    # as one row (`_rowView`)
    fieldRow = _rowView(S, 4 + 2 * D)

    @specialFunction("momentumVector_" + cfg.tag)
    def fieldVector(row: X, base: wp.int32):
        v = V()
        for c in range(wp.static(D)):
            v[c] = row[base + c]
        return v

    # with ``pairsOnce`` the pair reads the field and adds row j's term to the output: both
    # arrays travel in one struct (built in the kernel)
    XO = _onceExtra(S) if cfg.pairsOnce else X
    once = _pairOnceOf(cfg)

    @specialFunction("momentum_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: XO):
        res = M()
        r_ij = wp.length(x_ij)
        h_j = r.supports[j]
        # the generic kernel's guard; and a pair beyond the larger support (a Verlet list's
        # buffer) contributes exactly 0 (G = 0 there), so its field is not read
        if r_ij > S(0.0) and r_ij <= wp.max(h_i, h_j) * S(_BEYOND_SUPPORT):
            Dn = r_ij + S(LAPLACIAN_REG_N) * computePairwiseSupport(h_i, h_j,
                                                                    wp.static(supportMode))
            if wp.static(cfg.pairsOnce):
                vals = extra.values
            else:
                vals = extra
            fi = fieldRow(vals, i * F)
            fj = fieldRow(vals, referenceBase(vals, q, F) + j * F)
            res = momentumPair(pk.gradW_ij(x_ij, h_i, h_j), x_ij, Dn, fi[0], fi[1], fi[2],
                               fi[3], fieldVector(fi, 4), fieldVector(fi, wp.static(4 + D)),
                               fj[0], fj[1], fj[2], fj[3], fieldVector(fj, 4),
                               fieldVector(fj, wp.static(4 + D)))
            if wp.static(cfg.pairsOnce):
                # row j's term is minus row i's (antisymmetric in x_ij; `_pairOnceOf`)
                if once(i, j, h_i, h_j, q, r, True):
                    other = res
                    if wp.static(cfg.calibrate):
                        other = other * ks.normalizationCoefficient
                    base = j * wp.static(2 * D)
                    for delta in range(wp.static(D)):
                        wp.atomic_sub(extra.out, base + delta, other[0, delta])
                        wp.atomic_sub(extra.out, base + wp.static(D) + delta, other[1, delta])
        return res

    rowSum = _neighborSum(pair, cfg, False, XO, M,
                          _pairOnceSkip(cfg, XO) if cfg.pairsOnce else None,
                          _pairOnceStop(cfg, XO) if cfg.pairsOnce else None)
    admitted = _queryAdmitted(cfg)

    def momentum(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                 adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                 values: X, fieldWidth: wp.int32, out: wp.array(dtype=S)):
        i = wp.tid()
        val = M()
        if admitted(queryState.kinds[i]):
            if wp.static(cfg.pairsOnce):
                extra = XO()
                extra.values = values
                extra.out = out
            else:
                extra = values
            val = rowSum(adjacencyState, gridState, i, 0, fieldWidth, queryState,
                         referenceState, domainState, correctionData, kernelProperties, extra)
            if wp.static(cfg.calibrate):
                val = val * kernelProperties.normalizationCoefficient
        base = i * wp.static(2 * D)
        for delta in range(wp.static(D)):
            if wp.static(cfg.pairsOnce):  # the earlier rows' terms are in it already
                out[base + delta] = out[base + delta] + val[0, delta]
                out[base + wp.static(D) + delta] = out[base + wp.static(D) + delta] + val[1, delta]
            else:
                out[base + delta] = val[0, delta]
                out[base + wp.static(D) + delta] = val[1, delta]

    return _kernel(momentum, "momentum", cfg)


@functools.cache
def _onceExtra(S):
    """The struct of a forward kernel with ``pairsOnce`` (the Momentum's, the Density's): the
    values its pair reads (the field, the masses) and the output, which its pair term adds
    row j's term to."""
    fields = {"values": wp.array(dtype=S), "out": wp.array(dtype=S)}
    name = f"onceExtra_{'f32' if S == wp.float32 else 'f64'}"
    cls = wp.struct(type(name, (), {"__annotations__": fields, "__module__": __name__,
                                    "__qualname__": name}))
    globals()[name] = cls
    return cls


def momentumSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Momentum: every configuration (it reads no correction
    state)."""
    cfg = _forwardOnce(config, configurationOf(config))
    return None if cfg is None else _momentumKernel(cfg)


def momentumVJPWidth(d: int) -> int:
    """Entries of the Momentum reverse kernel's per-query accumulator: the x_i adjoint (d),
    h_i, then the field columns (p, rho, V, mu, u (d), u~ (d))."""
    return 3 * d + 5


@functools.cache
def _momentumVJPKernel(cfg: Configuration):
    """The Momentum's hand-written reverse kernel for one configuration: thread i traverses
    its references once; per pair, the output cotangent (g_F, g_B) of row i gives the
    cotangent of G_ij, whose adjoint (H_ij g_G, g_G . dG/dh) comes from one shape evaluation
    (`kernels.specialized` ``gradVJP_ij``), and the adjoints of every field column, of x_ij
    through D_ij and of h_ij follow from the pair formula by hand (docs/performance.md).
    The reference side is scattered with atomics, the query side summed per thread."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    ACC = wp.types.vector(length=momentumVJPWidth(D), dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = structFor("cotangent", D, S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    mode = cfg.supportMode
    tag = cfg.tag

    fieldRow = _rowView(S, 4 + 2 * D)  # a particle's field as one row, as `_momentumKernel`
    once = _pairOnceOf(cfg)

    @specialFunction("momentumVJPVector_" + tag)
    def fieldVector(row: wp.array(dtype=S), base: wp.int32):
        v = V()
        for c in range(wp.static(D)):
            v[c] = row[base + c]
        return v


    @specialFunction("momentumVJP_" + tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, p: X):
        acc = ACC()
        r2 = wp.dot(x_ij, x_ij)
        h_j = r.supports[j]
        reach = wp.max(h_i, h_j) * S(_BEYOND_SUPPORT)
        # both rows' pair at once (`_pairOnceOf`): row j's term is minus row i's, so the
        # pair's adjoint is that of row i for the cotangent g_i - g_j; row j's thread skips it
        both = once(i, j, h_i, h_j, q, r, p.pairsOnce)
        # the primal's guard, on r^2 (so that the square root is off the branch's path):
        # beyond the larger support every adjoint of the pair is 0 (G and its derivatives
        # vanish there), so the two guards differ only where the pair adds 0
        if r2 > S(0.0) and r2 <= reach * reach and not (both and j < i):
            r_ij = wp.sqrt(r2)
            Dn = r_ij + S(LAPLACIAN_REG_N) * computePairwiseSupport(h_i, h_j, wp.static(mode))
            bj = referenceBase(p.values, q, F) + j * F
            fi = fieldRow(p.values, i * F)
            fj = fieldRow(p.values, bj)
            p_i = fi[0]
            rho_i = fi[1]
            V_i = fi[2]
            mu_i = fi[3]
            u_i = fieldVector(fi, 4)
            ut_i = fieldVector(fi, wp.static(4 + D))
            p_j = fj[0]
            rho_j = fj[1]
            V_j = fj[2]
            mu_j = fj[3]
            u_j = fieldVector(fj, 4)
            ut_j = fieldVector(fj, wp.static(4 + D))
            gF = p.seed[2 * i]
            gB = p.seed[2 * i + 1]
            if both:
                gF = gF - p.seed[2 * j]
                gB = gB - p.seed[2 * j + 1]
            if wp.static(cfg.calibrate):
                gF = gF * ks.normalizationCoefficient
                gB = gB * ks.normalizationCoefficient
            w = V_i * V_i + V_j * V_j
            # one reciprocal per denominator (a division costs what a dozen products do)
            sm = mu_i + mu_j
            ism = S(0.0)
            if sm > S(0.0):
                ism = S(1.0) / sm
            muij = S(2.0) * mu_i * mu_j * ism  # `pairViscosity`
            sr = rho_i + rho_j
            isr = S(0.0)
            if sr > S(0.0):
                isr = S(1.0) / sr
            pt = (rho_j * p_i + rho_i * p_j) * isr  # `weightedPressure`
            du = u_i - u_j
            gFdu = wp.dot(gF, du)
            gFu_i = wp.dot(gF, u_i)
            gFu_j = wp.dot(gF, u_j)
            iD = S(1.0) / Dn
            iD2 = iD * iD
            # the cotangent of G_ij (nothing in it depends on G)
            gG = w * ((muij * gFdu * iD2) * x_ij - pt * gF
                      + S(0.5) * (rho_i * gFu_i * (ut_i - u_i) + rho_j * gFu_j * (ut_j - u_j))
                      + gB)
            Gv, Hu, gh_i, gh_j = pk.gradVJP_ij(x_ij, h_i, h_j, gG)
            xG = wp.dot(x_ij, Gv)
            vis = muij * xG * iD2
            c_i = wp.dot(ut_i - u_i, Gv)
            c_j = wp.dot(ut_j - u_j, Gv)
            gFG = wp.dot(gF, Gv)
            bracket = (vis * gFdu - pt * gFG + S(0.5) * (rho_i * c_i * gFu_i + rho_j * c_j * gFu_j)
                       + wp.dot(gB, Gv))
            gV_i = S(2.0) * V_i * bracket
            gV_j = S(2.0) * V_j * bracket
            gmuij = w * xG * iD2 * gFdu * S(2.0) * ism * ism
            gmu_i = gmuij * mu_j * mu_j
            gmu_j = gmuij * mu_i * mu_i
            gpt = -w * gFG * isr
            gp_i = gpt * rho_j
            gp_j = gpt * rho_i
            grho_i = S(0.5) * w * c_i * gFu_i + gpt * (p_j - pt)
            grho_j = S(0.5) * w * c_j * gFu_j + gpt * (p_i - pt)
            gu_i = w * (vis * gF + S(0.5) * rho_i * (c_i * gF - gFu_i * Gv))
            gu_j = w * (S(0.5) * rho_j * (c_j * gF - gFu_j * Gv) - vis * gF)
            gut_i = (S(0.5) * w * rho_i * gFu_i) * Gv
            gut_j = (S(0.5) * w * rho_j * gFu_j) * Gv
            gD = S(-2.0) * w * muij * xG * gFdu * iD2 * iD
            gx = Hu + (w * muij * gFdu * iD2) * Gv + (gD * (S(1.0) / r_ij)) * x_ij
            gDh_i, gDh_j = pk.supportAdjoint(gD * S(LAPLACIAN_REG_N), h_i, h_j)
            if p.hasRPositions:
                wp.atomic_add(p.rPositions, j, -gx)
            if p.hasRSupports:
                wp.atomic_add(p.rSupports, j, gh_j + gDh_j)
            if p.hasValues:
                gj = fieldRow(p.gValues, bj)
                wp.atomic_add(gj, 0, gp_j)
                wp.atomic_add(gj, 1, grho_j)
                wp.atomic_add(gj, 2, gV_j)
                wp.atomic_add(gj, 3, gmu_j)
                for c in range(wp.static(D)):
                    wp.atomic_add(gj, 4 + c, gu_j[c])
                    wp.atomic_add(gj, wp.static(4 + D) + c, gut_j[c])
            for c in range(wp.static(D)):
                acc[c] = gx[c]
                acc[wp.static(D + 5) + c] = gu_i[c]
                acc[wp.static(2 * D + 5) + c] = gut_i[c]
            acc[wp.static(D)] = gh_i + gDh_i
            acc[wp.static(D + 1)] = gp_i
            acc[wp.static(D + 2)] = grho_i
            acc[wp.static(D + 3)] = gV_i
            acc[wp.static(D + 4)] = gmu_i
        return acc

    rowSum = _neighborSum(pair, cfg, False, X, ACC, _pairOnceSkip(cfg), _pairOnceStop(cfg))
    admitted = _queryAdmitted(cfg)

    def momentumVJP(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                    adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                    cotangents: X, fieldWidth: wp.int32):
        i = wp.tid()
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, 0, fieldWidth, queryState,
                         referenceState, domainState, correctionData, kernelProperties,
                         cotangents)
            if cotangents.hasQPositions:
                gx = V()
                for c in range(wp.static(D)):
                    gx[c] = val[c]
                wp.atomic_add(cotangents.qPositions, i, gx)
            if cotangents.hasQSupports:
                wp.atomic_add(cotangents.qSupports, i, val[wp.static(D)])
            if cotangents.hasValues:
                bi = i * fieldWidth
                for c in range(wp.static(D + 4)):
                    wp.atomic_add(cotangents.gValues, bi + c, val[wp.static(D + 1) + c])
                for c in range(wp.static(D)):
                    wp.atomic_add(cotangents.gValues, bi + 4 + wp.static(D) + c,
                                  val[wp.static(2 * D + 5) + c])

    return _kernel(momentumVJP, "momentumVJP", cfg)


def momentumVJPSpecialized(config: dict):
    """`ReverseSpec.specialize` of the Momentum: every configuration with a known kernel and
    support scheme (the reverse spec's eligibility requires one)."""
    cfg = configurationOf(config)
    return None if cfg is None else _momentumVJPKernel(cfg)


@functools.cache
def _covarianceKernel(cfg: Configuration):
    """The Covariance's kernel (`covariance.covarianceKernel`: thread (i, k), k < d^2 a
    matrix element, k = d^2 the neighbour count) for one configuration, without CRK and
    renormalization (G_ij and W_ij the specialised kernel's)."""
    D, S = cfg.dim, cfg.scalar
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    pk = pairKernels(cfg.kernel, cfg.supportMode, D, S)
    dd = D * D

    @specialFunction("covariance_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: X):
        res = S(0.0)
        if k < F:
            a = k / wp.static(D)
            b = k - a * wp.static(D)
            Gv = pk.gradW_ij(x_ij, h_i, r.supports[j])
            res = -apparentVolume_j(r, corr, j) * x_ij[a] * Gv[b]
        else:
            if pk.W_ij(x_ij, h_i, r.supports[j]) > S(0.0):
                res = S(1.0)
        return res

    admitted = _queryAdmitted(cfg)
    if cfg.wide:
        return _covarianceRowKernel(cfg, pk, admitted)
    rowSum = _neighborSum(pair, cfg, False, X)

    def covariance(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                   adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                   out: wp.array(dtype=S), count: wp.array(dtype=wp.int32)):
        tid = wp.tid()
        i = tid / wp.static(dd + 1)
        k = tid - i * wp.static(dd + 1)
        val = S(0.0)
        if admitted(queryState.kinds[i]):
            val = rowSum(adjacencyState, gridState, i, k, wp.static(dd), queryState,
                         referenceState, domainState, correctionData, kernelProperties,
                         referenceState.masses)
        if k < wp.static(dd):
            if wp.static(cfg.calibrate):
                val = val * kernelProperties.normalizationCoefficient
            out[i * wp.static(dd) + k] = val
        else:
            count[i] = wp.int32(val + S(0.5))

    return _kernel(covariance, "covariance", cfg)


def _covarianceRowKernel(cfg: Configuration, pk, admitted):
    """The Covariance's kernel with one thread per query on the CPU (`Configuration.wide`):
    thread (i, 0) sums the whole matrix and the count in one traversal (grad W and W once per
    pair instead of once per element), the row's other threads return at once (the launch
    keeps its N (d^2 + 1) threads). Each element adds ``(-V_j x_ij[a]) G_ij[b]`` in the row's
    order, as the per-element threads do: the same bits."""
    D, S = cfg.dim, cfg.scalar
    dd = D * D
    V = wp.types.vector(length=D, dtype=S)
    P, DOM, C, KS, A, G = _structs(cfg)
    X = wp.array(dtype=S)
    ACC = wp.types.vector(length=dd + 1, dtype=S)

    @specialFunction("covarianceRow_" + cfg.tag)
    def pair(i: wp.int32, j: wp.int32, k: wp.int32, F: wp.int32, x_ij: V, h_i: S, q: P, r: P,
             corr: C, ks: KS, extra: X):
        res = ACC()
        h_j = r.supports[j]
        Gv = pk.gradW_ij(x_ij, h_i, h_j)
        u = -apparentVolume_j(r, corr, j) * x_ij
        for a in range(wp.static(D)):
            for b in range(wp.static(D)):
                res[a * wp.static(D) + b] = u[a] * Gv[b]
        if pk.W_ij(x_ij, h_i, h_j) > S(0.0):
            res[wp.static(dd)] = S(1.0)
        return res

    rowSum = _neighborSum(pair, cfg, False, X, ACC)

    def covariance(queryState: P, referenceState: P, domainState: DOM, useAdjacency: wp.bool,
                   adjacencyState: A, gridState: G, correctionData: C, kernelProperties: KS,
                   out: wp.array(dtype=S), count: wp.array(dtype=wp.int32)):
        tid = wp.tid()
        i = tid / wp.static(dd + 1)
        if tid - i * wp.static(dd + 1) == 0:
            val = ACC()
            if admitted(queryState.kinds[i]):
                val = rowSum(adjacencyState, gridState, i, 0, wp.static(dd), queryState,
                             referenceState, domainState, correctionData, kernelProperties,
                             referenceState.masses)
            for k in range(wp.static(dd)):
                c = val[k]
                if wp.static(cfg.calibrate):
                    c = c * kernelProperties.normalizationCoefficient
                out[i * wp.static(dd) + k] = c
            count[i] = wp.int32(val[wp.static(dd)] + S(0.5))

    return _kernel(covariance, "covariance", cfg)


def covarianceSpecialized(config: dict):
    """`OperatorSpec.specialize` of the Covariance: the calls without CRK and
    renormalization (the renormalization builder's C_i and the consistent Laplacian's)."""
    if config["useCRK"] or config["useGradientRenormalization"]:
        return None
    cfg = configurationOf(config)
    return None if cfg is None else _covarianceKernel(_widened(cfg, config))


# the building blocks, for the specialised kernels of other layers (the consistent
# Laplacian's moments kernel, `corrections._laplacianKernels`)
neighborSum = _neighborSum
queryAdmitted = _queryAdmitted
specializedKernel = _kernel
specializedStructs = _structs
