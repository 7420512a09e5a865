"""One vocabulary for the settings of the Schwarz preconditioners.

:class:`SchwarzOptions` holds one field per concept (decomposition, variant, coarse
space and the options of each coarse space, local solver, precision, null space,
kernel, threads), each with one list of choices and one default
(:data:`OPTION_SPECS`).  :class:`~ddops.precond.schwarz.TwoLevelSchwarz` takes it as
``options=``; its keyword arguments fill the same fields.  The options of the
coarse spaces are typed objects of their own: :class:`GDSWOptions`,
:class:`AGDSWOptions`, :class:`GenEOOptions`.

Old spellings keep working with a :class:`DeprecationWarning` that names the new
one (:data:`DEPRECATED_CHOICES`), e.g. ``null_space="constant"`` for
``"constants"``.

A command line takes the same vocabulary from :func:`add_cli_arguments`: one flag per
field of :data:`OPTION_SPECS` and per option of the coarse spaces
(:data:`COARSE_OPTION_SPECS`), with their names, choices, defaults and help;
:func:`options_from_cli` turns the parsed flags back into a :class:`SchwarzOptions`.
"""

from __future__ import annotations

import argparse
import dataclasses
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._argtypes import int_at_least, nonnegative_float, positive_float
from ..dd.adaptive import AGDSW_THRESHOLD, MAX_PER_COMPONENT
from ..dd.analysis import EXTENSION_REUSE
from ..dd.coarse import ALL_COARSE_BASES
from ..dd.geneo import (
    EIGEN_STOPS,
    GENEO_OVERSAMPLED_THRESHOLD,
    GENEO_THRESHOLD,
    check_eigen_stop,
)
from ..dd.indicators import check_skip_contrast
from ..dd.oversampling import check_oversampling
from ..linalg.local_solvers import SPARSE_SOLVERS, check_threads

__all__ = [
    "VARIANTS",
    "LOCAL_SOLVERS",
    "COARSE_SPACES",
    "PARTITIONERS",
    "FACTOR_DTYPES",
    "EXTENSION_SOLVERS",
    "EXTENSION_REUSE",
    "DEPRECATED_CHOICES",
    "OPTION_SPECS",
    "COARSE_OPTION_SPECS",
    "OptionSpec",
    "GDSWOptions",
    "AGDSWOptions",
    "GenEOOptions",
    "SchwarzOptions",
    "check_option",
    "coarse_option_users",
    "coarse_option_defaults",
    "cli_flag",
    "add_cli_arguments",
    "add_deprecated_flag",
    "options_from_cli",
]

#: Preconditioner variants: how the partition of unity ``D_i`` enters the local sum, and
#: ``"hybrid"``: the additive local sum with the coarse correction applied multiplicatively,
#: ``M = P_0 + (I - P_0 A) M_1 (I - A P_0)`` with ``P_0 = Phi A_0^{-1} Phi^T`` (symmetric).
VARIANTS = ("additive", "restricted", "symmetric_restricted", "hybrid")

#: Local (subdomain) solvers; ``"sparse"`` is another name of ``"superlu"``.
LOCAL_SOLVERS = ("auto", "dense", "sparse", *SPARSE_SOLVERS)

#: Coarse spaces by name: ``"auto"`` (see :func:`ddops.dd.coarse.auto_coarse_basis`),
#: ``"none"`` (one level) and every basis of :func:`ddops.coarse_basis`.
COARSE_SPACES = ("auto", "none", *ALL_COARSE_BASES)

#: How a matrix's unknowns are cut into non-overlapping parts: METIS on the graph of the
#: matrix, recursive coordinate bisection of given coordinates, contiguous blocks of rows
#: (each rank's own rows under PETSc), or the boxes of a structured grid.
PARTITIONERS = ("metis", "rcb", "contiguous", "grid")

#: Precision of the local factorisations.
FACTOR_DTYPES = ("float64", "float32")

#: Solvers of the interior problems of the discrete harmonic extension (GDSW family).
EXTENSION_SOLVERS = ("auto", *SPARSE_SOLVERS)

#: Old spellings of choices: ``{field: {old: new}}``; accepted with a DeprecationWarning.
DEPRECATED_CHOICES = {"null_space": {"constant": "constants"}}


