"""``SchwarzPC``: the ddops two-level Schwarz preconditioner as a PETSc PC of type ``python``.

Use it from the command line::

    mpiexec -n 4 python script.py -ksp_type cg -pc_type python \\
        -pc_python_type ddops.petsc.SchwarzPC -ddops_coarse gdsw -ddops_subdomains 16

or from code::

    pc = ksp.getPC()
    pc.setType(PETSc.PC.Type.PYTHON)
    pc.setPythonContext(SchwarzPC(coarse="rgdsw", overlap=2))
    ksp.setFromOptions()          # -ddops_* options still override the keywords

What ``setUp`` does, on every rank of the operator's communicator:

1. reads this rank's rows of the preconditioning matrix (``MatGetRow`` via
   ``getValuesCSR``: global column indices, never the other ranks' rows);
2. builds the decomposition with :func:`ddops.petsc.decomposition.rank_decomposition`:
   each rank cuts its own rows into its own parts, so the ddops ownership is
   PETSc's and vectors pass through without permutation; the decomposition
   itself (owner labels and subdomain indices, O(n) integers) is replicated
   on every rank, as :class:`ddops.distributed.DistributedLayout` requires;
3. takes the near-null space set with ``MatSetNearNullSpace`` (the rigid body
   modes PETSc users give GAMG) as the coarse space's null space.
   :class:`ddops.distributed.DistributedTwoLevelSchwarz` takes it as a global
   ``n x k`` array; for GDSW/RGDSW each rank fetches only the rows it reads
   (its own rows, subdomains and ghosts, and the interface:
   :func:`null_space_rows`), the other rows stay zero; the other coarse bases
   gather the whole vectors (their serial construction reads every row); one
   level reads none;
4. on one rank, builds the serial :class:`ddops.TwoLevelSchwarz`; on several,
   a :class:`ddops.distributed.DistributedLayout` with
   ``subdomain_ranks`` from step 2 and
   :class:`ddops.distributed.DistributedTwoLevelSchwarz` from the rank's own
   rows (its ghost rows come from their owners once; GDSW/RGDSW, GenEO and
   AGDSW are built rank-locally; the coarse matrix is factorised redundantly
   on every rank).

``apply`` and ``applyTranspose`` pass the local array of the PETSc vector
(this rank's rows, increasing global order) to ``matvec``/``rmatvec`` of
that operator.

A second ``setUp`` (PETSc calls it after ``KSPSetOperators`` with new values,
or another matrix) runs only the numeric phase when the matrix has the pattern
of the last full set-up on every rank (each rank compares its rows' ``indptr``
and ``indices``; the ranks agree) and the options are unchanged: the
decomposition, the layout and the symbolic data are kept and the
preconditioner's ``update`` recomputes the coarse basis (kept with
``-ddops_reuse_coarse``), ``A_0`` and the factorisations.  Otherwise (first
set-up, another pattern, other options) everything is built again.
:attr:`SchwarzPC.setups` and :attr:`SchwarzPC.updates` count the two.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..precond.schwarz import TwoLevelSchwarz
from ._collective import agree
from ._lifetime import track, untrack
from .decomposition import (
    RankDecomposition,
    _allgatherv,
    _whole_nodes,
    check_ownership,
    local_rows,
    rank_decomposition,
)
from .options import OPTIONS, SchwarzOptions

__all__ = ["DEFAULT_NULL_SPACE", "NOT_USED", "SchwarzPC", "near_null_space", "null_space_rows",
           "resolve_coarse"]

#: :attr:`SchwarzPC.null_space_source` without a near-null space: ddops' own default.
DEFAULT_NULL_SPACE = "ddops default (the constants, one per component of a node)"


class SchwarzPC:
    """Two-level overlapping Schwarz preconditioner of ddops for PETSc (``PCPYTHON`` context).

    Parameters
    ----------
    coordinates : array, optional
        Coordinates of this rank's rows (``num_rows x d``), used by the
        ``rcb`` partitioner only.
    **options
        Defaults of the settings of :data:`ddops.petsc.options.OPTIONS` (those of
        :class:`ddops.SchwarzOptions`: ``subdomains``, ``overlap``, ``coarse``,
        ``variant``, ``partitioner``, ``local_solver``, ``factor_dtype``,
        ``null_space``, ``kernel``, ``threads``, ..., the coarse spaces' options
        such as ``agdsw_threshold``, and ``reuse_coarse``); the options database
        (``-<prefix>ddops_<name>``) overrides them in ``setFromOptions``.

    Attributes
    ----------
    options : SchwarzOptions
        The settings in force (after ``setFromOptions``).
    preconditioner : TwoLevelSchwarz or DistributedTwoLevelSchwarz or None
        The ddops operator built by the last ``setUp``.
    layout : DistributedLayout or None
        Its layout (several ranks only).
    parts : RankDecomposition or None
        The decomposition and its map to the ranks.
    null_space_source : str
        ``"near-null space of the matrix (k vectors)"``, :data:`DEFAULT_NULL_SPACE`
        or :data:`NOT_USED` (one level).
    null_space_rows : int
        Rows of the near-null space this rank holds (``n`` on one rank and for
        the coarse bases that need all of them; for GDSW/RGDSW on several ranks
        its own rows, subdomains and ghosts and the interface, see
        :func:`null_space_rows`; 0 without one).
    setup_seconds : float
        Wall time of this rank's last ``setUp``.
    setups, updates : int
        How many ``setUp`` calls built everything, and how many ran only the
        numeric phase (the same pattern and options: ``update``).
    last_setup : {"full", "numeric"} or None
        What the last ``setUp`` ran.

    Raises
    ------
    ValueError, TypeError
        From the constructor or ``setFromOptions`` for a bad setting (the
        message names the keyword or the ``-ddops_*`` option); from ``setUp``
        for a matrix that cannot be used (wrong type, too few rows per rank).
        On several ranks a failure of one rank's own part of the set-up (its
        partition, block size or subdomain factorisations) raises on every
        rank, with that rank's message (``ddops.petsc._collective``).
    """

    def __init__(self, *, coordinates: Any = None, **options: Any) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"SchwarzPC got unknown options {unknown}; the options are "
                            f"{sorted(OPTIONS)}")
        self._defaults = SchwarzOptions(**options)
        self.options = self._defaults
        self.coordinates = None if coordinates is None else np.asarray(coordinates, float)
        self.preconditioner: Any = None
        self.layout: Any = None
        self.parts: RankDecomposition | None = None
        self.null_space_source = DEFAULT_NULL_SPACE
        self.null_space_rows = 0
        self.setup_seconds = 0.0
        self.decomposition_seconds = 0.0
        self.setups = self.updates = 0
        self.last_setup: str | None = None
        self._built: Any = None  # (options, coordinates, pattern) of the last full set-up
        self.coarse_kind: str | None = None

    # -- PETSc's python-context protocol --------------------------------------------------
    def create(self, pc: Any) -> None:
        """Record the PC, so that it is released before the interpreter exits (PCPythonSetContext).

        A KSP left to the garbage collector is destroyed by ``PetscFinalize``,
        after the interpreter is gone (see ``ddops.petsc._lifetime``).
        """
        track(pc)

    def destroy(self, pc: Any) -> None:
        """Forget the PC (PCDestroy, or another context or type set on it).

        What ``setUp`` built stays readable on the context: it holds no PETSc
        object (only numpy and scipy arrays and the mpi4py view of the PC's
        communicator), so nothing here outlives PETSc.
        """
        untrack(pc)

    def setFromOptions(self, pc: Any) -> None:  # noqa: N802 - PETSc's method names
        """Read ``-<prefix>ddops_*`` from the options database (over the keyword defaults)."""
        self.options = self._defaults.with_database(pc.getOptionsPrefix())

    def setUp(self, pc: Any) -> None:  # noqa: N802
        """Build the preconditioner, or only its numeric phase for the same pattern."""
        start = time.perf_counter()
        _, P = pc.getOperators()
        size = P.getComm().getSize()
        comm = P.getComm().tompi4py() if size > 1 else None
        rows = self._same_pattern(P, comm)
        if rows is not None:
            self._numeric(rows, comm, pc)
            self.last_setup = "numeric"
            self.updates += 1
        else:
            self._full(P, comm, pc)
            self.last_setup = "full"
            self.setups += 1
        self.setup_seconds = time.perf_counter() - start

    def _same_pattern(self, P: Any, comm: Any) -> Any:
        """This rank's rows of ``P`` when every rank's pattern and the options are those of
        the last full set-up (agreed over the ranks), else None."""
        if self.preconditioner is None or self._built is None:
            return None
        options, coordinates, (indptr, indices) = self._built
        same = options == self.options and coordinates is self.coordinates
        rows = None
        if same:
            try:
                rows = local_rows(P)
            except (TypeError, ValueError):  # the full set-up names the problem
                same = False
            else:
                same = (np.array_equal(rows.indptr, indptr)
                        and np.array_equal(rows.indices, indices))
        if comm is not None:
            same = bool(comm.allreduce(bool(same), op=_mpi_land()))
        return rows if same else None

    def _numeric(self, rows: Any, comm: Any, pc: Any) -> None:
        """The numeric phase: ``update`` of the preconditioner with this rank's new rows."""
        reuse = bool(self.options.reuse_coarse)
        self.parts.rows = rows
        error = None
        try:
            self.preconditioner.update(rows, reuse_coarse=reuse)
        except Exception as exc:  # noqa: BLE001 - raised again on every rank by agree
            error = exc
        try:
            agree(comm, error, "SchwarzPC.setUp")
        except Exception:
            self.reset(pc)  # nothing half-updated stays on the context
            raise

    def _full(self, P: Any, comm: Any, pc: Any) -> None:
        """Build the decomposition, the coarse space and the local factorisations."""
        start = time.perf_counter()
        opts = self.options
        self._built = None
        block_size = opts.block_size or max(int(P.getBlockSize()), 1)
        self.parts = parts = rank_decomposition(
            P, comm, subdomains=opts.subdomains, overlap=opts.overlap,
            partitioner=opts.partitioner, block_size=block_size, seed=opts.seed,
            coordinates=self.coordinates)
        self.decomposition_seconds = time.perf_counter() - start
        self.coarse_kind = coarse = resolve_coarse(opts.coarse)
        null_space = self._null_space(P, comm, opts.null_space, coarse)
        d = parts.decomposition
        settings = opts.schwarz_options("none" if coarse is None else coarse, null_space)
        if comm is None:
            self.layout = None
            self.preconditioner = TwoLevelSchwarz(parts.rows, d, options=settings)
        else:
            from ..distributed import DistributedLayout
            from ..distributed.precond import DistributedTwoLevelSchwarz

            check_ownership(d, parts.subdomain_ranks, P.getOwnershipRanges())
            self.layout = DistributedLayout(d, comm, A=parts.rows,
                                            subdomain_ranks=parts.subdomain_ranks)
            # the local factorisations come last, after every collective: a failure there (a
            # singular subdomain on one rank) is agreed on, and every rank raises
            try:
                # every matrix basis has its rank-local construction
                self.preconditioner = DistributedTwoLevelSchwarz(
                    self.layout, None, options=settings,
                    local_basis=coarse is None or coarse in (*RANK_LOCAL_BASES, "geneo",
                                                             "agdsw"))
                error = None
            except Exception as exc:  # noqa: BLE001 - raised again on every rank by agree
                error = exc
            try:
                agree(comm, error, "SchwarzPC.setUp")
            except Exception:
                self.reset(pc)  # nothing half-built stays on the context
                raise
        self._built = (opts, self.coordinates,
                       (parts.rows.indptr.copy(), parts.rows.indices.copy()))

    def reset(self, pc: Any) -> None:
        """Drop the preconditioner (PCReset)."""
        self.preconditioner = self.layout = self.parts = self._built = None

    def apply(self, pc: Any, x: Any, y: Any) -> None:
        """``y = M x`` on this rank's rows."""
        y.setArray(self.preconditioner.matvec(x.getArray(readonly=True)))

    def applyTranspose(self, pc: Any, x: Any, y: Any) -> None:  # noqa: N802
        """``y = M^T x`` (equal to :meth:`apply` for the symmetric variants)."""
        y.setArray(self.preconditioner.rmatvec(x.getArray(readonly=True)))

    def view(self, pc: Any, viewer: Any) -> None:
        """Print the settings and what ``setUp`` built (``PCView``; ``-ksp_view``).

        PETSc 3.18 has no ``-pc_view`` option; ``-ksp_view`` views the PC.
        """
        if viewer.getType() != "ascii":
            return
        for line in self.summary():
            viewer.printfASCII(line + "\n")

    # -- reporting ------------------------------------------------------------------------
    def summary(self) -> list[str]:
        """The lines of :meth:`view` (the same on every rank except the timings of rank 0)."""
        o = self.options
        lines = [f"ddops two-level Schwarz (ddops.petsc.SchwarzPC), variant {o.variant}"]
        if self.parts is None:
            lines.append(f"  not set up; options: {o.as_dict()}")
            return lines
        d, p = self.parts.decomposition, self.parts.parts_per_rank
        M = self.preconditioner
        coarse_dim = int(M.coarse_dim)
        local_solver = M.local.local_solver if self.layout is not None else M.local_solver
        lines += [
            f"  subdomains: {d.num_subdomains} ({int(p.min())} to {int(p.max())} per rank, "
            f"partitioner {o.partitioner} on each rank's rows), overlap {o.overlap}, "
            f"block size {d.block_size}",
            f"  unknowns: {d.num_dofs}, largest subdomain {d.max_size}",
            f"  coarse space: {self.coarse_kind or 'none'}, dimension {coarse_dim}"
            + (f", built {M.coarse_construction}" if self.layout is not None and coarse_dim
               else ""),
            f"  null space: {self.null_space_source}",
            f"  local solver: {local_solver}",
            f"  replicated on every rank: the decomposition, {self.parts.replicated_integers} "
            "integers" + (f"; the coarse matrix, {coarse_dim} x {coarse_dim}" if coarse_dim
                          and self.layout is not None else ""),
            f"  set-up on rank 0: {self.setup_seconds:.3g} s (decomposition "
            f"{self.decomposition_seconds:.3g} s); {self.setups} full, {self.updates} "
            "numeric only (the same pattern)",
        ]
        return lines

    # -- helpers --------------------------------------------------------------------------
    def _null_space(self, P: Any, comm: Any, choice: str, coarse: str | None) -> Any:
        """The near-null space of ``P`` as a global ``n x k`` array (or None: the constants).

        Only the rows the coarse space reads hold values (:func:`null_space_rows`).
        """
        if coarse is None:  # one level reads no null space (checked all the same, no messages)
            near_null_space(P, None, choice)
            self.null_space_rows = 0
            self.null_space_source = NOT_USED
            return None
        rows = None if comm is None else null_space_rows(self.parts, comm, coarse)
        Z, self.null_space_source = near_null_space(P, comm, choice, rows)
        self.null_space_rows = 0 if Z is None else (Z.shape[0] if rows is None else rows.size)
        return Z


