"""The native route: ddops' subdomains and coarse basis handed to PETSc's own PCMG and PCASM.

:class:`~ddops.petsc.SchwarzPC` applies ddops' operator inside a ``PCPYTHON``;
:func:`setup_native` instead builds only the *data* of the two-level method
with ddops and composes it with PETSc's machinery, so that every solve runs
in PETSc and the coarse solver is any PETSc solver the options database
names::

    ksp.setOperators(A)
    native = setup_native(ksp, coarse="gdsw")   # -ddops_* options override the keywords
    ksp.setFromOptions()                        # -mg_coarse_pc_type telescope, ...
    ksp.solve(b, x)

What :func:`setup_native` builds, on every rank of the operator's communicator,
from the same options (``-<prefix>ddops_*``) and the same rank decomposition
as :class:`~ddops.petsc.SchwarzPC`:

* the decomposition of :func:`~ddops.petsc.decomposition.rank_decomposition`
  (each rank cuts its own rows into its own parts);
* the **overlapping subdomains of the rank** as ``IS`` (global indices, the
  overlap already in them) and their non-overlapping parts (``is_local``,
  used by ``-mg_levels_pc_asm_type restrict``), given to PCASM with
  ``PCASMSetLocalSubdomains`` and ``PCASMSetOverlap(0)``;
* the **coarse basis Phi as a distributed PETSc Mat** (``n x n0``, AIJ): each
  rank computes and inserts its own rows of Phi (GDSW/RGDSW rank-locally from
  its own rows of ``A``, as :class:`ddops.distributed.DistributedTwoLevelSchwarz`
  does); Phi is never gathered.  Its columns are spread over the ranks as
  PETSc decides.

and the PC it configures (a two-level PCMG; PCASM alone for ``-ddops_coarse none``):

======================================  ==========================================
level 1 (fine) smoother                 one Richardson step (``-mg_levels_ksp_type
                                        richardson``, ``-mg_levels_ksp_max_it 1``; from
                                        the zero guess of the additive cycle it is
                                        ``M_ASM b``), PCASM on the
                                        ddops subdomains, ``PCASMType`` basic for
                                        ``-ddops_variant additive`` (restrict for
                                        ``restricted``), sub solver LU
                                        (``-mg_levels_sub_pc_type lu``)
interpolation                           Phi (restriction: its transpose)
coarse operator                         Galerkin ``Phi^T A Phi`` (``-pc_mg_galerkin both``,
                                        PETSc's ``MatPtAP``)
cycle                                   ``-pc_mg_type additive``: ``M = M_ASM + Phi A_0^{-1}
                                        Phi^T``, ddops' additive two-level form
coarse solver                           PETSc's default (``preonly`` with LU on one rank,
                                        redundant LU on several) or anything the user
                                        gives: ``-mg_coarse_pc_type telescope``,
                                        ``redundant``, ``gamg``, ``lu`` with MUMPS, a
                                        Krylov method with ``-mg_coarse_ksp_type``
======================================  ==========================================

The settings in the table are *defaults*: they are written into the options
database under the PC's prefix only where the database has no value, and the
types are set from code, so ``KSPSetFromOptions`` after :func:`setup_native`
applies whatever the user gave (``-pc_mg_type multiplicative``,
``-mg_levels_pc_asm_type restrict``, ``-mg_levels_sub_pc_type icc``, ...).
Do not pass ``-pc_type`` (it would replace the PCMG).

With ``-ddops_variant hybrid`` the PC is PCDEFLATION instead: deflation
space Phi, coarse problem ``Phi^T A Phi`` solved by PETSc's deflation KSP
(``-deflation_*``, telescoped with ``-pc_deflation_reduction_factor``), and
PCASM (basic, LU) on the ddops subdomains as its additional PC
(``-deflation_pc_*``).  With the initial guess PCDEFLATION computes, CG
takes the iterations of ddops' ``hybrid`` variant (``Q + (I - QA) M (I -
AQ)``).  petsc4py 3.18 wraps neither ``PCDeflationSetSpace`` nor
``PCDeflationGetPC``: they are called through ctypes, and the PC is set up
inside :func:`setup_native` (so its options must be in the database then).

The decomposition and Phi are built once, from the operator set when
:func:`setup_native` is called; call it again for a new matrix.
:class:`NativePC` does so in every ``PCSetUp``, and for a matrix with the
pattern of its last full set-up (and the same options) keeps the decomposition
and the subdomain ``IS`` and rebuilds only Phi and the inner PC (whose
factorisations and Galerkin product PETSc computes again).  With
``-ddops_reuse_coarse`` (PCMG) or without a coarse space it keeps the inner PC
too: PETSc's numeric set-up on the new operators, the subdomain factorisations
on their symbolic factorisations.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..linalg.local_solvers import thread_limit
from ._lifetime import track, untrack
from .decomposition import RankDecomposition, check_ownership, local_rows, rank_decomposition
from .options import OPTIONS, SchwarzOptions
from .pc import (
    DEFAULT_NULL_SPACE,
    RANK_LOCAL_BASES,
    _mpi_land,
    near_null_space,
    null_space_rows,
    resolve_coarse,
)

__all__ = ["DEFLATION_COARSE_SOLVER", "DEFLATION_DEFAULTS", "NATIVE_DEFAULTS", "NativePC",
           "NativeSchwarz", "owned_coarse_rows", "setup_native"]

#: Options written into the database under the PC's prefix unless present (see the module).
NATIVE_DEFAULTS = {
    "pc_mg_galerkin": "both",
    "mg_levels_ksp_type": "richardson",
    "mg_levels_ksp_max_it": 1,
    "mg_levels_sub_ksp_type": "preonly",
    "mg_levels_sub_pc_type": "lu",
}

#: Options of the one-level PCASM (``-ddops_coarse none``), under the PC's prefix.
ONE_LEVEL_DEFAULTS = {
    "sub_ksp_type": "preonly",
    "sub_pc_type": "lu",
}

#: ``-ddops_variant`` of the native route and the PCASM type it gives (``hybrid``: PCDEFLATION).
NATIVE_VARIANTS = {"additive": "basic", "restricted": "restrict", "hybrid": "basic"}

#: Options of PCDEFLATION's additional PC (PCASM), under the PC's prefix.
DEFLATION_DEFAULTS = {
    "deflation_pc_sub_ksp_type": "preonly",
    "deflation_pc_sub_pc_type": "lu",
}

#: The direct solver of PCDEFLATION's coarse problem where PETSc has MUMPS (PCDEFLATION itself
#: picks SuperLU_DIST, whose communicators made PETSc 3.18 abort at exit now and then).
DEFLATION_COARSE_SOLVER = {"deflation_pc_factor_mat_solver_type": "mumps"}

#: ``PCASMType`` values of the C enum (for the calls through ctypes).
_ASM_TYPE_VALUES = {"basic": 3, "restrict": 1, "interpolate": 2, "none": 0}


class NativeSchwarz:
    """What :func:`setup_native` built; keep it alive as long as the PC is used.

    Attributes
    ----------
    pc : petsc4py.PETSc.PC
        The configured PC (type ``mg``; ``deflation`` for ``-ddops_variant hybrid``;
        ``asm`` for one level).
    form : str
        ``"PCMG, two levels"``, ``"PCDEFLATION with PCASM"`` or ``"PCASM"``.
    options : SchwarzOptions
        The settings in force (keywords overridden by ``-<prefix>ddops_*``).
    parts : RankDecomposition
        The decomposition and its map to the ranks (as ``SchwarzPC.parts``).
    Phi : petsc4py.PETSc.Mat or None
        The coarse basis, ``n x n0``, each rank holding its own rows.
    subdomains, subdomains_local : list of petsc4py.PETSc.IS
        This rank's overlapping subdomains and their non-overlapping parts.
    coarse_dim : int
        ``n0`` (0 for one level).
    null_space_source : str
        Where the coarse space's null space came from.
    null_space : numpy.ndarray or None
        That null space (the rows this rank read), kept for a numeric set-up.
    coarse_rows : scipy.sparse.csr_matrix or None
        This rank's rows of Phi.
    setup_seconds : float
        Wall time of this rank's :func:`setup_native` (the PETSc set-up of the
        PC comes later, in ``KSPSetUp``).
    """

    def __init__(self, pc: Any, options: SchwarzOptions, parts: RankDecomposition,
                 Phi: Any, subdomains: list, subdomains_local: list, coarse_dim: int,
                 null_space_source: str, setup_seconds: float, null_space: Any = None,
                 coarse_rows: Any = None) -> None:
        self.pc = pc
        self.null_space = null_space
        self.coarse_rows = coarse_rows
        self.options = options
        self.parts = parts
        self.Phi = Phi
        self.subdomains = subdomains
        self.subdomains_local = subdomains_local
        self.coarse_dim = coarse_dim
        self.null_space_source = null_space_source
        self.setup_seconds = setup_seconds
        self.form = ("PCASM" if Phi is None else "PCDEFLATION with PCASM"
                     if options.variant == "hybrid" else "PCMG, two levels")

    def summary(self) -> list[str]:
        """A few lines saying what was built (the PETSc side is printed by ``-ksp_view``)."""
        o, d, p = self.options, self.parts.decomposition, self.parts.parts_per_rank
        return [
            f"ddops native route: {self.form}, variant {o.variant}",
            f"  subdomains: {d.num_subdomains} ({int(p.min())} to {int(p.max())} per rank, "
            f"partitioner {o.partitioner}), overlap {o.overlap} (in the IS; PCASM overlap 0)",
            f"  coarse space: {resolve_coarse(o.coarse) or 'none'}, dimension "
            f"{self.coarse_dim}",
            f"  null space: {self.null_space_source}",
            f"  set-up on rank 0: {self.setup_seconds:.3g} s",
        ]

    def destroy(self) -> None:
        """Destroy the Mat and the IS (the PC keeps its own references)."""
        for obj in [self.Phi, *self.subdomains, *self.subdomains_local]:
            if obj is not None:
                obj.destroy()
        self.Phi = None
        self.subdomains = self.subdomains_local = []


def owned_coarse_rows(parts: RankDecomposition, comm: Any, coarse: str,
                      null_space: np.ndarray | None,
                      options: dict | None = None) -> sp.csr_matrix | None:
    """This rank's rows of Phi (``num_rows x n0``, CSR), as the ddops preconditioners build it.

    One rank: the serial basis of :func:`ddops.coarse_basis` (what
    :class:`ddops.TwoLevelSchwarz` uses).  Several ranks: the construction of
    :class:`ddops.distributed.DistributedTwoLevelSchwarz` from owned rows:
    GDSW/RGDSW with the owner labels rank-locally (the harmonic extension on
    the rank's rows), GenEO from the rows its subdomains' grown sets reach,
    AGDSW from the closed parts around the rank's components (with ``neumann=``
    the matrices of those parts fetched from their ranks), the other bases from
    the replicated decomposition; a matrix basis without owner labels gathers the
    matrix (as there).  ``None`` for ``coarse="none"``.  ``options``: keyword
    arguments of :func:`ddops.coarse_basis` for the space
    (``ddops.SchwarzOptions.coarse_keywords``).
    """
    options = dict(options or {})
    coarse = resolve_coarse(coarse)
    if coarse is None:
        return None
    from ..dd.coarse import MATRIX_COARSE_BASES
    from ..dd.coarse import coarse_basis as build_coarse_basis

    d = parts.decomposition
    rows = parts.rows
    if comm is None:
        A = ((rows + rows.T) * 0.5).tocsr()  # as the serial preconditioner does
        Phi = build_coarse_basis(d, coarse, A=A, null_space=null_space, **options)
        return sp.csr_matrix(Phi, dtype=np.float64)
    from ..distributed import DistributedLayout
    from ..distributed.precond import rank_local_agdsw, rank_local_gdsw_rows, rank_local_geneo

    layout = DistributedLayout(d, comm, A=rows, subdomain_ranks=parts.subdomain_ranks)
    if coarse == "geneo" or (coarse == "agdsw" and d.owner is not None):
        # GenEO: from the rows its subdomains' (grown) sets reach; AGDSW: from the closed
        # parts around the rank's components (as the distributed preconditioner builds them)
        build = rank_local_geneo if coarse == "geneo" else rank_local_agdsw
        Phi_ext, _ = build(layout, sp.csr_matrix(rows, dtype=np.float64), null_space, options)
        return None if Phi_ext is None else sp.csr_matrix(Phi_ext[: layout.num_owned])
    # rank-locally for GDSW/RGDSW only: rank_local_gdsw_rows builds no other basis
    if coarse in RANK_LOCAL_BASES and d.owner is not None:
        Phi_ext, _ = rank_local_gdsw_rows(layout, sp.csr_matrix(rows, dtype=np.float64),
                                           coarse, null_space,
                                           extension_solver=options.get("extension_solver",
                                                                        "auto"))
        return sp.csr_matrix(Phi_ext[: layout.num_owned], dtype=np.float64)
    if coarse in MATRIX_COARSE_BASES:
        # a matrix basis without owner labels: the serial basis on the gathered matrix
        A = layout.allgather_rows(rows)
        Phi = build_coarse_basis(d, coarse, A=((A + A.T) * 0.5).tocsr(), null_space=null_space,
                                 **options)
    else:
        Phi = build_coarse_basis(d, coarse, A=None, null_space=null_space, **options)
    return sp.csr_matrix(sp.csr_matrix(Phi)[layout.owned], dtype=np.float64)


def _petsc_rows(P: Any, rows: sp.csr_matrix, n0: int) -> Any:
    """A PETSc AIJ ``n x n0`` matrix from this rank's rows (columns split as PETSc decides)."""
    from petsc4py import PETSc

    m, n = rows.shape[0], P.getSize()[0]
    rows = sp.csr_matrix(rows)
    rows.sort_indices()
    M = PETSc.Mat().createAIJ(((m, n), (PETSc.DECIDE, n0)), comm=P.getComm())
    M.setPreallocationCSR((rows.indptr.astype(PETSc.IntType),
                           rows.indices.astype(PETSc.IntType), rows.data))
    M.assemble()
    return M