@dataclass(frozen=True)
class OptionSpec:
    """What one field of :class:`SchwarzOptions` accepts.

    Attributes
    ----------
    name : str
        The field (and keyword argument) name.
    kind : {"choice", "int", "float", "array", "threads"}
        ``"choice"``: a string from ``choices``; ``"float"``: a positive finite number
        (``>= 0`` with ``minimum=0``);
        ``"array"``: an array, or a string from ``choices`` (a named array such as
        ``"constants"``).
    choices : tuple of str
        The accepted strings.
    help : str
        One line for ``--help``, the PETSc ``-help`` and the docs.
    flag : str or None
        The command-line flag, or None where the command line has none.
    petsc : str or None
        The PETSc option (without ``-<prefix>ddops_``), or None.
    minimum : int or None
        The smallest integer accepted (``"int"`` and ``"threads"``); 0 admits zero for a
        ``"float"``.
    """

    name: str
    kind: str
    choices: tuple = ()
    help: str = ""
    flag: str | None = None
    petsc: str | None = None
    minimum: int | None = None


def _spec(name, kind, help, *, choices=(), flag=True, petsc=True, minimum=None) -> OptionSpec:
    return OptionSpec(name, kind, tuple(choices), help,
                      ("--" + name.replace("_", "-")) if flag else None,
                      name if petsc else None, minimum)


#: Every field of :class:`SchwarzOptions` that is not a coarse space's own options.
OPTION_SPECS = {s.name: s for s in (
    _spec("subdomains", "int", "number of subdomains (default: about 2000 unknowns each)",
          minimum=1),
    _spec("overlap", "int", "layers of the graph of A added to every subdomain", minimum=0),
    _spec("partitioner", "choice", "how the unknowns are cut into non-overlapping parts",
          choices=PARTITIONERS),
    _spec("block_size", "int", "unknowns per node, kept together by the partition and the "
          "overlap (default: 1, or the matrix's block size under PETSc)", minimum=1),
    _spec("seed", "int", "seed of the partitioner", minimum=0),
    _spec("variant", "choice", "Schwarz variant (restricted is not symmetric: use GMRES)",
          choices=VARIANTS),
    _spec("coarse", "choice", "coarse space (none: one level)", choices=COARSE_SPACES),
    _spec("coarse_size", "int", "number of coarse functions of grid_hats", minimum=1),
    _spec("local_solver", "choice", "subdomain solver", choices=LOCAL_SOLVERS),
    _spec("factor_dtype", "choice", "precision of the local factorisations",
          choices=FACTOR_DTYPES),
    _spec("null_space", "array", "near-null space of the coarse space: constants, or the "
          "vectors of a file (rigid body modes for elasticity)", choices=("constants",)),
    _spec("kernel", "array", "the exact kernel of a singular A: constants, or the vectors "
          "of a file", choices=("constants",)),
    _spec("threads", "threads", "threads of the set-up and of every application (default: "
          "the process's settings)", minimum=1),
    _spec("extension_reuse", "choice", "what the GDSW-type coarse spaces keep of the "
          "extension's PARDISO factorisations for update(): the analysis (fastest update) "
          "or only the ordering (less memory)", choices=EXTENSION_REUSE),
)}

#: Every field of the coarse spaces' options objects (:class:`GDSWOptions`,
#: :class:`AGDSWOptions`, :class:`GenEOOptions`), by name: a name that several spaces
#: share (``threshold``, ``extension_solver``) is one concept, and one command-line flag
#: sets it for each of them (:func:`coarse_option_users`); the defaults are the
#: dataclasses' (:func:`coarse_option_defaults`).
COARSE_OPTION_SPECS = {s.name: s for s in (
    _spec("extension_solver", "choice", "solver of the interior problems of the discrete "
          "harmonic extension (amg: inexact)", choices=EXTENSION_SOLVERS, petsc=False),
    _spec("threshold", "float", "eigenvalue threshold of the adaptive coarse spaces: a "
          "larger one keeps more eigenvectors", petsc=False),
    _spec("skip_contrast", "float", "AGDSW solves no eigenproblem on an interface component, "
          "GenEO none on a subdomain, around which the diagonal of A varies by at most this "
          "factor (0: every one)", minimum=0, petsc=False),
    _spec("max_per_component", "int", "at most this many eigenvectors per interface "
          "component", minimum=0, petsc=False),
    _spec("max_per_subdomain", "int", "at most this many eigenvectors per subdomain",
          minimum=0, petsc=False),
    _spec("neumann", "array", "one local Neumann matrix per subdomain (finite-element "
          "assembly)", flag=False, petsc=False),
    _spec("oversampling", "int", "layers added to every subdomain for GenEO's local matrix "
          "from A (default: 0 for a diagonally dominant A, else 2, or 1 for block size 3)",
          minimum=0, petsc=False),
    _spec("eigen_stop", "choice", "when GenEO's eigensolve of a subdomain stops: its Ritz "
          "values settled, or as soon as the inertia's count of eigenvalues below the "
          "threshold is reached and those far below it have settled (count: faster, "
          "inexact; PARDISO only)", choices=EIGEN_STOPS,
          petsc=False),
)}


