"""Saving and loading trained operators as ``.npz`` files (no pickle).

A file holds a JSON description of how to rebuild the operator (class,
decomposition, ranks, coarse basis, dtype) and the flat parameter vector.
Every ddops ``.npz`` (operators and training checkpoints) is read by
:func:`read_npz`, which never unpickles anything and turns every kind of
damage into a ``ValueError`` that names the file and the problem.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import scipy.sparse as sp

from .backend import to_numpy
from .dd.coarse import MATRIX_COARSE_BASES
from .dd.decomposition import Decomposition, Decomposition1D
from .operators import GlobalLowRankOperator, LowRankOperator, SchwarzOperator

__all__ = ["FORMAT_VERSION", "save_operator", "load_operator", "describe_operator", "read_npz",
           "atomic_savez", "atomic_write_text", "atomic_write_json"]

FORMAT_VERSION = 1

#: What a damaged archive can raise while it is read (zipfile and numpy's header parser).
_ARCHIVE_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, OSError,
                   ValueError, NotImplementedError, RuntimeError, SyntaxError)


def _current_umask() -> int:
    """The process umask, read without changing it where the system allows."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    umask = os.umask(0)  # elsewhere the only portable query sets it (briefly) to 0
    os.umask(umask)
    return umask


def _chmod_default(path: str) -> None:
    """Give a ``mkstemp`` file (mode 0600) the permissions of a normally created file."""
    os.chmod(path, 0o666 & ~_current_umask())


@contextlib.contextmanager
def _atomic_target(path: Path, mode: str) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    A reader never sees a half-written file, and a crash or an exception
    leaves the previous file in place and no temporary file behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        _chmod_default(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)  # only open if fdopen itself failed
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a text file (UTF-8) atomically: a temporary file, then a rename.

    If anything fails the previous file is left untouched and no temporary
    file remains.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
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
    """Write ``payload`` as JSON atomically (numpy scalars, tuples and paths allowed).

    The payload is serialised before the file is touched, so a payload that
    cannot be written leaves the previous file as it was.
    """
    return atomic_write_text(path, json.dumps(payload, indent=indent,
                                              default=_json_default) + "\n")