def _subdomain_sets(parts: RankDecomposition, rank: int) -> tuple[list, list]:
    """This rank's subdomains (overlapping) and their owned parts as ``IS`` on ``COMM_SELF``."""
    from petsc4py import PETSc

    d = parts.decomposition
    first = int(parts.parts_per_rank[:rank].sum())
    rstart, rend = parts.row_range
    owner = d.owner[rstart:rend]
    overlapping, local = [], []
    for i in range(first, first + int(parts.parts_per_rank[rank])):
        indices = d.indices[d.offsets[i]:d.offsets[i + 1]]
        overlapping.append(PETSc.IS().createGeneral(indices.astype(PETSc.IntType),
                                                    comm=PETSc.COMM_SELF))
        mine = (np.flatnonzero(owner == i) + rstart).astype(PETSc.IntType)
        local.append(PETSc.IS().createGeneral(mine, comm=PETSc.COMM_SELF))
    return overlapping, local


def _set_defaults(prefix: str, defaults: dict) -> None:
    """Write ``defaults`` into the options database under ``prefix`` where it has no value."""
    from petsc4py import PETSc

    db = PETSc.Options()
    for key, value in defaults.items():
        if not db.hasName(f"{prefix}{key}"):
            db.setValue(f"{prefix}{key}", value)