def _check_field(spec: OptionSpec, value: Any, label: str | None = None) -> Any:
    """``value`` checked against ``spec`` (errors name ``label``, by default the field)."""
    label = label or spec.name
    if value is None and spec.name not in ("overlap", "seed", "partitioner", "variant",
                                           "coarse", "local_solver", "factor_dtype",
                                           "extension_reuse"):
        return None
    if spec.kind in ("int", "threads"):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{label} must be an integer, got {type(value).__name__} {value!r}")
        value = int(value)
        if spec.minimum is not None and value < spec.minimum:
            raise ValueError(f"{label} must be >= {spec.minimum}, got {value}")
        return value
    if spec.kind == "choice" and spec.name == "factor_dtype" and not isinstance(value, str):
        if value is None or isinstance(value, (bool, int, float)):
            raise TypeError(f"{label} must be one of {spec.choices}, got {value!r}")
        try:
            value = np.dtype(value).name
        except TypeError:
            raise TypeError(f"{label} must be one of {spec.choices}, got {value!r}") from None
    if spec.kind == "choice" and spec.name == "coarse" and not isinstance(value, str):
        if value is None or isinstance(value, (bool, np.bool_, numbers.Number)):
            raise TypeError(f"{label} must be one of {spec.choices} or a coarse basis "
                            f"(a num_dofs x n0 matrix), got {value!r}")
        return value  # a user's coarse basis Phi (a matrix), validated where it is used
    if spec.kind == "array" and not isinstance(value, str):
        return value  # an array, validated against A where it is used
    if not isinstance(value, str):
        raise TypeError(f"{label} must be a string, got {type(value).__name__} {value!r}")
    old = DEPRECATED_CHOICES.get(spec.name, {})
    if value in old:
        warnings.warn(f"{label}={value!r} is deprecated; use {old[value]!r}",
                      DeprecationWarning, stacklevel=4)
        value = old[value]
    if value not in spec.choices:
        raise ValueError(f"{label} must be one of {spec.choices}, got {value!r}")
    return value


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 \
            or not np.isfinite(value):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _cap(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _same_value(a: Any, b: Any) -> bool:
    """Field equality of the options: arrays, matrices and lists of them by identity (they
    may be large, and ``==`` of numpy arrays is not a bool), everything else by ``==``."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    if isinstance(a, (str, numbers.Number, _ComparedFields)):
        return type(a) is type(b) and a == b
    return False


class _ComparedFields:
    """``==`` field by field (:func:`_same_value`); unhashable, as the fields may be arrays."""

    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: Any) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(_same_value(getattr(self, f.name), getattr(other, f.name))
                   for f in dataclasses.fields(self))


class _CoarseOptions(_ComparedFields):
    """What the options of one coarse space share: validation and the keywords of
    :func:`ddops.coarse_basis`."""

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of :func:`ddops.coarse_basis` for this space."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, eq=False)  # __eq__ of _ComparedFields
class GDSWOptions(_CoarseOptions):
    """Options of the GDSW and RGDSW coarse spaces.

    Parameters
    ----------
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Solver of the interior problems of the discrete harmonic extension.
    """

    extension_solver: str = "auto"

    def __post_init__(self) -> None:
        if self.extension_solver not in EXTENSION_SOLVERS:
            raise ValueError(f"extension_solver must be one of {EXTENSION_SOLVERS}, got "
                             f"{self.extension_solver!r}")


@dataclass(frozen=True, eq=False)  # __eq__ of _ComparedFields
class AGDSWOptions(_CoarseOptions):
    """Options of the adaptive GDSW coarse space (:func:`ddops.dd.adaptive.agdsw_basis`).

    Parameters
    ----------
    threshold : float
        Interface eigenfunctions with eigenvalue below it are kept.
    max_per_component : int
        At most this many functions per interface component.
    neumann : sequence of sparse matrices, optional
        One local Neumann matrix per subdomain (finite-element assembly).
    extension_solver : {"auto", "superlu", "pardiso", "amg"}
        Solver of the extension's interior problems.
    skip_contrast : float, optional
        No eigenproblem on an interface component around which the diagonal of ``A``
        varies by at most this factor (:mod:`ddops.dd.indicators`); 0 solves every one.
        Default :data:`~ddops.dd.agdsw.AGDSW_SKIP_CONTRAST` with a ``threshold`` up to
        :data:`~ddops.dd.agdsw.AGDSW_THRESHOLD`, else 0.
    """

    threshold: float = AGDSW_THRESHOLD
    max_per_component: int = MAX_PER_COMPONENT
    neumann: Any = None
    extension_solver: str = "auto"
    skip_contrast: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", _positive("threshold", self.threshold))
        if self.skip_contrast is not None:
            object.__setattr__(self, "skip_contrast",
                               check_skip_contrast(self.skip_contrast, None))
        object.__setattr__(self, "max_per_component",
                           _cap("max_per_component", self.max_per_component))
        GDSWOptions(self.extension_solver)


@dataclass(frozen=True, eq=False)  # __eq__ of _ComparedFields
class GenEOOptions(_CoarseOptions):
    """Options of the GenEO coarse space (:func:`ddops.dd.adaptive.geneo_basis`).

    Parameters
    ----------
    threshold : float, optional
        Subdomain eigenfunctions with eigenvalue below it are kept.  Default
        :data:`~ddops.dd.geneo.GENEO_THRESHOLD`, or
        :data:`~ddops.dd.geneo.GENEO_OVERSAMPLED_THRESHOLD` with oversampled local matrices.
    max_per_subdomain : int, optional
        At most this many functions per subdomain.  Default
        :func:`~ddops.dd.geneo.default_max_per_subdomain` of the null space (48 without one,
        192 with the six rigid body modes of 3D elasticity).
    neumann : sequence of sparse matrices, optional
        One local Neumann matrix per subdomain (finite-element assembly).
    oversampling : int, optional
        Layers added to every subdomain for its local matrix computed from ``A``
        (:mod:`ddops.dd.oversampling`).  Default: 0 for a diagonally dominant ``A``,
        otherwise 2, or 1 for ``block_size >= 3``
        (:func:`~ddops.dd.oversampling.default_oversampling`).
    skip_contrast : float, optional
        No eigenproblem on a subdomain around which the diagonal of ``A`` varies by at most
        this factor (:func:`~ddops.dd.indicators.subdomain_contrast`): its Nicolaides
        functions only.  Default :data:`~ddops.dd.geneo.GENEO_SKIP_CONTRAST` (0: every
        subdomain solves its own).
    eigen_stop : {"settled", "count"}, optional
        When a subdomain's eigensolve stops.  Default
        :data:`~ddops.dd.geneo.GENEO_EIGEN_STOP` (``"settled"``); ``"count"`` stops as soon
        as the inertia's count of eigenvalues below the threshold is reached and those far
        below it have settled (:data:`~ddops.dd.geneo.GENEO_COUNT_SETTLE`): faster,
        inexact, measured there.
    """

    threshold: float | None = None
    max_per_subdomain: int | None = None
    neumann: Any = None
    oversampling: int | None = None
    skip_contrast: float | None = None
    eigen_stop: str | None = None

    def __post_init__(self) -> None:
        if self.threshold is not None:
            object.__setattr__(self, "threshold", _positive("threshold", self.threshold))
        if self.skip_contrast is not None:
            object.__setattr__(self, "skip_contrast",
                               check_skip_contrast(self.skip_contrast, None))
        if self.oversampling is not None:
            object.__setattr__(self, "oversampling", check_oversampling(self.oversampling))
        if self.eigen_stop is not None:
            check_eigen_stop(self.eigen_stop)
        if self.max_per_subdomain is not None:
            object.__setattr__(self, "max_per_subdomain",
                               _cap("max_per_subdomain", self.max_per_subdomain))


#: The options object of each coarse space that has options, by the space's name.
COARSE_OPTION_TYPES = {"gdsw": GDSWOptions, "rgdsw": GDSWOptions, "agdsw": AGDSWOptions,
                       "geneo": GenEOOptions}


@dataclass(frozen=True, eq=False)  # __eq__ of _ComparedFields
class SchwarzOptions(_ComparedFields):
    """The settings of a two-level Schwarz preconditioner, one field per concept.

    Every field has one list of choices and one default (:data:`OPTION_SPECS`).  The
    decomposition fields (``subdomains``, ``overlap``, ``partitioner``, ``block_size``,
    ``seed``) are used where a decomposition is built from the matrix (the command line,
    PETSc, :meth:`decomposition`); :class:`~ddops.precond.schwarz.TwoLevelSchwarz`
    takes its decomposition as an argument.

    Parameters
    ----------
    subdomains : int, optional
        Number of subdomains (default: about 2000 unknowns each).
    overlap : int
        Layers of the graph of ``A`` added to every part.
    partitioner : {"metis", "rcb", "contiguous", "grid"}
        How the unknowns are cut into non-overlapping parts.
    block_size : int, optional
        Unknowns per node (default 1).
    seed : int
        Seed of the partitioner.
    variant : {"additive", "restricted", "symmetric_restricted", "hybrid"}
        See :data:`VARIANTS`.
    coarse : str or sparse matrix
        A coarse space from :data:`COARSE_SPACES` (``"none"``: one level) or a user
        basis ``Phi`` (``num_dofs x n0``).
    coarse_size : int, optional
        Number of coarse functions of ``"grid_hats"``.
    local_solver : {"auto", "dense", "sparse", "superlu", "pardiso", "amg"}
        The subdomain solver.
    factor_dtype : {"float64", "float32"}
        Precision of the local factorisations (a numpy dtype is accepted too).
    null_space : array or "constants", optional
        Near-null space of the coarse space (``n x k``).
    kernel : array or "constants", optional
        The exact kernel of a singular ``A``.
    threads : int, optional
        Threads of the set-up and of every application.
    gdsw, agdsw, geneo : GDSWOptions, AGDSWOptions, GenEOOptions
        The options of each coarse space (``gdsw`` also serves ``"rgdsw"``).
    extension_reuse : {"analysis", "ordering"}
        What the GDSW-type coarse spaces keep of their extension's PARDISO factorisations
        for :meth:`~ddops.precond.schwarz.TwoLevelSchwarz.update`
        (:class:`~ddops.dd.analysis.GDSWAnalysis`).

    Examples
    --------
    >>> import ddops
    >>> opts = ddops.SchwarzOptions(coarse="agdsw", agdsw=ddops.AGDSWOptions(threshold=0.1))
    >>> opts.coarse_keywords()["threshold"]
    0.1
    >>> opts.replace(variant="hybrid").variant
    'hybrid'
    """

    subdomains: int | None = None
    overlap: int = 1
    partitioner: str = "metis"
    block_size: int | None = None
    seed: int = 0
    variant: str = "additive"
    coarse: Any = "auto"
    coarse_size: int | None = None
    local_solver: str = "auto"
    factor_dtype: str = "float64"
    null_space: Any = None
    kernel: Any = None
    threads: int | None = None
    gdsw: GDSWOptions = field(default_factory=GDSWOptions)
    agdsw: AGDSWOptions = field(default_factory=AGDSWOptions)
    geneo: GenEOOptions = field(default_factory=GenEOOptions)
    extension_reuse: str = "analysis"

    def __post_init__(self) -> None:
        for name, spec in OPTION_SPECS.items():
            object.__setattr__(self, name, _check_field(spec, getattr(self, name)))
        if self.threads is not None:
            check_threads(self.threads)
        for name, kind in (("gdsw", GDSWOptions), ("agdsw", AGDSWOptions),
                           ("geneo", GenEOOptions)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got "
                                f"{type(value).__name__}")
        if self.coarse_size is not None and self.coarse != "grid_hats":
            raise ValueError("coarse_size is only used with coarse='grid_hats'")

    def replace(self, **changes: Any) -> SchwarzOptions:
        """A copy with ``changes`` applied (and checked); an unknown name is refused."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"unknown option(s) {unknown}; the options are "
                            f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)

    @property
    def coarse_name(self) -> str | None:
        """The coarse space's name, None for one level or a user basis."""
        if isinstance(self.coarse, str):
            return None if self.coarse == "none" else self.coarse
        return None

    def coarse_keywords(self, kind: str | None = None) -> dict[str, Any]:
        """The keyword arguments of :func:`ddops.coarse_basis` for the coarse space
        ``kind`` (default: :attr:`coarse`): the options of its own options object."""
        kind = kind or self.coarse_name
        attr = {"gdsw": "gdsw", "rgdsw": "gdsw", "agdsw": "agdsw", "geneo": "geneo"}.get(kind)
        return {} if attr is None else getattr(self, attr).keywords()

    def decomposition(self, A: Any, coordinates: Any = None):
        """The overlapping decomposition of ``A`` these options describe
        (:meth:`ddops.Decomposition.from_matrix`; ``"metis"`` and ``"rcb"``)."""
        from ..dd.decomposition import Decomposition

        if self.partitioner not in ("metis", "rcb"):
            raise ValueError(f"partitioner={self.partitioner!r} needs its own decomposition "
                             "(a grid or the ranks' rows); SchwarzOptions.decomposition "
                             "builds 'metis' and 'rcb'")
        return Decomposition.from_matrix(A, self.subdomains, self.overlap,
                                         partitioner=self.partitioner, coordinates=coordinates,
                                         block_size=self.block_size or 1, seed=self.seed)


