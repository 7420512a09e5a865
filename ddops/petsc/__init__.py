"""ddops inside PETSc: the two-level Schwarz preconditioner as a PETSc ``PC`` (extra ``petsc``).

Nothing here is imported by ``import ddops``; this subpackage is the only
place that imports petsc4py, and importing it without petsc4py raises an
:class:`ImportError` that says how to install it.

* :class:`~ddops.petsc.pc.SchwarzPC`: a preconditioner of type ``python``,
  ``-pc_type python -pc_python_type ddops.petsc.SchwarzPC`` on the command
  line or ``pc.setPythonContext(SchwarzPC())`` from code, configured from the
  options database (``-ddops_subdomains``, ``-ddops_overlap``,
  ``-ddops_coarse``, ...; :data:`~ddops.petsc.options.OPTIONS`).
* :func:`~ddops.petsc.native.setup_native`: the native route, the same
  decomposition and coarse basis handed to PETSc's own PCMG (two levels,
  PCASM on the ddops subdomains, interpolation Phi as a distributed Mat,
  Galerkin coarse operator), so that the coarse solver is any PETSc solver
  (``-mg_coarse_pc_type telescope``, ``redundant``, ``gamg``, ...);
  :class:`~ddops.petsc.native.NativePC` chooses it from the command line
  (``-pc_type python -pc_python_type ddops.petsc.NativePC``) and rebuilds it
  on a new matrix.
* :mod:`~ddops.petsc.decomposition`: the decomposition built from each rank's
  own rows of the PETSc matrix, with the ddops partition following PETSc's
  row ownership (no vector is ever permuted).

See the PETSc page of the documentation.
"""

try:
    from petsc4py import PETSc  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without petsc4py only
    raise ImportError(
        "ddops.petsc needs petsc4py: install PETSc's Python bindings (Debian/Ubuntu: "
        "apt-get install python3-petsc4py and set PETSC_DIR; or pip install 'ddops[petsc]', "
        "a long source build); see docs/petsc.md"
    ) from exc

from .decomposition import rank_decomposition  # noqa: E402
from .native import NativePC, NativeSchwarz, setup_native  # noqa: E402
from .options import OPTIONS, SchwarzOptions  # noqa: E402
from .pc import SchwarzPC  # noqa: E402

__all__ = ["OPTIONS", "NativePC", "NativeSchwarz", "SchwarzOptions", "SchwarzPC",
           "rank_decomposition", "setup_native"]
