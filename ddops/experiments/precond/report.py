"""The outputs of ``ddops precond``: the Markdown tables, the JSON file, the plots.

:func:`write_outputs` writes ``<prefix>_table.md`` and ``<prefix>_results.json``
first, then the residual-history plots (``<prefix>_residuals.png`` and, when some
methods need many more iterations than others, ``<prefix>_residuals_zoom.png``),
and rewrites the JSON file with their names; when a write fails, what was computed
goes to a fresh temporary directory (:func:`ddops.experiments.compare.rescue_outputs`).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...io import atomic_write_json, atomic_write_text

if TYPE_CHECKING:
    from .config import PrecondConfig

__all__ = ["OUTPUT_SUFFIXES", "PLOT_DPI", "ZOOM_ITERATIONS", "format_iterations",
           "markdown_table", "markdown_table_nd", "machine_info", "write_outputs"]

#: The names a run appends to its prefix.
OUTPUT_SUFFIXES = ("_table.md", "_results.json", "_residuals.png", "_residuals_zoom.png")

#: Resolution of the residual plots.
PLOT_DPI = 100

#: The zoomed plot ``<prefix>_residuals_zoom.png`` shows the methods that stop
#: within this many iterations.
ZOOM_ITERATIONS = 100

_SPLIT = ("partition", "overlap", "local_factorisation", "coarse_space", "coarse_factorisation",
          "other")


def format_iterations(r: dict[str, Any]) -> str:
    """A row's iterations as the table shows them.

    Parameters
    ----------
    r : dict
        A row (or its ``second`` solve): ``iterations``, ``converged`` and, for a
        refused or failed row, ``status`` and ``failed``.

    Returns
    -------
    str
        The iteration count, ``"not converged (<count>)"`` or ``"<status>: <reason>"``.
    """
    if r.get("failed"):
        return f"{r.get('status', 'failed')}: " + r["failed"].replace("|", "/")
    if r["converged"]:
        return str(r["iterations"])
    return f"not converged ({r['iterations']})"


def markdown_table(rows: list[dict[str, Any]], title: str) -> str:
    """The Markdown table of the 1D experiment.

    Parameters
    ----------
    rows : list of dict
        The rows of the JSON file, in table order.
    title : str
        The line above the table.

    Returns
    -------
    str
        Title, header and one line per row: iterations (two right-hand sides), set-up,
        training and solve seconds, trained parameters.
    """
    head = ("| method | Krylov | iterations | iterations, 2nd b | set-up [s] | training [s] "
            "| solve [s] | trained params |")
    lines = [title, "", head, "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        params = "-" if r.get("num_params") is None else str(r["num_params"])
        lines.append(
            f"| {r['label']} | {r['krylov'].upper()} | {format_iterations(r)} | "
            f"{format_iterations(r['second'])} | {r['setup_seconds']:.3f} | "
            f"{r['train_seconds']:.1f} | {r['solve_seconds']:.3f} | {params} |")
    return "\n".join(lines) + "\n"


def markdown_table_nd(rows: list[dict[str, Any]], title: str, memory: bool) -> str:
    """The Markdown table of the 2D/3D problems and ``--matrix``.

    Parameters
    ----------
    rows : list of dict
        The rows of the JSON file, in table order.
    title : str
        The line above the table.
    memory : bool
        Whether the peak memory was measured (otherwise ``-`` in its column).

    Returns
    -------
    str
        Title, header, one line per row (iterations, coarse dimension, the set-up
        split, solve seconds, peak memory), the notes on the columns and the rows'
        warnings.
    """
    head = ("| method | iterations | converged | coarse dim | partition [s] | overlap [s] "
            "| local fact. [s] | coarse space [s] | eigenproblems [s] | coarse fact. [s] "
            "| set-up [s] | solve [s] | peak memory [MiB] |")
    lines = [title, "", head, "|---|---:|---|---:|" + "---:|" * 9]
    for r in rows:
        dim = "-" if r["coarse_dim"] is None else str(r["coarse_dim"])
        eigen = "-" if r.get("eigen_seconds") is None else f"{r['eigen_seconds']:.3f}"
        mem = "-" if not memory else f"{r['peak_memory_bytes'] / 2**20:.1f}"
        split = r["setup"]
        parts = [_seconds(split, k) for k in _SPLIT[:-1]]
        parts.insert(4, eigen)  # after the coarse space, of which it is a part
        lines.append(
            f"| {r['label']} | {format_iterations(r)} | {'yes' if r['converged'] else 'no'} "
            f"| {dim} | " + " | ".join(parts)
            + f" | {r['setup_seconds']:.3f} | {r['solve_seconds']:.3f} | {mem} |")
    # the finite-element Neumann matrices exist only where the experiment assembled A
    assembled = any(r.get("neumann") == "finite element" for r in rows)
    notes = ("set-up = partition + overlap + local and coarse factorisation + coarse space + "
             "checks and restrictions; eigenproblems: the part of the coarse space spent on "
             "the local eigenproblems of the adaptive spaces (AGDSW: with the Schur "
             "complements); "
             + ("the adaptive coarse spaces on elasticity include assembling the "
                "finite-element Neumann matrices of the subdomains; " if assembled else "")
             + "peak memory: tracemalloc peak of set-up and solve plus the SuperLU factors "
             "(12 bytes per nonzero)")
    warned = [f"- {r['label']}: {w}" for r in rows for w in r.get("warnings", ())]
    extra = ("\n\nwarnings:\n" + "\n".join(warned)) if warned else ""
    return "\n".join(lines) + "\n\n" + notes + extra + "\n"


def _seconds(split: dict[str, float] | None, key: str) -> str:
    return "-" if not split else f"{split[key]:.3f}"


def machine_info() -> dict[str, Any]:
    """The ``machine`` entry of the JSON file: Python's version, the processor, numpy's
    version."""
    return {"python": platform.python_version(), "processor": platform.machine(),
            "numpy": np.__version__}


def write_outputs(c: PrecondConfig, payload: dict[str, Any], table: str, short: str,
                  t_start: float, log: Callable[[str], Any]) -> dict[str, Any]:
    """Write the table, the JSON file and the residual plots; log the table.

    Parameters
    ----------
    c : PrecondConfig
        Validated settings: ``save_prefix`` and ``plots``.
    payload : dict
        The JSON file's content, with ``rows`` and ``residual_histories``;
        ``files`` and ``total_seconds`` are added here.
    table : str
        The Markdown table.
    short : str
        The plots' title.
    t_start : float
        :func:`time.perf_counter` at the start of the run.
    log : callable
        Receives the table and one line per file written.

    Returns
    -------
    dict
        ``payload``.

    Raises
    ------
    OutputError
        When a write fails: what was computed is saved in a fresh temporary
        directory, which the error names (:func:`~ddops.experiments.compare.rescue_outputs`).
    """
    prefix = c.save_prefix
    rows, histories = payload["rows"], payload["residual_histories"]
    files = {"table": prefix + "_table.md", "results": prefix + "_results.json"}
    payload["files"] = files

    def write(prefix: str) -> None:
        payload["total_seconds"] = time.perf_counter() - t_start
        atomic_write_text(prefix + "_table.md", table)
        atomic_write_json(prefix + "_results.json", payload, indent=1)

    try:  # the results first: a failing plot must not cost them
        write(prefix)
        if c.plots:
            from ..plotting import plot_residual_histories

            converged = {r["label"]: r["converged"] for r in rows  # others are marked
                         if r["label"] in histories}  # a failed row has none
            files["plot"] = str(plot_residual_histories(histories, prefix + "_residuals.png",
                                                        title=short, dpi=PLOT_DPI,
                                                        converged=converged))
            fast = {k: h for k, h in histories.items() if len(h) - 1 <= ZOOM_ITERATIONS}
            if fast and len(fast) < len(histories):
                files["plot_zoom"] = str(plot_residual_histories(
                    fast, prefix + "_residuals_zoom.png", dpi=PLOT_DPI,
                    title=f"{short}: within {ZOOM_ITERATIONS} iterations",
                    converged={k: converged[k] for k in fast}))
            write(prefix)  # again, with the figures' names
    except OSError as exc:
        from ..compare import rescue_outputs

        raise rescue_outputs(prefix, exc, write) from exc
    log("")
    log(table)
    for path in files.values():
        log(f"wrote {path}")
    return payload