def coarse_options_from_dict(kind: Any, options: dict) -> dict[str, Any]:
    """The sub-options object(s) of :class:`SchwarzOptions` for an old ``coarse_options``
    dict of the coarse space ``kind`` (validated, unknown keys refused)."""
    if not isinstance(options, dict):
        raise TypeError("coarse_options must be a dict of keyword arguments of "
                        f"ddops.coarse_basis, got {type(options).__name__}")
    kind_type = COARSE_OPTION_TYPES.get(kind) if isinstance(kind, str) else None
    allowed = () if kind_type is None else tuple(f.name for f in dataclasses.fields(kind_type))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"coarse_options: {unknown} not accepted with coarse_basis={kind!r} "
                         f"(accepted: {list(allowed)})")
    if kind_type is None:
        return {}
    values = {k: v for k, v in options.items() if v is not None}
    attr = "gdsw" if kind_type is GDSWOptions else kind
    return {attr: kind_type(**values)}


def check_option(name: str, value: Any, label: str | None = None) -> Any:
    """``value`` of the field ``name`` of :class:`SchwarzOptions` checked against its
    :data:`OPTION_SPECS` entry, as :class:`SchwarzOptions` checks it; the messages name
    ``label`` (e.g. a command-line flag or a PETSc option) instead of the field."""
    return _check_field(OPTION_SPECS[name], value, label)