def _configure_asm(pc: Any, subdomains: list, subdomains_local: list, variant: str) -> None:
    from petsc4py import PETSc

    pc.setType(PETSc.PC.Type.ASM)
    pc.setASMType(getattr(PETSc.PC.ASMType, NATIVE_VARIANTS[variant].upper()))
    pc.setASMOverlap(0)  # the overlap is in the IS already
    pc.setASMLocalSubdomains(len(subdomains), subdomains, subdomains_local)


def _petsc_library() -> Any:
    """PETSc's C library through ctypes (the symbols petsc4py 3.18 does not wrap)."""
    import ctypes

    from petsc4py import PETSc

    return ctypes.CDLL(PETSc.__file__)  # dlsym searches the module's dependencies: libpetsc


def _check_call(name: str, code: int) -> None:
    if code != 0:
        raise RuntimeError(f"PETSc's {name} returned error code {code}")


def _configure_deflation(pc: Any, Phi: Any, subdomains: list, subdomains_local: list) -> None:
    """PCDEFLATION with the space Phi and PCASM (basic, on the ddops subdomains) as its PC.

    petsc4py 3.18 wraps neither ``PCDeflationSetSpace`` nor ``PCDeflationGetPC``:
    they are called through ctypes with the objects' handles.  PCDEFLATION
    creates its additional PC in ``PCSetUp`` (type ``none``), so the PC is
    set up here, then that PC becomes PCASM and is set up again.
    """
    import ctypes

    from petsc4py import PETSc

    lib = _petsc_library()
    ptr = ctypes.c_void_p
    integer = ctypes.c_int64 if np.dtype(PETSc.IntType).itemsize == 8 else ctypes.c_int32
    pc.setType(PETSc.PC.Type.DEFLATION)
    _check_call("PCDeflationSetSpace",
                lib.PCDeflationSetSpace(ptr(pc.handle), ptr(Phi.handle), ctypes.c_int(0)))
    pc.setFromOptions()  # the user's -pc_deflation_*, -deflation_* (read by PCSetUp_Deflation)
    pc.setUp()
    inner = ptr()
    _check_call("PCDeflationGetPC", lib.PCDeflationGetPC(ptr(pc.handle), ctypes.byref(inner)))
    _check_call("PCSetType", lib.PCSetType(inner, b"asm"))
    _check_call("PCASMSetType", lib.PCASMSetType(inner, ctypes.c_int(_ASM_TYPE_VALUES["basic"])))
    _check_call("PCASMSetOverlap", lib.PCASMSetOverlap(inner, integer(0)))
    count = len(subdomains)
    overlapping = (ptr * count)(*[i.handle for i in subdomains])
    local = (ptr * count)(*[i.handle for i in subdomains_local])
    _check_call("PCASMSetLocalSubdomains",
                lib.PCASMSetLocalSubdomains(inner, integer(count), overlapping, local))
    _check_call("PCSetFromOptions", lib.PCSetFromOptions(inner))  # -deflation_pc_pc_asm_*, sub
    _check_call("PCSetUp", lib.PCSetUp(inner))


