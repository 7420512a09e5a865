"""The options of :class:`~ddops.petsc.SchwarzPC` and :func:`~ddops.petsc.setup_native`.

Every option has a keyword argument of ``SchwarzPC(...)`` and an entry
``-<prefix>ddops_<name>`` of the options database, where ``<prefix>`` is the
PC's options prefix (``pc.getOptionsPrefix()``, empty by default).  The
database wins over the keyword arguments, as PETSc's own objects let the
command line override what the code set.  A bad value raises a
:class:`ValueError` (or :class:`TypeError`) that names the option as it was
given and the accepted values: ``-ddops_coarse foo`` names ``-ddops_coarse``.

The options are those of :class:`ddops.SchwarzOptions` (:data:`OPTIONS` is built
from :data:`ddops.precond.options.OPTION_SPECS` and the coarse spaces' options
objects: the same names, choices and defaults), plus what only PETSc has
(:data:`PETSC_ONLY`):

* the options of the coarse spaces are flat: ``-ddops_gdsw_extension_solver``,
  ``-ddops_agdsw_threshold``, ``-ddops_agdsw_max_per_component``,
  ``-ddops_agdsw_extension_solver``, ``-ddops_agdsw_skip_contrast``,
  ``-ddops_geneo_threshold``,
  ``-ddops_geneo_max_per_subdomain``, ``-ddops_geneo_oversampling``,
  ``-ddops_geneo_skip_contrast``, ``-ddops_geneo_eigen_stop`` (the Neumann
  matrices cannot come from the options database);
* ``-ddops_null_space`` takes ``auto`` (the default: the near-null space attached
  with ``MatSetNearNullSpace`` when there is one, else the constants) and ``near``
  (that near-null space, required) besides ``constants``; the old ``constant`` is
  accepted with a :class:`DeprecationWarning`.  A file of vectors is not read: the
  near-null space comes from the matrix;
* ``-ddops_kernel constants``: the constants are the exact kernel of ``A``;
* ``-ddops_reuse_coarse``: a second set-up for the same pattern keeps the coarse
  basis (see :meth:`ddops.TwoLevelSchwarz.update`).

Some values of the shared options have no meaning under PETSc and are refused with
the reason (:data:`REFUSED`): the ``grid`` partitioner and the hat coarse spaces
need a structured grid or a 1D decomposition, which the rank decomposition (each
rank cuts its own rows) is not.  ``-ddops_coarse auto`` is ``gdsw`` there (the rank
decomposition always has owner labels).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any

from ..precond import options as _shared
from ..precond.options import (
    DEPRECATED_CHOICES,
    OPTION_SPECS,
    AGDSWOptions,
    GDSWOptions,
    GenEOOptions,
    check_option,
)
from ..precond.options import SchwarzOptions as _Shared

__all__ = ["COARSE_CHOICES", "NULL_SPACE_CHOICES", "OPTIONS", "PARTITIONERS", "PETSC_ONLY",
           "PetscOption", "REFUSED", "SchwarzOptions"]


@dataclass(frozen=True)
class PetscOption:
    """One ``-ddops_<name>`` option.

    Attributes
    ----------
    name : str
        The option without ``-<prefix>ddops_`` (and the keyword argument).
    kind : {"int", "float", "choice", "bool"}
        How the database's string is read.
    choices : tuple of str
        The accepted strings of a ``"choice"``.
    default : Any
        The value without the option.
    help : str
        One line for the docs.
    field : str or None
        Where the value goes: a field of :class:`ddops.SchwarzOptions`
        (``"agdsw.threshold"`` for a coarse space's option), None for PETSc only.
    petsc_only : str
        What only PETSc has about it (empty when it is the shared option as it is).
    """

    name: str
    kind: str
    choices: tuple = ()
    default: Any = None
    help: str = ""
    field: str | None = None
    petsc_only: str = ""


#: The choices of ``-ddops_null_space``: PETSc's own ``auto`` and ``near``, then the shared
#: ones (``constants``).
NULL_SPACE_CHOICES = ("auto", "near", *OPTION_SPECS["null_space"].choices)

#: Values of the shared options that the PETSc route refuses, with the reason.
REFUSED = {
    "partitioner": {"grid": "needs the boxes of a structured grid; under PETSc each rank "
                            "cuts its own rows (metis, rcb with coordinates, contiguous)"},
    "coarse": {"interface_hats": "needs a 1D decomposition with interface nodes, and the "
                                 "rank decomposition is built from the rows of a matrix",
               "grid_hats": "needs a structured-grid decomposition, and the rank "
                            "decomposition is built from the rows of a matrix"},
}

#: How PETSc's meaning differs, for the options that have a PETSc-only part.
_PETSC_NOTES = {
    "subdomains": "in all, split over the ranks as evenly as possible (at least 2 per rank)",
    "partitioner": "cuts each rank's own rows; contiguous: blocks of each rank's rows",
    "block_size": "default: the matrix's block size",
    "coarse": "auto is gdsw (the rank decomposition has owner labels)",
    "null_space": "auto (default): the near-null space of the matrix (MatSetNearNullSpace) "
                  "when there is one, else the constants; near: that near-null space, "
                  "required; no file",
    "kernel": "constants only (no file)",
}

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(_Shared)
             if f.default is not dataclasses.MISSING}


def _from_spec(name: str) -> PetscOption:
    spec = OPTION_SPECS[name]
    kind = {"int": "int", "threads": "int", "choice": "choice", "array": "choice"}[spec.kind]
    choices, default = spec.choices, _DEFAULTS[name]
    if name == "null_space":
        choices, default = NULL_SPACE_CHOICES, "auto"
    return PetscOption(spec.petsc, kind, tuple(choices), default, spec.help, name,
                       _PETSC_NOTES.get(name, ""))


def _sub_options() -> list[PetscOption]:
    """The coarse spaces' options, ``<space>_<option>``, from their options objects."""
    out = []
    for space, cls in (("gdsw", GDSWOptions), ("agdsw", AGDSWOptions),
                       ("geneo", GenEOOptions)):
        for f in dataclasses.fields(cls):
            if f.name == "neumann":  # matrices: not from the options database
                continue
            spec = _shared.COARSE_OPTION_SPECS.get(f.name)
            if spec is not None and spec.kind == "choice":  # extension_solver, eigen_stop
                kind, choices = "choice", spec.choices
            elif spec is not None and spec.kind in ("int", "float"):
                # the spec's kind: a default of None (a rule, GenEO's threshold and
                # oversampling) has no type of its own
                kind, choices = spec.kind, ()
            elif isinstance(f.default, bool) or not isinstance(f.default, numbers.Real):
                raise TypeError(f"{cls.__name__}.{f.name}: no PETSc option type")
            else:
                kind = "int" if isinstance(f.default, numbers.Integral) else "float"
                choices = ()
            out.append(PetscOption(f"{space}_{f.name}", kind, tuple(choices), f.default,
                                   f"{f.name} of the {space} coarse space "
                                   f"({cls.__name__})", f"{space}.{f.name}"))
    return out


#: Every option, ``-<prefix>ddops_<name>``, by name: the shared ones (``ddops.SchwarzOptions``
#: fields with a PETSc name, in their order), the coarse spaces' options, then PETSc's own.
OPTIONS = {o.name: o for o in (
    *(_from_spec(name) for name, spec in OPTION_SPECS.items() if spec.petsc),
    *_sub_options(),
    PetscOption("reuse_coarse", "bool", (), False,
                "a set-up for a matrix with the pattern of the last one keeps the coarse "
                "basis Phi (update(..., reuse_coarse=True))", None, "PETSc only"),
)}

#: The options (or parts of them) only PETSc has.
PETSC_ONLY = {name: o.petsc_only for name, o in OPTIONS.items() if o.petsc_only}

#: Coarse spaces by name, as ``ddops.SchwarzOptions`` (``-ddops_coarse``).
COARSE_CHOICES = OPTIONS["coarse"].choices

#: Partitioners, as ``ddops.SchwarzOptions`` (``-ddops_partitioner``; ``grid`` is refused).
PARTITIONERS = OPTIONS["partitioner"].choices


def _check(name: str, value: Any, label: str) -> Any:
    """Validate one setting; the messages name ``label`` (the keyword or the option)."""
    option = OPTIONS[name]
    if option.kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{label} must be a bool, got {type(value).__name__} {value!r}")
        return value
    if option.kind == "float":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{label} must be a number, got {type(value).__name__} {value!r}")
        value = float(value)
    elif name in OPTION_SPECS and name not in ("null_space", "kernel"):
        value = check_option(name, value, label)  # the shared check: choices, minimum
    elif option.kind == "int":
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{label} must be an integer, got {type(value).__name__} {value!r}")
        value = int(value)
    elif value is not None or name != "kernel":
        if not isinstance(value, str):
            raise TypeError(f"{label} must be a string, got {type(value).__name__} {value!r}")
        old = DEPRECATED_CHOICES.get(option.field or "", {})
        if value in old:
            import warnings

            warnings.warn(f"{label} {value!r} is deprecated; use {old[value]!r}",
                          DeprecationWarning, stacklevel=4)
            value = old[value]
        if value not in option.choices:
            raise ValueError(f"{label} must be one of {option.choices}, got {value!r}")
    reason = REFUSED.get(name, {}).get(value) if isinstance(value, str) else None
    if reason:
        raise ValueError(f"{label} {value}: not available under PETSc: {reason}")
    if option.field and "." in option.field:  # a coarse space's option: its own checks
        space, field = option.field.split(".")
        cls = {"gdsw": GDSWOptions, "agdsw": AGDSWOptions, "geneo": GenEOOptions}[space]
        try:
            cls(**{field: value})
        except ValueError as exc:
            raise ValueError(f"{label}: {exc}") from None
    return value


def _parse(name: str, raw: str, label: str) -> Any:
    """``raw`` from the database as the option's type, checked (errors name ``label``)."""
    option = OPTIONS[name]
    raw = raw.strip()
    if option.kind == "bool":
        word = raw.lower()
        if word in ("", "1", "true", "yes", "on"):
            return True
        if word in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{label} must be a bool (true or false), got {raw!r}")
    if option.kind in ("int", "float"):
        if option.default is None and raw.lower() in ("", "auto", "default"):
            return None
        try:
            value = int(raw) if option.kind == "int" else float(raw)
        except ValueError:
            what = "an integer" if option.kind == "int" else "a number"
            raise ValueError(f"{label} must be {what}, got {raw!r}") from None
        return _check(name, value, label)
    return _check(name, raw.lower(), label)


class SchwarzOptions:
    """Validated settings of the PETSc routes, one attribute per option of :data:`OPTIONS`.

    ``SchwarzOptions(**keywords)`` checks the keywords (unknown names refused);
    :meth:`with_database` applies the options database; :meth:`schwarz_options` gives the
    :class:`ddops.SchwarzOptions` of the preconditioner.
    """

    def __init__(self, **values: Any) -> None:
        unknown = sorted(set(values) - set(OPTIONS))
        if unknown:
            raise TypeError(f"unknown options {unknown}; the options are {sorted(OPTIONS)}")
        for name, option in OPTIONS.items():
            value = values.get(name, option.default)
            if not (value is None and option.default is None):
                value = _check(name, value, name)
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("SchwarzOptions is read-only; use with_database or a new one")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SchwarzOptions) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.as_dict().items() if v != OPTIONS[k].default}
        return f"SchwarzOptions({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

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
        values = self.as_dict()
        for name in OPTIONS:
            if database.hasName(name):
                raw = database.getString(name, "")
                values[name] = _parse(name, raw, f"-{head}{name}")
        return SchwarzOptions(**values)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a plain dict."""
        return {name: getattr(self, name) for name in OPTIONS}

    def schwarz_options(self, coarse: Any, null_space: Any = None) -> _Shared:
        """The :class:`ddops.SchwarzOptions` of the preconditioner: these settings with the
        coarse space ``coarse`` (resolved) and the near-null space ``null_space`` (an
        array or None)."""
        values = {o.field: getattr(self, name) for name, o in OPTIONS.items()
                  if o.field and "." not in o.field}
        values.update(coarse=coarse, null_space=null_space)
        if coarse != "grid_hats":
            values["coarse_size"] = None
        sub = {}
        for name, o in OPTIONS.items():
            if o.field and "." in o.field:
                space, field = o.field.split(".")
                sub.setdefault(space, {})[field] = getattr(self, name)
        return _Shared(**values, gdsw=GDSWOptions(**sub["gdsw"]),
                       agdsw=AGDSWOptions(**sub["agdsw"]), geneo=GenEOOptions(**sub["geneo"]))