# -- the command line ------------------------------------------------------------------------
def coarse_option_users(name: str) -> tuple[str, ...]:
    """The coarse spaces whose options object has the field ``name``, in the order of
    :data:`COARSE_SPACES` (``"rgdsw"`` takes :class:`GDSWOptions`)."""
    if name not in COARSE_OPTION_SPECS:
        raise ValueError(f"{name!r} is not an option of a coarse space; the options are "
                         f"{tuple(COARSE_OPTION_SPECS)}")
    return tuple(space for space in COARSE_SPACES if space in COARSE_OPTION_TYPES
                 and name in {f.name for f in dataclasses.fields(COARSE_OPTION_TYPES[space])})


def coarse_option_defaults(name: str) -> dict[str, Any]:
    """The default of the coarse-space option ``name`` in each space that takes it."""
    out = {}
    for space in coarse_option_users(name):
        f = next(f for f in dataclasses.fields(COARSE_OPTION_TYPES[space]) if f.name == name)
        out[space] = f.default
    return out


def _spec_of(name: str) -> OptionSpec:
    spec = OPTION_SPECS.get(name) or COARSE_OPTION_SPECS.get(name)
    if spec is None:
        raise ValueError(f"{name!r} is not an option; the options are "
                         f"{(*OPTION_SPECS, *COARSE_OPTION_SPECS)}")
    return spec