def setup_native(ksp_or_pc: Any, *, coordinates: Any = None, **options: Any) -> NativeSchwarz:
    """Configure a PETSc PC as PCMG(PCASM on the ddops subdomains, Phi) from ddops' decomposition.

    Collective over the operator's communicator; the operators must be set
    (``KSPSetOperators``) before.  Call ``KSPSetFromOptions`` afterwards to
    apply the user's options (the coarse solver, the cycle, the sub solvers).

    Parameters
    ----------
    ksp_or_pc : petsc4py.PETSc.KSP or petsc4py.PETSc.PC
        The KSP (its PC is configured) or the PC.
    coordinates : array, optional
        Coordinates of this rank's rows, for ``-ddops_partitioner rcb``.
    **options
        Defaults of :data:`ddops.petsc.options.OPTIONS` (``subdomains``,
        ``overlap``, ``coarse``, ``variant``, ``partitioner``, ``null_space``,
        ``block_size``, ``seed``, ``threads``, the coarse spaces' options such as
        ``agdsw_threshold``); ``-<prefix>ddops_*`` overrides them.
        ``variant`` must be ``additive`` (PCMG, PCASM basic), ``restricted``
        (PCMG, PCASM restrict) or ``hybrid`` (PCDEFLATION with Phi and PCASM
        basic, set up here: its options must be in the database before the
        call); ``local_solver`` is not used (the sub solver is PETSc's:
        ``-mg_levels_sub_pc_type``, ``-deflation_pc_sub_pc_type``);
        ``factor_dtype`` ``float32`` and ``kernel`` are refused (PETSc factorises
        the subdomains; its ``MatSetNullSpace`` is the kernel).

    Returns
    -------
    NativeSchwarz
        The decomposition, Phi and the IS; keep it while the PC is in use.

    Raises
    ------
    ValueError
        A variant the native route does not have, no operators set, a bad option.
    """
    from petsc4py import PETSc

    start = time.perf_counter()
    pc = ksp_or_pc.getPC() if isinstance(ksp_or_pc, PETSc.KSP) else ksp_or_pc
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"setup_native got unknown options {unknown}; the options are "
                        f"{sorted(OPTIONS)}")
    prefix = pc.getOptionsPrefix() or ""
    opts = SchwarzOptions(**options).with_database(prefix)
    _check_native(opts)
    try:
        _, P = pc.getOperators()
    except PETSc.Error as exc:
        raise ValueError("setup_native needs the operators: call KSPSetOperators first") from exc
    size = P.getComm().getSize()
    comm = P.getComm().tompi4py() if size > 1 else None
    block_size = opts.block_size or max(int(P.getBlockSize()), 1)
    parts = rank_decomposition(P, comm, subdomains=opts.subdomains, overlap=opts.overlap,
                               partitioner=opts.partitioner, block_size=block_size,
                               seed=opts.seed, coordinates=coordinates)
    if comm is not None:
        check_ownership(parts.decomposition, parts.subdomain_ranks, P.getOwnershipRanges())
    coarse = resolve_coarse(opts.coarse)
    if coarse is None:  # one level reads no null space (checked all the same)
        near_null_space(P, None, opts.null_space)
        null_space, source = None, DEFAULT_NULL_SPACE
    else:  # only the rows the coarse basis reads (see null_space_rows)
        wanted = None if comm is None else null_space_rows(parts, comm, coarse)
        null_space, source = near_null_space(P, comm, opts.null_space, wanted)
    subdomains, subdomains_local = _subdomain_sets(parts, P.getComm().getRank())
    return _configure(pc, P, comm, opts, parts, null_space, source, subdomains,
                      subdomains_local, start)