def atomic_savez(path: str | os.PathLike, **arrays: Any) -> Path:
    """``np.savez`` to a temporary file in the target folder, then an atomic rename.

    ``.npz`` is appended to the name when missing.  Arrays of Python objects
    are refused (they would be pickled, and every ddops loader refuses
    pickles).

    Raises
    ------
    TypeError
        If an array holds Python objects.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    arrays = {key: np.asarray(value) for key, value in arrays.items()}
    for key, value in arrays.items():
        if value.dtype.hasobject:
            raise TypeError(f"array {key!r} holds Python objects (dtype {value.dtype}); "
                            "only numeric and string arrays can be saved (no pickle)")
    with _atomic_target(path, "wb") as fh:
        np.savez(fh, **arrays)
    return path


# -- reading -------------------------------------------------------------------------------
def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, name: str) -> np.ndarray:
    """One ``.npy`` member, with its header checked before any data is read."""
    key = info.filename[:-4]
    with zf.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(member)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(member)
        if dtype.hasobject:
            raise ValueError(f"{name}: array {key!r} holds pickled Python objects "
                             f"(dtype {dtype}); refused, since unpickling can run code")
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if nbytes > info.file_size:
            raise ValueError(f"{name}: array {key!r} is truncated (its header declares "
                             f"{nbytes} bytes of data, the archive member holds "
                             f"{info.file_size} in all)")
        data = member.read(nbytes)
        if len(data) != nbytes:
            raise ValueError(f"{name}: array {key!r} is truncated ({len(data)} of {nbytes} "
                             "bytes)")
        if member.read(1):  # reading to the end also checks the member's CRC
            raise ValueError(f"{name}: array {key!r} has more data than its header declares")
    array = np.frombuffer(data, dtype=dtype, count=count).copy()
    return array.reshape(shape, order="F" if fortran else "C")


def read_npz(path: str | os.PathLike, what: str, required: Iterable[str] = (),
             meta_keys: Iterable[str] = ()) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read a ddops ``.npz`` file: its JSON ``meta`` entry and its arrays, without pickle.

    Shared by :func:`load_operator` and :meth:`ddops.learning.training.Trainer.load_checkpoint`,
    so every loader refuses damaged and foreign files the same way.

    Parameters
    ----------
    path : path-like
        The file.
    what : str
        What the file should be, for messages (``"operator file"``, ``"checkpoint"``).
    required : iterable of str
        Arrays that must be present besides ``meta``.
    meta_keys : iterable of str
        Keys the metadata must have.

    Returns
    -------
    meta : dict
        The decoded metadata.
    arrays : dict of numpy arrays
        Every other array, by name.

    Raises
    ------
    ValueError
        Naming the file and the problem: it does not exist or is empty, is not
        a zip archive, is truncated or damaged, holds a pickled object array,
        lacks an array or a metadata key, or its metadata is not readable JSON.
    """
    name = f"{what} {str(path)!r}"
    p = Path(path)
    try:
        if p.is_dir():
            raise ValueError(f"{name} is a directory, not a file")
        size = p.stat().st_size
    except FileNotFoundError:
        raise ValueError(f"{name} does not exist") from None
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from exc
    if size == 0:
        raise ValueError(f"{name} is empty (0 bytes)")
    arrays: dict[str, np.ndarray] = {}
    try:
        with open(p, "rb") as fh:
            head = fh.read(6)
            fh.seek(0)
            if not zipfile.is_zipfile(fh):
                if head.startswith(b"PK\x03\x04"):
                    raise ValueError(f"{name} is truncated: the end of its .npz (zip) archive "
                                     "is missing")
                if head == b"\x93NUMPY":
                    raise ValueError(f"{name} is a single .npy array, not an .npz archive")
                raise ValueError(f"{name} is not an .npz file (not a zip archive)")
            fh.seek(0)
            with zipfile.ZipFile(fh) as zf:
                for info in zf.infolist():
                    if not info.filename.endswith(".npy"):
                        raise ValueError(f"{name} is not an .npz file written by numpy "
                                         f"(member {info.filename!r} is not a .npy array)")
                    arrays[info.filename[:-4]] = _read_member(zf, info, name)
    except ValueError as exc:
        if str(exc).startswith(name):
            raise
        raise ValueError(f"{name} is damaged: {exc}") from exc
    except _ARCHIVE_ERRORS as exc:
        raise ValueError(f"{name} is damaged: {type(exc).__name__}: {exc}") from exc
    kind = what if what.startswith("ddops") else f"ddops {what}"
    for key in ("meta", *required):
        if key not in arrays:
            raise ValueError(f"{name} is not a {kind}: it has no array {key!r}")
    raw = arrays.pop("meta")
    if raw.shape != () or raw.dtype.kind != "U":
        raise ValueError(f"{name}: metadata 'meta' must be a JSON string, got an array of "
                         f"dtype {raw.dtype} and shape {raw.shape}")
    try:
        meta = json.loads(str(raw[()]))
    except ValueError as exc:  # json.JSONDecodeError, and out-of-range numbers
        raise ValueError(f"{name}: metadata is not readable JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise ValueError(f"{name}: metadata must be a JSON object, got "
                         f"{type(meta).__name__}")
    for key in meta_keys:
        if key not in meta:
            raise ValueError(f"{name}: metadata lacks the key {key!r}")
    return meta, arrays


def check_parameter_vector(theta: np.ndarray, shape: tuple[int, ...], name: str) -> np.ndarray:
    """Check a stored parameter vector: real floating point, the expected shape, finite.

    ``name`` starts the messages (it names the file).
    """
    if np.issubdtype(theta.dtype, np.complexfloating):
        raise ValueError(f"{name}: parameters are complex ({theta.dtype}); ddops parameters "
                         "are real")
    if not np.issubdtype(theta.dtype, np.floating):
        raise ValueError(f"{name}: parameters must be floating point, got {theta.dtype}")
    if theta.shape != tuple(shape):
        raise ValueError(f"{name}: parameter vector has shape {theta.shape}, expected "
                         f"{tuple(shape)} for the operator its metadata describes")
    if not np.all(np.isfinite(theta)):
        raise ValueError(f"{name}: parameters contain NaN or inf")
    return theta


# -- operators -----------------------------------------------------------------------------
def _describe(op: LowRankOperator) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    if isinstance(op, GlobalLowRankOperator):
        meta = {"class": "GlobalLowRankOperator", "num_dofs": op.shape[0], "rank": op.rank,
                "h": op.h}
        if op.dim != 1:  # recorded only when not the default (older files lack it)
            meta["dim"] = op.dim
    elif isinstance(op, SchwarzOperator):
        d = op.decomposition
        if isinstance(d, Decomposition1D):
            dmeta = {"type": "Decomposition1D", "n": d.n, "subdomains": d.num_subdomains,
                     "overlap": d.overlap, "kind": d.kind}
        else:
            dmeta = {"type": "Decomposition", "num_dofs": d.num_dofs, "h": d.h,
                     "block_size": d.block_size}
            arrays.update(dec_indices=d.indices, dec_offsets=d.offsets,
                          dec_interface=d.interface_nodes, dec_coordinates=d.coordinates)
            # optional (older files lack them): the non-overlapping partition and shared nodes
            if d.owner is not None:
                arrays["dec_owner"] = d.owner
            if d.shared_nodes is not None:
                arrays["dec_shared_nodes"] = d.shared_nodes
        basis = op.coarse_basis_name
        if op.stores_coarse_matrix:  # a user basis, or one built from A or a null space
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
        if op.padding_groups > 1:  # the grouped layout (older files have one group)
            meta["padding_groups"] = op.padding_groups
    else:
        raise TypeError(f"op must be a SchwarzOperator or GlobalLowRankOperator, got "
                        f"{type(op).__name__}")
    meta.update(format=FORMAT_VERSION, dtype=str(op.dtype), init=op.init, seed=op.seed)
    return meta, arrays