def cli_flag(name: str) -> str | None:
    """The command-line flag of the option ``name`` (``"block_size"`` -> ``"--block-size"``),
    None for one without a flag (``neumann``)."""
    return _spec_of(name).flag


def _library_default(name: str) -> Any:
    """The default of ``name``: :class:`SchwarzOptions`' field, or the coarse spaces' default
    when they share one (None when they differ)."""
    if name in OPTION_SPECS:
        return next(f.default for f in dataclasses.fields(SchwarzOptions) if f.name == name)
    values = set(coarse_option_defaults(name).values())
    return values.pop() if len(values) == 1 else None


def _name_type(name: str, flag: str):
    """A string, with the old spellings of :data:`DEPRECATED_CHOICES` warned about and
    replaced by the new ones."""
    old = DEPRECATED_CHOICES.get(name, {})

    def parse(text: str) -> str:
        if text in old:
            warnings.warn(f"{flag} {text} is deprecated; use {flag} {old[text]}",
                          DeprecationWarning, stacklevel=2)
            return old[text]
        return text

    parse.__name__ = "name"
    return parse


#: What a default of None means, for the help, where it is a rule rather than a value.
_RULE_DEFAULTS = {("geneo", "threshold"): f"{GENEO_THRESHOLD:g} ({GENEO_OVERSAMPLED_THRESHOLD:g} "
                                          "oversampled)"}