def _check_native(opts: SchwarzOptions) -> None:
    """Refuse what the native route cannot do (PETSc solves the subdomains and A_0)."""
    if opts.variant not in NATIVE_VARIANTS:
        raise ValueError(f"-ddops_variant {opts.variant}: the native route has "
                         f"{tuple(NATIVE_VARIANTS)} (PCMG with PCASM basic or restrict, "
                         "PCDEFLATION); use ddops.petsc.SchwarzPC for the others")
    if opts.factor_dtype != "float64":
        raise ValueError(f"-ddops_factor_dtype {opts.factor_dtype}: the native route's "
                         "subdomain factorisations are PETSc's (-mg_levels_sub_pc_type, in "
                         "PETSc's scalar type); use ddops.petsc.SchwarzPC for float32 factors")
    if opts.kernel is not None:
        raise ValueError("-ddops_kernel: the native route takes the kernel of A from PETSc "
                         "(MatSetNullSpace, which KSP projects out); use ddops.petsc.SchwarzPC "
                         "for ddops' own")


def _keeps_inner_pc(native: NativeSchwarz | None) -> bool:
    """Whether a numeric set-up keeps the inner PC itself (and with it PETSc's symbolic
    factorisations): when nothing of it depends on the values but the operators, that is
    one level (PCASM alone) or a kept Phi (``-ddops_reuse_coarse``) under PCMG.  A new Phi,
    and PCDEFLATION, get a new inner PC."""
    if native is None:
        return False
    if native.Phi is None:
        return True
    return bool(native.options.reuse_coarse) and native.options.variant != "hybrid"


