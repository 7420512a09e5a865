"""What the benchmark scripts share: the description of the machine and the common flags.

Every script records the machine it ran on and most take ``--quick`` (a smoke run at small
sizes), ``--json PATH`` (where to write what was measured) and ``--threads`` (BLAS threads);
they are defined once here so that the scripts describe the machine and spell the flags the
same way.  Each script keeps its own help texts and defaults.

The scripts import this module as ``benchmarks.common`` (with the repository root on
``sys.path``, as they set it up) or, when run from this folder, as ``common``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import scipy

__all__ = [
    "add_json_flag",
    "add_quick_flag",
    "add_threads_flag",
    "check_petsc_python",
    "cpu_name",
    "library_versions",
    "load_average",
    "machine_info",
    "machine_summary",
    "memory_gib",
    "reset_peak",
    "run_petsc_peers",
]


# -- the machine -------------------------------------------------------------------------------
def cpu_name() -> str:
    """The processor as :mod:`platform` names it (the architecture where it names none)."""
    return platform.processor() or platform.machine()


def memory_gib() -> float:
    """Physical memory in GiB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def load_average() -> tuple[float, ...]:
    """The 1, 5 and 15 minute load averages (empty where the system has none)."""
    return os.getloadavg() if hasattr(os, "getloadavg") else ()


def _pyamg_version() -> str:
    try:
        import pyamg
    except ImportError:
        return "not installed"
    return pyamg.__version__


def library_versions(*, pyamg: bool = False, ddops: bool = False) -> dict[str, str]:
    """Versions of python, numpy and scipy (and pyamg, ddops when asked), in that order."""
    out = {"python": platform.python_version(), "numpy": np.__version__,
           "scipy": scipy.__version__}
    if pyamg:
        out["pyamg"] = _pyamg_version()
    if ddops:
        import ddops as package

        out["ddops"] = getattr(package, "__version__", "?")
    return out


def huge_pages() -> str:
    """How fresh memory is backed: the kernel's transparent-huge-page mode and defrag
    setting, and whether numpy asks for huge pages (``NUMPY_MADVISE_HUGEPAGE``).

    Where the kernel compacts memory on every such request and fails (a fragmented or
    virtual machine), numpy's request makes each fresh large array slow: on the machine of
    ``docs/preconditioning.md`` GenEO's set-up on 2D elasticity took 3.2 s with it and 2.3 s
    with ``NUMPY_MADVISE_HUGEPAGE=0``.  Empty where the kernel does not say.
    """
    def mode(name: str) -> str | None:
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{name}") as fh:
                text = fh.read()
        except OSError:
            return None
        return text[text.find("[") + 1:text.find("]")] if "[" in text else text.strip()

    enabled, defrag = mode("enabled"), mode("defrag")
    if enabled is None:
        return ""
    numpy_madvise = "off" if os.environ.get("NUMPY_MADVISE_HUGEPAGE") == "0" else "on"
    return (f"transparent huge pages {enabled} (defrag {defrag}), numpy huge-page madvise "
            f"{numpy_madvise}")


def machine_summary(*, memory: bool = False, pyamg: bool = False, ddops: bool = False,
                    load: bool = False) -> str:
    """One line: ``CPU, cores[, memory]; python X, numpy Y, scipy Z[, ...][; huge pages]
    [; load average]``.

    For example ``x86_64, 16 CPUs, 125 GiB; python 3.11.9, numpy 2.1.0, scipy 1.14.1,
    pyamg 5.2.1, ddops 0.1.0; transparent huge pages madvise (defrag madvise), numpy
    huge-page madvise on; load average 0.52 0.40 0.33`` (:func:`huge_pages`).
    """
    line = f"{cpu_name()}, {os.cpu_count()} CPUs"
    if memory:
        line += f", {memory_gib():.0f} GiB"
    line += "; " + ", ".join(f"{k} {v}" for k, v in library_versions(pyamg=pyamg,
                                                                      ddops=ddops).items())
    line += "; BLAS " + blas_summary()
    if huge_pages():
        line += "; " + huge_pages()
    if load:
        line += "; load average " + " ".join(f"{x:.2f}" for x in load_average())
    return line


def blas_summary(maps: str = "/proc/self/maps") -> str:
    """The BLAS libraries loaded in this process: those :mod:`threadpoolctl` knows (e.g.
    ``openblas 0.3.21 (pthreads)``), and on Linux any other BLAS file mapped (read from
    ``maps``), by its path, such as the reference (netlib) ``libblas.so.3`` that a
    distribution's numpy may call, about ten times slower on dense products
    (``docs/petsc.md``)."""
    from threadpoolctl import threadpool_info

    known = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    seen = [f"{p.get('internal_api')} {p.get('version')} ({p.get('threading_layer')})"
            for p in known]
    paths = {os.path.realpath(p.get("filepath") or "") for p in known}
    try:
        with open(maps) as fh:
            mapped = {line.split()[-1] for line in fh if "/" in line}
    except OSError:
        mapped = set()
    seen += sorted(f"{path} (unknown to threadpoolctl)" for path in mapped
                   if os.path.basename(path).startswith("libblas.")
                   and os.path.realpath(path) not in paths)
    return ", ".join(seen) or "none found"


