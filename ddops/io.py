"""Saving and loading trained operators as ``.npz`` files (no pickle).

A file holds a JSON description of how to rebuild the operator (class,
decomposition, ranks, coarse basis, dtype) and the flat parameter vector.
Loading uses ``allow_pickle=False`` and validates every field.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy.sparse as sp

from .backend import to_numpy
from .decomposition import Decomposition, Decomposition1D
from .operators import GlobalLowRankOperator, LowRankOperator, SchwarzOperator

__all__ = ["FORMAT_VERSION", "save_operator", "load_operator", "atomic_savez", "atomic_write_text",
           "atomic_write_json"]

FORMAT_VERSION = 1


def _chmod_default(path: str) -> None:
    """Give a ``mkstemp`` file (mode 0600) the permissions of a normally created file."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


@contextlib.contextmanager
def _atomic_target(path: Path, mode: str) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    A reader never sees a half-written file, and a crash or an exception
    leaves the previous file in place.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _chmod_default(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically (temporary file, then rename)."""
    path = Path(path)
    with _atomic_target(path, "w") as fh:
        fh.write(text)
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def atomic_write_json(path: str | os.PathLike, payload: Any, indent: int = 2) -> Path:
    """Write ``payload`` as JSON atomically (numpy scalars, tuples and paths allowed)."""
    return atomic_write_text(path, json.dumps(payload, indent=indent,
                                              default=_json_default) + "\n")


def atomic_savez(path: str | os.PathLike, **arrays: Any) -> Path:
    """``np.savez`` to a temporary file in the target folder, then an atomic rename.

    ``.npz`` is appended to the name when missing.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    with _atomic_target(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def _describe(op: LowRankOperator) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    if isinstance(op, GlobalLowRankOperator):
        meta = {"class": "GlobalLowRankOperator", "num_dofs": op.shape[0], "rank": op.rank,
                "h": op.h}
    elif isinstance(op, SchwarzOperator):
        d = op.decomposition
        if isinstance(d, Decomposition1D):
            dmeta = {"type": "Decomposition1D", "n": d.n, "subdomains": d.num_subdomains,
                     "overlap": d.overlap, "kind": d.kind}
        else:
            dmeta = {"type": "Decomposition", "num_dofs": d.num_dofs, "h": d.h}
            arrays.update(dec_indices=d.indices, dec_offsets=d.offsets,
                          dec_interface=d.interface_nodes, dec_coordinates=d.coordinates)
        basis = op.coarse_basis_name
        if basis == "custom":
            Phi = sp.csr_matrix(op.coarse_matrix)
            arrays.update(phi_data=Phi.data, phi_indices=Phi.indices, phi_indptr=Phi.indptr,
                          phi_shape=np.array(Phi.shape))
        base = "none"
        if op.base is not None:
            matrix = getattr(op.base, "matrix", None)
            if matrix is None:
                base = "operator"  # not serialisable: the caller passes it again on load
            else:
                base = "matrix"
                M = sp.csr_matrix(matrix)
                arrays.update(base_data=M.data, base_indices=M.indices, base_indptr=M.indptr)
        meta = {"class": "SchwarzOperator", "decomposition": dmeta,
                "local_rank": op.local_rank, "coarse_rank": op.coarse_rank,
                "coarse_basis": basis, "coarse_size": op.coarse_dim if basis == "grid_hats"
                else None, "partition": op.partition, "tied": op.tied, "base": base}
    else:
        raise TypeError(f"op must be a SchwarzOperator or GlobalLowRankOperator, got "
                        f"{type(op).__name__}")
    meta.update(format=FORMAT_VERSION, dtype=str(op.dtype), init=op.init, seed=op.seed)
    return meta, arrays


def save_operator(op: LowRankOperator, path: str | os.PathLike, **extra: Any) -> Path:
    """Save an operator's description and parameters to ``path`` (``.npz``), atomically.

    Parameters
    ----------
    op : SchwarzOperator or GlobalLowRankOperator
        The operator to save.
    path : path-like
        Target file; ``.npz`` is appended when missing.
    **extra : array-like
        Additional numeric arrays stored beside the parameters.
    """
    meta, arrays = _describe(op)
    for key in extra:
        if key in arrays or key in ("meta", "theta"):
            raise ValueError(f"extra array name {key!r} is reserved")
    return atomic_savez(path, meta=np.array(json.dumps(meta)), theta=to_numpy(op.theta),
                        **arrays, **{k: np.asarray(v) for k, v in extra.items()})


def load_operator(path: str | os.PathLike, backend: str = "numpy",
                  base: Any = None) -> LowRankOperator:
    """Load an operator written by :func:`save_operator` (validated, no pickle).

    Parameters
    ----------
    path : path-like
        The ``.npz`` file.
    backend : {"numpy", "cupy"}
        Where the loaded operator lives.
    base : LinearOperator, optional
        The fixed term of a Schwarz operator that was saved with a ``base``
        that is not a matrix (such operators cannot be stored); required then.

    Raises
    ------
    ValueError
        If the file is not a ddops operator file or its contents are inconsistent.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read operator file {str(path)!r}: {exc}") from exc
    if "meta" not in data or "theta" not in data:
        raise ValueError(f"{str(path)!r} is not a ddops operator file (no meta/theta)")
    try:
        meta = json.loads(str(data["meta"]))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r}: corrupt metadata") from exc
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{str(path)!r}: unsupported format {meta.get('format')!r}")
    common = dict(init=meta["init"], seed=meta["seed"], dtype=meta["dtype"], backend=backend)
    if meta["class"] == "GlobalLowRankOperator":
        op: LowRankOperator = GlobalLowRankOperator(meta["num_dofs"], meta["rank"],
                                                    h=meta["h"], **common)
    elif meta["class"] == "SchwarzOperator":
        dm = meta["decomposition"]
        if dm["type"] == "Decomposition1D":
            d: Decomposition = Decomposition1D(dm["n"], dm["subdomains"], dm["overlap"],
                                               dm["kind"])
        else:
            subs = np.split(data["dec_indices"], data["dec_offsets"][1:-1])
            d = Decomposition(subs, dm["num_dofs"], data["dec_interface"],
                              data["dec_coordinates"], dm["h"])
        basis = meta["coarse_basis"]
        if basis == "custom":
            basis = sp.csr_matrix((data["phi_data"], data["phi_indices"], data["phi_indptr"]),
                                  shape=tuple(data["phi_shape"]))
        if meta["base"] == "matrix":
            n = d.num_dofs
            base = sp.csr_matrix((data["base_data"], data["base_indices"], data["base_indptr"]),
                                 shape=(n, n))
        elif meta["base"] == "operator" and base is None:
            raise ValueError(f"{str(path)!r} was saved with a fixed base operator that is not "
                             "a matrix; pass it again as base=")
        elif meta["base"] == "none" and base is not None:
            raise ValueError(f"{str(path)!r} has no base term; do not pass base=")
        op = SchwarzOperator(d, meta["local_rank"], meta["coarse_rank"] or None, basis,
                             coarse_size=meta["coarse_size"], partition=meta["partition"],
                             tied=meta["tied"], base=base, **common)
    else:
        raise ValueError(f"{str(path)!r}: unknown operator class {meta['class']!r}")
    theta = data["theta"]
    if theta.shape != op.theta.shape:
        raise ValueError(f"{str(path)!r}: parameter vector has shape {theta.shape}, "
                         f"expected {op.theta.shape}")
    if not np.all(np.isfinite(theta)):
        raise ValueError(f"{str(path)!r}: parameters contain NaN or inf")
    op.theta[...] = op.xp.asarray(theta, dtype=op.dtype)
    return op