def _configure(pc: Any, P: Any, comm: Any, opts: SchwarzOptions, parts: RankDecomposition,
               null_space: Any, source: str, subdomains: list, subdomains_local: list,
               start: float, Phi: Any = None, rows: Any = None) -> NativeSchwarz:
    """Phi (unless given with its ``rows``) and the PC on a decomposition already built."""
    from petsc4py import PETSc

    prefix = pc.getOptionsPrefix() or ""
    coarse = resolve_coarse(opts.coarse)
    if Phi is None:
        keywords = {} if coarse is None else opts.schwarz_options(coarse).coarse_keywords()
        with thread_limit(opts.threads):
            rows = owned_coarse_rows(parts, comm, opts.coarse, null_space, keywords)
    coarse_dim = 0 if rows is None else int(rows.shape[1])
    if coarse_dim and Phi is None:
        Phi = _petsc_rows(P, rows, coarse_dim)
    if coarse_dim and opts.variant == "hybrid":
        _set_defaults(prefix, DEFLATION_DEFAULTS)
        if PETSc.Sys.hasExternalPackage("mumps"):
            _set_defaults(prefix, DEFLATION_COARSE_SOLVER)
        _configure_deflation(pc, Phi, subdomains, subdomains_local)
    elif coarse_dim:
        _set_defaults(prefix, NATIVE_DEFAULTS)
        pc.setType(PETSc.PC.Type.MG)
        pc.setMGLevels(2)
        pc.setMGType(PETSc.PC.MGType.ADDITIVE)
        pc.setMGInterpolation(1, Phi)
        smoother = pc.getMGSmoother(1)
        smoother.setType(PETSc.KSP.Type.RICHARDSON)  # one step: B b from a zero guess
        smoother.setTolerances(max_it=1)
        _configure_asm(smoother.getPC(), subdomains, subdomains_local, opts.variant)
    else:
        _set_defaults(prefix, ONE_LEVEL_DEFAULTS)
        _configure_asm(pc, subdomains, subdomains_local, opts.variant)
    return NativeSchwarz(pc, opts, parts, Phi, subdomains, subdomains_local, coarse_dim,
                         source, time.perf_counter() - start, null_space, rows)