def _default_text(name: str, default: Any) -> str | None:
    if name in COARSE_OPTION_SPECS:
        each = {space: _RULE_DEFAULTS.get((space, name), value)
                for space, value in coarse_option_defaults(name).items()}
        if len(set(each.values())) > 1:
            return ", ".join(f"{space} {value:g}" if isinstance(value, float)
                             else f"{space} {value}" for space, value in each.items())
    if default is None:
        return None
    return f"{default:g}" if isinstance(default, float) else str(default)


def _strip_default(text: str) -> str:
    """``text`` without a trailing ``(default...)`` of its own."""
    head, sep, tail = text.rpartition(" (default")
    return head if sep and tail.endswith(")") else text


def add_cli_arguments(parser: Any, names: Any = None, *, defaults: dict | None = None,
                      notes: dict | None = None, default_help: dict | None = None,
                      extra_choices: dict | None = None,
                      extra_names: dict | None = None) -> dict[str, argparse.Action]:
    """Add one flag per option to ``parser``: its name, choices, default and help come
    from :data:`OPTION_SPECS`, :data:`COARSE_OPTION_SPECS` and the dataclasses.

    Parameters
    ----------
    parser : argparse.ArgumentParser or argument group
        Where the flags go.
    names : sequence of str, optional
        The options (fields of :data:`OPTION_SPECS`, options of the coarse spaces of
        :data:`COARSE_OPTION_SPECS`); default: every one that has a flag.  The
        destination of each flag is the option's name.
    defaults : dict, optional
        Another default than the library's, by name; None stands for "not given" (the
        help then states the library's default).
    notes : dict, optional
        Text added to an option's help, by name (what a program does with it).
    default_help : dict, optional
        How the help states an option's default, by name, instead of the value (for
        defaults that depend on other settings).
    extra_choices : dict, optional
        Further values a ``"choice"`` option takes here, by name (a program's own, such
        as ``"all"``), after the library's.
    extra_names : dict, optional
        Further names an ``"array"`` option takes here, by name, before the library's.

    Returns
    -------
    dict
        The argparse action of each option, by name.

    Examples
    --------
    >>> import argparse
    >>> from ddops.precond.options import add_cli_arguments, options_from_cli
    >>> parser = argparse.ArgumentParser()
    >>> _ = add_cli_arguments(parser, ["coarse", "threshold"])
    >>> options_from_cli(parser.parse_args(["--coarse", "geneo", "--threshold", "0.3"])
    ...                  ).geneo.threshold
    0.3
    """
    defaults, notes, default_help = defaults or {}, notes or {}, default_help or {}
    extra_choices, extra_names = extra_choices or {}, extra_names or {}
    if names is None:
        names = [n for n in (*OPTION_SPECS, *COARSE_OPTION_SPECS) if _spec_of(n).flag]
    actions = {}
    for name in names:
        spec = _spec_of(name)
        if spec.flag is None:
            raise ValueError(f"{name!r} has no command-line flag")
        default = defaults.get(name, _library_default(name))
        kw: dict[str, Any] = {"dest": name, "default": default}
        if spec.kind == "choice":
            kw["type"] = _name_type(name, spec.flag)
            kw["choices"] = tuple(dict.fromkeys((*spec.choices, *extra_choices.get(name, ()))))
        elif spec.kind == "array":
            kw["type"] = _name_type(name, spec.flag)
            kw["metavar"] = "{" + ",".join(dict.fromkeys(
                (*extra_names.get(name, ()), *spec.choices, "FILE"))) + "}"
        elif spec.kind == "float":
            kw["type"] = nonnegative_float if spec.minimum == 0 else positive_float
        else:  # "int", "threads"
            kw["type"] = int_at_least(spec.minimum)
        text = spec.help
        # a default of None means "not given": the library's default applies
        stated = default_help.get(name) or _default_text(
            name, _library_default(name) if default is None else default)
        if stated is not None:
            text = _strip_default(text)
        if name in COARSE_OPTION_SPECS:
            text = f"{', '.join(coarse_option_users(name))}: {text}"
        if notes.get(name):
            text += f"; {notes[name]}"
        if stated is not None:
            text += f"; default {stated}"
        kw["help"] = text.replace("%", "%%")
        actions[name] = parser.add_argument(spec.flag, **kw)
    return actions


