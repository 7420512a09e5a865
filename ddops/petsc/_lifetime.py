"""The PCs that carry a ddops Python context, released before the interpreter exits.

petsc4py 3.18 calls ``PetscFinalize`` from ``Py_AtExit``, after the interpreter
has been torn down.  A KSP that a script leaves to the garbage collector is not
destroyed when Python drops it: petsc4py stashes it (``PetscObjectDelayedDestroy``)
and ``PetscFinalize`` destroys the stash.  ``PCDestroy`` then calls
``PCReset_Python``, which takes the GIL of an interpreter that no longer exists:
"Caught signal number 11 SEGV", ``MPI_ABORT``, a non-zero exit status, on every
rank, after a correct solve.

So every PC that carries a ddops context is recorded here, by its handle (no
reference: the PC's lifetime stays the user's), from the context's ``create``
to its ``destroy``; an ``atexit`` hook, which runs while the interpreter is
still whole, turns each PC still recorded into ``PCNONE``.  Changing the type
destroys the Python part the way PETSc always does (the context's ``destroy``
runs and releases what it holds), so the PC that ``PetscFinalize`` destroys
later calls no Python.  A PC that PETSc destroyed before the exit called the
context's ``destroy`` then and is no longer recorded.
"""

from __future__ import annotations

import atexit
import ctypes
from typing import Any

__all__ = ["live_handles", "release_all", "track", "untrack"]

#: Handles (addresses of the C objects) of the live PCs with a ddops context.
_LIVE: set[int] = set()
_REGISTERED = False


def track(pc: Any) -> None:
    """Record ``pc`` (a petsc4py PC whose Python context is a ddops PC) until :func:`untrack`."""
    global _REGISTERED
    if not _REGISTERED:
        atexit.register(release_all)
        _REGISTERED = True
    _LIVE.add(int(pc.handle))


def untrack(pc: Any) -> None:
    """Forget ``pc`` (its context was destroyed or replaced)."""
    _LIVE.discard(int(pc.handle))


def live_handles() -> frozenset[int]:
    """The handles recorded now (for the tests)."""
    return frozenset(_LIVE)


def release_all() -> None:
    """Turn every recorded PC into ``PCNONE`` (the ``atexit`` hook; see the module notes)."""
    from petsc4py import PETSc

    if not _LIVE or not PETSc.Sys.isInitialized() or PETSc.Sys.isFinalized():
        return
    library = ctypes.CDLL(PETSc.__file__)  # dlsym searches the module's dependencies: libpetsc
    for handle in sorted(_LIVE):
        # the context's destroy runs inside and untracks the PC; discard it anyway, so that a
        # PC whose context lacks destroy is not visited twice
        library.PCSetType(ctypes.c_void_p(handle), b"none")
        _LIVE.discard(handle)