class NativePC:
    """The native route as a PETSc PC of type ``python``: chosen from the command line.

    ``-pc_type python -pc_python_type ddops.petsc.NativePC`` (or
    ``pc.setPythonContext(NativePC(coarse="gdsw"))``) builds, in every
    ``PCSetUp``, an inner PC with :func:`setup_native` on the operators PETSc
    hands it (PCMG with PCASM on the ddops subdomains and Phi; PCDEFLATION for
    ``-ddops_variant hybrid``; PCASM alone for ``-ddops_coarse none``) and
    applies it.  The inner PC has the outer PC's options prefix, so the
    options of :func:`setup_native` apply as they are: ``-ddops_*``,
    ``-mg_coarse_pc_type telescope``, ``-mg_levels_sub_pc_type``, ...; the
    defaults :func:`setup_native` writes into the database under that prefix
    stay there, as with :func:`setup_native` itself.

    PETSc calls ``setUp`` again when the operators change: a new matrix, or new
    values in the same one (not when ``KSPSetReusePreconditioner`` is set, and
    not for ``KSPSetOperators`` with the unchanged matrix).  When every rank's
    rows have the pattern of the last full set-up and the options are the same,
    only the numeric phase runs: the decomposition and the subdomain ``IS`` are
    kept, Phi is built again for the new values and a new inner PC is set up on
    them; with ``-ddops_reuse_coarse`` (PCMG) or without a coarse space the inner
    PC itself is kept and set up again on the new operators, so that PETSc
    refactorises the subdomain matrices on the symbolic factorisations it holds.
    Otherwise everything is rebuilt.  ``-ksp_view`` prints what was built and the inner PC.

    Parameters
    ----------
    coordinates : array, optional
        Coordinates of this rank's rows, for ``-ddops_partitioner rcb``.
    **options
        As for :func:`setup_native`; ``-<prefix>ddops_*`` overrides them.

    Attributes
    ----------
    native : NativeSchwarz or None
        What the last ``setUp`` built (its ``pc`` is the inner PC).
    setups : int
        How many times the PC was built from scratch.
    updates : int
        How many set-ups ran the numeric phase only (the same pattern and options).
    last_setup : {"full", "numeric"} or None
        What the last ``setUp`` ran.
    """

    def __init__(self, *, coordinates: Any = None, **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"NativePC got unknown options {unknown}; the options are "
                            f"{sorted(OPTIONS)}")
        variant = SchwarzOptions(**options).variant  # a bad value is named now, not at set-up
        if variant not in NATIVE_VARIANTS:
            raise ValueError(f"variant {variant!r}: the native route has "
                             f"{tuple(NATIVE_VARIANTS)}; use ddops.petsc.SchwarzPC for the others")
        self._options = options
        self.coordinates = coordinates
        self.native: NativeSchwarz | None = None
        self.setups = self.updates = 0
        self.last_setup: str | None = None
        self._pattern: Any = None  # this rank's rows' (indptr, indices) at the last full set-up

    # -- PETSc's python-context protocol --------------------------------------------------
    def create(self, pc: Any) -> None:
        """Record the PC, so that it is released before the interpreter exits (PCPythonSetContext).

        A KSP left to the garbage collector is destroyed by ``PetscFinalize``,
        after the interpreter is gone (see ``ddops.petsc._lifetime``).
        """
        track(pc)

    def setUp(self, pc: Any) -> None:  # noqa: N802 - PETSc's method names
        """Build the inner PC from the current operators (again after a change): everything,
        or for the same pattern and options the numeric phase only."""
        from petsc4py import PETSc

        A, P = pc.getOperators()
        old = self.native
        rows = self._same_pattern(pc, P)
        if rows is not None and _keeps_inner_pc(old):
            self._refresh(A, P, rows, old)
            self.updates += 1
            self.last_setup = "numeric"
            return
        inner = PETSc.PC().create(comm=pc.getComm())
        inner.setOptionsPrefix(pc.getOptionsPrefix())
        inner.setOperators(A, P)
        # the database's -pc_type python (this PC's own) must not reach the inner PC, which
        # shares the prefix so that -mg_*, -deflation_* and -ddops_* apply as they are
        db = PETSc.Options()
        hidden = {key: db.getString(key) for key in (f"{inner.getOptionsPrefix() or ''}pc_type",)
                  if db.hasName(key)}
        for key in hidden:
            db.delValue(key)
        native = None
        try:
            if rows is None:
                self._release()
                self._pattern = None
                native = setup_native(inner, coordinates=self.coordinates, **self._options)
                self._pattern = (native.parts.rows.indptr.copy(),
                                 native.parts.rows.indices.copy())
            else:
                native = self._numeric(inner, P, rows, old)
            self.native = native
            inner.setFromOptions()
            inner.setUp()
        except BaseException:
            if native is not None:
                native.destroy()
            inner.destroy()
            self.native = None
            self._pattern = None
            raise
        finally:
            for key, value in hidden.items():
                db.setValue(key, value)
                db.getString(key)  # read again: -options_left must not report it unused
        if rows is None:
            self.setups += 1
            self.last_setup = "full"
        else:
            self.updates += 1
            self.last_setup = "numeric"

    def _same_pattern(self, pc: Any, P: Any) -> Any:
        """This rank's rows when every rank's pattern and the options are those of the last
        full set-up (agreed over the ranks), else None."""
        native = self.native
        if native is None or self._pattern is None:
            return None
        opts = SchwarzOptions(**self._options).with_database(pc.getOptionsPrefix() or "")
        same = opts == native.options
        rows = None
        if same:
            try:
                rows = local_rows(P)
            except (TypeError, ValueError):
                same = False
            else:
                same = (np.array_equal(rows.indptr, self._pattern[0])
                        and np.array_equal(rows.indices, self._pattern[1]))
        if P.getComm().getSize() > 1:
            same = bool(P.getComm().tompi4py().allreduce(bool(same), op=_mpi_land()))
        return rows if same else None

    def _refresh(self, A: Any, P: Any, rows: Any, old: NativeSchwarz) -> None:
        """The kept inner PC on the new operators: PETSc's numeric set-up only (PCASM
        extracts the subdomain matrices into the ones it holds and factorises them on the
        symbolic factorisations it has; PCMG forms ``Phi^T A Phi`` again with the kept
        Phi)."""
        start = time.perf_counter()
        old.parts.rows = rows
        try:
            old.pc.setOperators(A, P)
            if old.Phi is not None:
                # PCMG keeps the operators its finest smoother was given while they are not
                # the PC's (a new Mat object): hand it the new ones
                old.pc.getMGSmoother(1).setOperators(A, P)
            old.pc.setUp()
        except BaseException:
            self._release()
            self._pattern = None
            raise
        old.setup_seconds = time.perf_counter() - start

    def _numeric(self, inner: Any, P: Any, rows: Any, old: NativeSchwarz) -> NativeSchwarz:
        """A new inner PC on the kept decomposition and IS, with Phi built for the new values
        (or kept with ``-ddops_reuse_coarse``)."""
        start = time.perf_counter()
        opts, parts = old.options, old.parts
        parts.rows = rows
        comm = P.getComm().tompi4py() if P.getComm().getSize() > 1 else None
        keep = bool(opts.reuse_coarse) and old.Phi is not None
        Phi, coarse_rows = (old.Phi, old.coarse_rows) if keep else (None, None)
        # the old inner PC goes; the IS (and a kept Phi) move to the new one
        old_pc = old.pc
        if not keep and old.Phi is not None:
            old.Phi.destroy()
        subdomains, subdomains_local = old.subdomains, old.subdomains_local
        old.Phi = None
        old.subdomains = old.subdomains_local = []
        old_pc.destroy()
        self.native = None
        return _configure(inner, P, comm, opts, parts, old.null_space, old.null_space_source,
                          subdomains, subdomains_local, start, Phi, coarse_rows)

    def apply(self, pc: Any, x: Any, y: Any) -> None:
        """``y = M x`` with the inner PC."""
        self.native.pc.apply(x, y)

    def applyTranspose(self, pc: Any, x: Any, y: Any) -> None:  # noqa: N802
        """``y = M^T x`` with the inner PC."""
        self.native.pc.applyTranspose(x, y)

    def preSolve(self, pc: Any, ksp: Any, b: Any, x: Any) -> None:  # noqa: N802
        """The inner PC's ``PCPreSolve``: PCDEFLATION's initial guess (``-ddops_variant hybrid``).

        PETSc calls the pre-solve hook of the KSP's own PC only; without this
        the inner PCDEFLATION would not project the initial guess and CG would
        not converge.  petsc4py 3.18 does not wrap ``PCPreSolve``: ctypes.
        """
        if self.native is not None and self.native.pc.getType() == "deflation":
            import ctypes

            ptr = ctypes.c_void_p
            _check_call("PCPreSolve",
                        _petsc_library().PCPreSolve(ptr(self.native.pc.handle), ptr(ksp.handle)))

    def postSolve(self, pc: Any, ksp: Any, b: Any, x: Any) -> None:  # noqa: N802
        """The inner PC's ``PCPostSolve`` (see :meth:`preSolve`)."""
        if self.native is not None and self.native.pc.getType() == "deflation":
            import ctypes

            ptr = ctypes.c_void_p
            _check_call("PCPostSolve",
                        _petsc_library().PCPostSolve(ptr(self.native.pc.handle), ptr(ksp.handle)))

    def view(self, pc: Any, viewer: Any) -> None:
        """Print what was built, then the inner PC (``-ksp_view``)."""
        if viewer.getType() != "ascii":
            return
        if self.native is None:
            viewer.printfASCII(f"ddops native route (ddops.petsc.NativePC), not set up; "
                               f"options {self._options}\n")
            return
        for line in self.native.summary():
            viewer.printfASCII(line + "\n")
        self.native.pc.view(viewer)

    def reset(self, pc: Any) -> None:
        """Drop the inner PC (PCReset)."""
        self._release()

    def destroy(self, pc: Any) -> None:
        """Drop the inner PC and forget the PC (PCDestroy, or another context or type)."""
        self._release()
        untrack(pc)

    def _release(self) -> None:
        if self.native is not None:
            inner = self.native.pc
            self.native.destroy()
            inner.destroy()
            self.native = None