#: The coarse bases built by rank_local_gdsw_rows on several ranks, which read the null space
#: on the interface only (AGDSW and GenEO are rank-local too, by rank_local_agdsw and
#: rank_local_geneo, but read the whole null space).
RANK_LOCAL_BASES = ("gdsw", "rgdsw")

#: :attr:`SchwarzPC.null_space_source` of one level (no coarse space reads a null space).
NOT_USED = "not used (no coarse space)"


def resolve_coarse(coarse: str) -> str | None:
    """``-ddops_coarse`` as a coarse space name, None for ``none``: ``auto`` is ``gdsw`` (the
    rank decomposition has owner labels, the 1D hats never apply to it)."""
    return None if coarse == "none" else "gdsw" if coarse == "auto" else coarse


def _mpi_land() -> Any:
    from ..distributed.comm import mpi

    return mpi().LAND


def null_space_rows(parts: RankDecomposition, comm: Any, coarse: str) -> np.ndarray | None:
    """The rows of the near-null space this rank needs for ``coarse``, or None for all of them.

    GDSW and RGDSW (:data:`RANK_LOCAL_BASES`), built rank-locally by
    :func:`ddops.distributed.precond.rank_local_gdsw_rows`, read the null space
    on the interface only (the pieces ``Z[interface]`` of every component,
    replicated: every rank classifies the whole interface).  So the rank takes
    its own rows, its overlapping subdomains, the columns of its rows (its
    ghosts) and the interface candidates of every rank: the rows with a column
    in another part and those columns, whole nodes, found by each rank in its
    own rows and exchanged as indices (one ``Allgatherv`` of integers).  A
    superset of the interface whatever the overlap, also for a pattern that
    is not symmetric.  Every other coarse basis builds Phi with the serial
    code from the whole null space (None: all rows).  Collective.
    """
    if coarse not in RANK_LOCAL_BASES:
        return None
    d = parts.decomposition
    rows = parts.rows
    rstart, rend = parts.row_range
    row_of = rstart + np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))
    other = d.owner[rows.indices] != d.owner[row_of]
    cross = np.unique(np.concatenate([row_of[other], rows.indices[other]]).astype(np.int64))
    interface = np.unique(_allgatherv(comm, cross))
    rank = comm.Get_rank()
    first = int(parts.parts_per_rank[:rank].sum())
    region = d.indices[d.offsets[first]:d.offsets[first + int(parts.parts_per_rank[rank])]]
    shared = (np.zeros(0, np.int64) if d.shared_nodes is None
              else np.asarray(d.shared_nodes, dtype=np.int64))
    needed = np.concatenate([np.arange(rstart, rend), region, rows.indices, interface, shared])
    return _whole_nodes(needed.astype(np.int64), d.block_size)