def describe_operator(op: LowRankOperator) -> dict[str, Any]:
    """A JSON description of an operator's architecture (what a checkpoint must match).

    The metadata of :func:`save_operator` (class, decomposition, ranks, coarse
    basis, partition, tying, base term, dtype, initialisation and seed) without
    the format number, plus ``num_params`` (the operator's count of free
    parameters) and a SHA-256 digest ``arrays`` of
    the stored index and matrix arrays (a general decomposition, a user coarse
    basis, a matrix base term; ``None`` when there are none).  Another
    trainable operator is described by its class, dtype and size.
    """
    try:
        meta, arrays = _describe(op)
    except TypeError:
        return {"class": type(op).__name__, "dtype": str(op.dtype),
                "num_dofs": int(op.shape[0]), "num_params": int(op.num_params)}
    meta.pop("format")
    digest = None
    if arrays:
        h = hashlib.sha256()
        for key in sorted(arrays):
            a = np.ascontiguousarray(arrays[key])
            h.update(f"{key}:{a.dtype.str}:{a.shape};".encode())
            h.update(a.tobytes())
        digest = h.hexdigest()
    meta.update(num_params=int(op.num_params), arrays=digest)
    return json.loads(json.dumps(meta, default=_json_default))


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

    Raises
    ------
    TypeError
        For another operator type, or an ``extra`` array of Python objects.
    ValueError
        For an ``extra`` name that the file format uses itself.
    """
    meta, arrays = _describe(op)
    for key in extra:
        if key in arrays or key in ("meta", "theta"):
            raise ValueError(f"extra array name {key!r} is reserved")
    return atomic_savez(path, meta=np.array(json.dumps(meta)), theta=to_numpy(op.theta),
                        **arrays, **{k: np.asarray(v) for k, v in extra.items()})


_NEEDED = {
    "GlobalLowRankOperator": ("num_dofs", "rank", "h"),
    "SchwarzOperator": ("decomposition", "local_rank", "coarse_rank", "coarse_basis",
                        "coarse_size", "partition", "tied", "base"),
    "Decomposition1D": ("n", "subdomains", "overlap", "kind"),
    "Decomposition": ("num_dofs", "h"),
}


def _need(meta: Any, keys: Iterable[str], name: str, where: str = "metadata") -> None:
    if not isinstance(meta, dict):
        raise ValueError(f"{name}: {where} must be a JSON object, got {type(meta).__name__}")
    for key in keys:
        if key not in meta:
            raise ValueError(f"{name}: {where} lacks the key {key!r}")


def _arrays(data: dict[str, np.ndarray], keys: Iterable[str], name: str,
            why: str) -> list[np.ndarray]:
    out = []
    for key in keys:
        if key not in data:
            raise ValueError(f"{name}: array {key!r} is missing ({why})")
        out.append(data[key])
    return out


def _split_subdomains(indices: np.ndarray, offsets: np.ndarray, name: str) -> list[np.ndarray]:
    """The subdomains of a stored general decomposition, after checking the offsets."""
    if (indices.ndim != 1 or offsets.ndim != 1 or offsets.size < 2
            or offsets.dtype.kind not in "iu" or indices.dtype.kind not in "iu"
            or offsets[0] != 0 or offsets[-1] != indices.size or np.any(np.diff(offsets) < 1)):
        raise ValueError(f"{name}: dec_offsets (shape {offsets.shape}) do not split "
                         f"dec_indices (shape {indices.shape}) into subdomains")
    return np.split(indices, offsets[1:-1])


def _csr(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int],
         name: str, what: str) -> sp.csr_matrix:
    """A stored CSR matrix, after checking that its arrays match ``shape``."""
    if (data.ndim != 1 or indices.shape != data.shape or indptr.shape != (shape[0] + 1,)
            or indices.dtype.kind not in "iu" or indptr.dtype.kind not in "iu"
            or not np.issubdtype(data.dtype, np.floating)):
        raise ValueError(f"{name}: the arrays of the {what} do not form a real {shape[0]} x "
                         f"{shape[1]} CSR matrix")
    return sp.csr_matrix((data, indices, indptr), shape=shape)


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
        If the file is missing, damaged or not a ddops operator file, or its
        contents are inconsistent (see :func:`read_npz`; also complex or
        non-finite parameters and arrays that do not match the metadata).  The
        message names the file.
    """
    name = f"operator file {str(path)!r}"
    meta, data = read_npz(path, "operator file", required=("theta",),
                          meta_keys=("format", "class"))
    if meta["format"] != FORMAT_VERSION:
        raise ValueError(f"{name}: unsupported format {meta['format']!r} (this version reads "
                         f"format {FORMAT_VERSION})")
    cls = meta["class"]
    if cls not in ("GlobalLowRankOperator", "SchwarzOperator"):
        raise ValueError(f"{name}: unknown operator class {cls!r}")
    _need(meta, ("dtype", "init", "seed", *_NEEDED[cls]), name)
    try:
        common = dict(init=meta["init"], seed=meta["seed"], dtype=meta["dtype"],
                      backend=backend)
        if cls == "GlobalLowRankOperator":
            op: LowRankOperator = GlobalLowRankOperator(meta["num_dofs"], meta["rank"],
                                                        h=meta["h"], dim=meta.get("dim", 1),
                                                        **common)
        else:
            op = _load_schwarz(meta, data, name, base, common)
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(name):
            raise
        raise ValueError(f"{name}: the metadata does not describe a valid operator "
                         f"({exc})") from exc
    theta = check_parameter_vector(data["theta"], op.theta.shape, name)
    op.theta[...] = op.xp.asarray(theta, dtype=op.dtype)
    return op