class _DeprecatedFlag(argparse.Action):
    """A hidden old spelling of a flag: warns, naming the new one, then does what it does."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "",
                 target: argparse.Action | None = None, **kwargs: Any) -> None:
        self.new, self.target = new, target
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        warnings.warn(f"{option_string} is deprecated; use {self.new}", DeprecationWarning,
                      stacklevel=2)
        if self.target is not None:
            self.target(parser, namespace, values, self.new)
        else:
            setattr(namespace, self.dest, values)


def add_deprecated_flag(parser: Any, old: str, action: argparse.Action) -> argparse.Action:
    """Add ``old`` as a hidden spelling of the flag of ``action``: it takes the same values,
    stores them in the same place, and warns (:class:`DeprecationWarning`) naming the
    flag's name.

    Parameters
    ----------
    parser : argparse.ArgumentParser or argument group
        Where ``action`` was added.
    old : str
        The old flag, e.g. ``"--coarse-basis"``.
    action : argparse.Action
        The flag's action (what ``add_argument`` returned).
    """
    return parser.add_argument(old, dest=action.dest, action=_DeprecatedFlag,
                               new=action.option_strings[0], target=action,
                               type=action.type, choices=action.choices,
                               nargs=action.nargs, metavar=action.metavar,
                               default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def options_from_cli(namespace: Any, **changes: Any) -> SchwarzOptions:
    """The :class:`SchwarzOptions` of flags from :func:`add_cli_arguments`.

    Every attribute of ``namespace`` named as an option and not None is used; an option
    of the coarse spaces goes to the options object of each space that takes it.

    Parameters
    ----------
    namespace : argparse.Namespace
        The parsed flags.
    **changes
        Fields to set besides (or instead of) the flags' values.
    """
    values = {k: v for k, v in vars(namespace).items() if v is not None}
    fields = {k: values[k] for k in OPTION_SPECS if k in values}
    sub: dict[str, dict[str, Any]] = {}
    for name in COARSE_OPTION_SPECS:
        if name in values:
            for space in coarse_option_users(name):
                attr = "gdsw" if COARSE_OPTION_TYPES[space] is GDSWOptions else space
                sub.setdefault(attr, {})[name] = values[name]
    for attr, kw in sub.items():
        fields[attr] = COARSE_OPTION_TYPES[attr](**kw)
    fields.update(changes)
    return SchwarzOptions(**fields)
