"""The options of :class:`~ddops.petsc.SchwarzPC`: keyword arguments and the PETSc database.

Every option has a keyword argument of ``SchwarzPC(...)`` and an entry
``-<prefix>ddops_<name>`` of the options database, where ``<prefix>`` is the
PC's options prefix (``pc.getOptionsPrefix()``, empty by default).  The
database wins over the keyword arguments, as PETSc's own objects let the
command line override what the code set.  A bad value raises a
:class:`ValueError` (or :class:`TypeError`) that names the option as it was
given: ``-ddops_coarse foo`` names ``-ddops_coarse``.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from ..dd.coarse import ALL_COARSE_BASES
from ..precond.schwarz import LOCAL_SOLVERS, VARIANTS

__all__ = ["COARSE_CHOICES", "NULL_SPACE_CHOICES", "OPTIONS", "PARTITIONERS", "SchwarzOptions"]

#: Coarse spaces by name: ``none`` (one level) and the ddops bases that need no
#: coordinates (the hat bases of 1D problems are left out).
COARSE_CHOICES = ("none",) + tuple(b for b in ALL_COARSE_BASES
                                   if b not in ("interface_hats", "grid_hats"))

#: How each rank's rows are cut into subdomains: METIS on the graph of the rank's
#: diagonal block, contiguous blocks of rows, or recursive coordinate bisection of the
#: coordinates given to ``SchwarzPC(coordinates=...)``.
PARTITIONERS = ("metis", "contiguous", "rcb")

#: Where the coarse space's null space comes from: ``auto`` (the near-null space
#: attached with ``MatSetNearNullSpace`` when there is one, else the constants),
#: ``near`` (that near-null space, required), ``constant`` (the constants, ignoring it).
NULL_SPACE_CHOICES = ("auto", "near", "constant")

#: Name, type and meaning of every option (``-ddops_<name>``), for the docs and ``-help``.
OPTIONS = {
    "subdomains": ("int", "total number of subdomains, split over the ranks as evenly as "
                   "possible (default: about 2000 unknowns per subdomain, at least 2 per "
                   "rank)"),
    "overlap": ("int", "layers of the graph of A added to every subdomain (default 1)"),
    "coarse": ("str", f"coarse space, one of {COARSE_CHOICES} (default gdsw)"),
    "variant": ("str", f"Schwarz variant, one of {VARIANTS} (default additive; restricted "
                "is not symmetric: use it with GMRES)"),
    "partitioner": ("str", f"cut of each rank's rows, one of {PARTITIONERS} (default metis)"),
    "local_solver": ("str", f"subdomain solver, one of {LOCAL_SOLVERS} (default auto)"),
    "null_space": ("str", f"null space of the coarse space, one of {NULL_SPACE_CHOICES} "
                   "(default auto)"),
    "block_size": ("int", "unknowns per node, kept together by the partition and the overlap "
                   "(default: the matrix's block size)"),
    "seed": ("int", "seed of METIS (default 0)"),
}


@dataclasses.dataclass
class SchwarzOptions:
    """Validated settings of :class:`~ddops.petsc.SchwarzPC` (see :data:`OPTIONS`).

    ``subdomains`` and ``block_size`` None mean "choose from the matrix".
    """

    subdomains: int | None = None
    overlap: int = 1
    coarse: str = "gdsw"
    variant: str = "additive"
    partitioner: str = "metis"
    local_solver: str = "auto"
    null_space: str = "auto"
    block_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, _check(field.name, getattr(self, field.name), field.name))

    def with_database(self, prefix: str | None) -> SchwarzOptions:
        """A copy with the values of the PETSc options database (``-<prefix>ddops_*``) applied.

        Parameters
        ----------
        prefix : str or None
            The PC's options prefix.
        """
        from petsc4py import PETSc

        head = f"{prefix or ''}ddops_"
        database = PETSc.Options(head)
        values = dataclasses.asdict(self)
        for name in OPTIONS:
            if database.hasName(name):
                raw = database.getString(name, "")
                values[name] = _parse(name, raw, f"-{head}{name}")
        return SchwarzOptions(**values)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict."""
        return dataclasses.asdict(self)


def _parse(name: str, raw: str, label: str) -> Any:
    """``raw`` from the database as the option's type, checked (errors name ``label``)."""
    kind = OPTIONS[name][0]
    raw = raw.strip()
    if kind == "int":
        if name in ("subdomains", "block_size") and raw.lower() in ("", "auto", "default"):
            return None
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{label} must be an integer, got {raw!r}") from None
    else:
        value = raw.lower()
    return _check(name, value, label)


def _check(name: str, value: Any, label: str) -> Any:
    """Validate one setting; the messages name ``label`` (the keyword or the option)."""
    kind = OPTIONS[name][0]
    if kind == "int":
        if value is None and name in ("subdomains", "block_size"):
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{label} must be an integer, got {type(value).__name__} {value!r}")
        value = int(value)
        minimum = 0 if name in ("overlap", "seed") else 1
        if value < minimum:
            raise ValueError(f"{label} must be >= {minimum}, got {value}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"{label} must be a string, got {type(value).__name__} {value!r}")
    choices = {"coarse": COARSE_CHOICES, "variant": VARIANTS, "partitioner": PARTITIONERS,
               "local_solver": LOCAL_SOLVERS, "null_space": NULL_SPACE_CHOICES}[name]
    if value not in choices:
        raise ValueError(f"{label} must be one of {choices}, got {value!r}")
    return value