def machine_info() -> dict[str, Any]:
    """CPU model, cores, memory, library versions and BLAS of this machine."""
    info: dict[str, Any] = {"python": platform.python_version(), "numpy": np.__version__,
                            "scipy": scipy.__version__, "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        info["cpu"] = platform.processor()
    try:
        with open("/proc/meminfo") as fh:
            kb = int(fh.readline().split()[1])
        info["memory_gib"] = round(kb / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["numpy_blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # noqa: BLE001 - older numpy: no dict mode
        info["numpy_blas"] = "unknown"
    try:
        blas = scipy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["scipy_blas"] = f"{blas.get('name')} {blas.get('version')}"
    except Exception:  # noqa: BLE001
        info["scipy_blas"] = "unknown"
    info["load_average"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    return info


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark to the current RSS; False where that is impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# -- the common flags --------------------------------------------------------------------------
def timed_setup(prob, d, options) -> tuple[Any, float, float]:
    """``ddops.TwoLevelSchwarz`` of ``prob.A`` on ``d`` with ``options``, its RuntimeWarnings
    (elasticity: a matrix that is not diagonally dominant) silenced: the preconditioner and
    its set-up wall and process CPU seconds."""
    import time
    import warnings

    import ddops

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        wall, cpu = time.perf_counter(), time.process_time()
        M = ddops.TwoLevelSchwarz(prob.A.tocsr(), d, options=options)
        return M, time.perf_counter() - wall, time.process_time() - cpu


def timed_sa_setup(prob) -> tuple[Any, float, float]:
    """pyamg's smoothed aggregation of ``prob.A`` (rigid body modes ``prob.null_space`` on
    elasticity), the peer: the multilevel solver and its set-up wall and process CPU
    seconds."""
    import time

    import pyamg

    A = prob.A.tocsr()
    wall, cpu = time.perf_counter(), time.process_time()
    ml = pyamg.smoothed_aggregation_solver(A, B=prob.null_space)
    return ml, time.perf_counter() - wall, time.process_time() - cpu


def space_options(prob, coarse: str, neumann=None, threads: int | None = None):
    """``ddops.SchwarzOptions`` of ``coarse`` (gdsw, agdsw or geneo; the adaptive spaces with
    the finite-element Neumann matrices ``neumann`` where given) with ``prob``'s null space,
    on ``threads`` threads (None: the library's default)."""
    import ddops

    space = {}
    if coarse == "geneo":
        space = {"geneo": ddops.GenEOOptions(neumann=neumann)}
    elif coarse == "agdsw":
        space = {"agdsw": ddops.AGDSWOptions(neumann=neumann)}
    return ddops.SchwarzOptions(coarse=coarse, null_space=prob.null_space, threads=threads,
                                **space)


def add_quick_flag(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--quick``: a smoke run at small sizes (what exactly, the script's ``help`` says)."""
    parser.add_argument("--quick", action="store_true", help=help)


def add_json_flag(parser: argparse.ArgumentParser, help: str | None = None,
                  default: str | None = None, metavar: str | None = "PATH") -> None:
    """``--json PATH``: where to write what was measured (``default`` None: the script's
    own choice, or nothing)."""
    parser.add_argument("--json", metavar=metavar, default=default, help=help)


def add_threads_flag(parser: argparse.ArgumentParser, help: str | None = "BLAS threads "
                     "(default 1)", default: int | None = 1) -> None:
    """``--threads N``: the BLAS threads the measurements run with (threadpoolctl)."""
    parser.add_argument("--threads", type=int, default=default, help=help)


# -- the PETSc peers ---------------------------------------------------------------------------
#: what ``benchmarks/petsc_setup_peers.py`` imports, checked by :func:`check_petsc_python`
PETSC_PEER_IMPORTS = ("petsc4py.PETSc", "numpy", "threadpoolctl", "ddops.experiments.precond")


def check_petsc_python(python: str, timeout: float = 120.0) -> None:
    """Stop with one line unless ``python`` runs and imports what the PETSc peers need
    (:data:`PETSC_PEER_IMPORTS`): checked before the first measurement, so that a wrong
    ``--petsc-python`` does not end a long run after the ddops rows were measured."""
    code = "; ".join(f"import {module}" for module in PETSC_PEER_IMPORTS)
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                              timeout=timeout)
    except OSError as exc:
        raise SystemExit(f"--petsc-python {python}: cannot run it ({exc.strerror})") from None
    except subprocess.TimeoutExpired:
        raise SystemExit(f"--petsc-python {python}: its imports took more than {timeout:g} "
                         "s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"--petsc-python {python}: cannot import what the PETSc peers need "
                         f"({last}); see docs/petsc.md")


def run_petsc_peers(python: str, args: list[str], threads: int = 1) -> dict:
    """PETSc GAMG's and hypre BoomerAMG's rows: ``benchmarks/petsc_setup_peers.py`` under
    ``python`` (the PETSc environment of ``docs/petsc.md``) with the ``ddops precond``
    flags ``args``, on ``threads`` BLAS threads; its JSON."""
    command = [python, str(Path(__file__).resolve().parent / "petsc_setup_peers.py"), *args,
               "--blas-threads", str(threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"petsc_setup_peers.py failed ({done.returncode}): "
                         f"{done.stderr[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