def near_null_space(P: Any, comm: Any, choice: str,
                    rows: np.ndarray | None = None) -> tuple[np.ndarray | None, str]:
    """``(Z, source)``: the near-null space of ``P`` as a global ``n x k`` array, or None.

    ``choice`` is ``-ddops_null_space``: ``constants`` ignores the near-null
    space, ``near`` requires one, ``auto`` takes it when there is one.  On
    several ranks (``comm`` not None) the vectors' rows ``rows`` (sorted
    global indices; None: all) are fetched from their owners with a PETSc
    scatter; the other rows of ``Z`` are zero.  The constant vector
    (``MatNullSpaceCreate`` with ``has_cnst``) needs no communication.
    ``source`` says where the null space came from (:data:`DEFAULT_NULL_SPACE`
    for None).
    """
    if choice == "constants":
        return None, DEFAULT_NULL_SPACE
    nsp = P.getNearNullSpace()
    if not nsp:
        if choice == "near":
            raise ValueError("-ddops_null_space near: the matrix has no near-null space "
                             "(set one with MatSetNearNullSpace)")
        return None, DEFAULT_NULL_SPACE
    vectors = list(nsp.getVecs())
    k = int(nsp.hasConstant()) + len(vectors)
    if not k:
        return None, DEFAULT_NULL_SPACE
    source = f"near-null space of the matrix ({k} vectors)"
    rstart, rend = P.getOwnershipRange()
    if comm is None:
        columns = [np.ones(rend - rstart)] if nsp.hasConstant() else []
        columns += [np.array(v.getArray(readonly=True), dtype=np.float64) for v in vectors]
        return np.stack(columns, axis=1), source
    n = P.getSize()[0]
    rows = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    Z = np.zeros((n, k))
    if nsp.hasConstant():
        Z[rows, 0] = 1.0
    if vectors:
        Z[rows, int(nsp.hasConstant()):] = _scatter_rows(vectors, rows)
    return Z, source


def _scatter_rows(vectors: list, rows: np.ndarray) -> np.ndarray:
    """``len(rows) x len(vectors)``: the entries ``rows`` of distributed PETSc vectors.

    One ``VecScatter`` (collective) from the vectors' layout to a sequential
    vector of the rows, used for every vector.
    """
    from petsc4py import PETSc

    wanted = PETSc.IS().createGeneral(rows.astype(PETSc.IntType), comm=PETSc.COMM_SELF)
    local = PETSc.Vec().createSeq(rows.size, comm=PETSc.COMM_SELF)
    scatter = PETSc.Scatter().create(vectors[0], wanted, local, None)
    out = np.empty((rows.size, len(vectors)))
    try:
        for j, v in enumerate(vectors):
            scatter.scatter(v, local, addv=PETSc.InsertMode.INSERT_VALUES,
                            mode=PETSc.ScatterMode.FORWARD)
            out[:, j] = local.getArray(readonly=True)
    finally:
        for obj in (scatter, local, wanted):
            obj.destroy()
    return out