def _load_schwarz(meta: dict[str, Any], data: dict[str, np.ndarray], name: str, base: Any,
                  common: dict[str, Any]) -> SchwarzOperator:
    dm = meta["decomposition"]
    _need(dm, ("type",), name, "the decomposition metadata")
    if dm["type"] not in ("Decomposition1D", "Decomposition"):
        raise ValueError(f"{name}: unknown decomposition type {dm['type']!r}")
    _need(dm, _NEEDED[dm["type"]], name, "the decomposition metadata")
    if dm["type"] == "Decomposition1D":
        d: Decomposition = Decomposition1D(dm["n"], dm["subdomains"], dm["overlap"], dm["kind"])
    else:
        indices, offsets, interface, coordinates = _arrays(
            data, ("dec_indices", "dec_offsets", "dec_interface", "dec_coordinates"), name,
            "the metadata describes a general decomposition")
        try:
            d = Decomposition(_split_subdomains(indices, offsets, name), dm["num_dofs"],
                              interface, coordinates, dm["h"], owner=data.get("dec_owner"),
                              shared_nodes=data.get("dec_shared_nodes"),
                              block_size=dm.get("block_size", 1))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name}: the stored decomposition is invalid: {exc}") from exc
    basis = name_of_basis = meta["coarse_basis"]
    # a user basis, or a named one stored as its matrix (built from A or with a null space)
    if basis == "custom" or (basis in MATRIX_COARSE_BASES or "phi_data" in data):
        pdata, pind, pptr, pshape = _arrays(data, ("phi_data", "phi_indices", "phi_indptr",
                                                   "phi_shape"), name,
                                            f"the metadata describes a coarse basis "
                                            f"{basis!r} stored as its matrix")
        if pshape.shape != (2,) or pshape.dtype.kind not in "iu":
            raise ValueError(f"{name}: phi_shape must hold two integers, got {pshape!r}")
        basis = _csr(pdata, pind, pptr, (int(pshape[0]), int(pshape[1])), name,
                     "coarse basis")
    if meta["base"] == "matrix":
        n = d.num_dofs
        bdata, bind, bptr = _arrays(data, ("base_data", "base_indices", "base_indptr"), name,
                                    "the metadata describes a matrix base term")
        base = _csr(bdata, bind, bptr, (n, n), name, "base term")
    elif meta["base"] == "operator" and base is None:
        raise ValueError(f"{name} was saved with a fixed base operator that is not "
                         "a matrix; pass it again as base=")
    elif meta["base"] == "none" and base is not None:
        raise ValueError(f"{name} has no base term; do not pass base=")
    elif meta["base"] not in ("matrix", "operator", "none"):
        raise ValueError(f"{name}: unknown base term kind {meta['base']!r}")
    op = SchwarzOperator(d, meta["local_rank"], meta["coarse_rank"] or None, basis,
                         coarse_size=meta["coarse_size"], partition=meta["partition"],
                         tied=meta["tied"], base=base,
                         padding_groups=meta.get("padding_groups", 1), **common)
    op.coarse_basis_name = name_of_basis
    return op
