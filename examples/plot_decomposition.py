"""Plot the overlapping decompositions of both paper conventions side by side.

For each convention (element-based, newer paper version; DOF-based, first
version) the figure shows, column by column,

1. the overlapping subdomains as bars over the unknowns, with the overlaps
   (multiplicity 2) shaded and the interface nodes marked,
2. a zoom on the first interface: every unknown of the two neighbouring
   subdomains, its multiplicity ``m_j`` and the interface node,
3. the partition-of-unity weights ``D_i = diag(1 / m_j)`` of every subdomain
   (these are also the columns of the ``"pou"`` coarse basis) and their sum,
4. the interface-hat coarse basis functions (the columns of ``Phi``).

Run with::

    python examples/plot_decomposition.py --output decomposition.png

The copy in the documentation was made with ``--output
docs/_static/decomposition.png --palette``.

No display is needed: the figure is drawn with matplotlib's Agg canvas.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import ddops

CONVENTIONS = (
    ("element", "element-based (paper v2)"),
    ("dof", "DOF-based (paper v1)"),
)


def _colours(num: int) -> list:
    """One distinguishable colour per subdomain (tab10 without its grey, cycled)."""
    from matplotlib import colormaps

    palette = [colormaps["tab10"](i) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)]
    return [palette[i % len(palette)] for i in range(num)]


def _shade_overlaps(ax, d: ddops.Decomposition1D) -> None:
    """Grey background over the unknowns that lie in two or more subdomains."""
    shared = d.multiplicity > 1
    edges = np.flatnonzero(np.diff(np.concatenate([[0], shared.astype(int), [0]])))
    for start, stop in zip(edges[::2], edges[1::2], strict=True):
        ax.axvspan(start - 0.5, stop - 0.5, color="0.85", zorder=0, lw=0)


def _mark_interfaces(ax, d: ddops.Decomposition1D, **kwargs) -> None:
    style = {"color": "k", "ls": ":", "lw": 0.8, "zorder": 1} | kwargs
    for j in d.interface_nodes:
        ax.axvline(j, **style)


def plot_subdomains(ax, d: ddops.Decomposition1D, colours: list) -> None:
    """Bars over the unknowns of every subdomain, with sizes and overlaps."""
    _shade_overlaps(ax, d)
    _mark_interfaces(ax, d)
    for i, idx in enumerate(d.subdomains):
        ax.broken_barh([(idx[0] - 0.5, idx.size)], (i - 0.35, 0.7), color=colours[i])
        ax.text(idx[0] + idx.size / 2, i, f"$n_{{{i + 1}}}={idx.size}$", ha="center",
                va="center", fontsize=8, color="white", fontweight="bold")
    ax.set_yticks(range(d.num_subdomains))
    ax.set_yticklabels([f"$\\Omega_{{{i + 1}}}$" for i in range(d.num_subdomains)])
    ax.set_ylim(d.num_subdomains - 0.5, -0.5)
    ax.set_xlim(-0.5, d.num_dofs - 0.5)
    ax.set_xlabel("unknown index $j$")


def plot_zoom(ax, d: ddops.Decomposition1D, colours: list, interface: int = 0,
              halfwidth: int = 7) -> None:
    """Every unknown around one interface: membership, multiplicity, interface node."""
    centre = int(d.interface_nodes[interface])
    lo, hi = centre - halfwidth, centre + halfwidth
    _shade_overlaps(ax, d)
    ax.axvline(centre, color="k", ls=":", lw=1.0, zorder=1)
    for i in (interface, interface + 1):
        idx = d.subdomains[i]
        idx = idx[(idx >= lo) & (idx <= hi)]
        ax.plot(idx, np.full(idx.size, i - interface), "o", color=colours[i], ms=7,
                label=f"$\\Omega_{{{i + 1}}}$")
        ax.hlines(i - interface, idx[0], idx[-1], color=colours[i], lw=2)
    for j in range(lo, hi + 1):
        ax.text(j, -0.75, str(d.multiplicity[j]), ha="center", va="center", fontsize=8,
                bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
    ax.text(lo - 0.9, -0.75, "$m_j$", ha="right", va="center", fontsize=9)
    ax.annotate("interface node", xy=(centre, 1.35), xytext=(centre + 1.5, 1.75), fontsize=8,
                arrowprops={"arrowstyle": "->", "lw": 0.8})
    ax.set_xlim(lo - 1.5, hi + 0.5)
    ax.set_ylim(2.1, -1.1)
    ax.set_yticks([0, 1])
    ax.set_yticklabels([f"$\\Omega_{{{interface + 1}}}$", f"$\\Omega_{{{interface + 2}}}$"])
    ax.set_xticks(range(lo, hi + 1, 2))
    ax.set_xlabel("unknown index $j$ (zoom on the first interface)")


def plot_weights(ax, d: ddops.Decomposition1D, colours: list) -> None:
    """Partition-of-unity weights ``1 / m_j`` per subdomain and their sum."""
    _shade_overlaps(ax, d)
    total = np.zeros(d.num_dofs)
    for i, idx in enumerate(d.subdomains):
        w = d.weights(i)
        total[idx] += w
        ax.plot(idx, w, color=colours[i], lw=1.5, drawstyle="steps-mid")
    ax.plot(np.arange(d.num_dofs), total, "k--", lw=1.0,
            label="$\\sum_i R_i^T D_i R_i \\mathbf{1} = \\mathbf{1}$")
    ax.set_ylim(0, 1.25)
    ax.set_xlim(-0.5, d.num_dofs - 0.5)
    ax.set_ylabel("weight $1/m_j$")
    ax.set_xlabel("unknown index $j$")
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)


def plot_hats(ax, d: ddops.Decomposition1D, colours: list) -> None:
    """Interface-hat coarse basis functions, one per interface."""
    Phi = ddops.coarse_basis(d, "interface_hats").toarray()
    j = np.arange(d.num_dofs)
    _mark_interfaces(ax, d)
    for k in range(Phi.shape[1]):
        ax.plot(j, Phi[:, k], color=colours[k], lw=1.5)
        ax.plot(d.interface_nodes[k], 1.0, "o", color=colours[k], ms=4)
    ax.set_ylim(0, 1.15)
    ax.set_xlim(-0.5, d.num_dofs - 0.5)
    ax.set_ylabel(r"$\phi_k$")
    ax.set_xlabel(f"unknown index $j$   ($n_0 = {Phi.shape[1]}$ columns of $\\Phi$)")


def make_figure(n: int = 256, subdomains: int = 8, overlap: int = 2) -> Figure:
    """Build the comparison figure for one problem size."""
    fig = Figure(figsize=(13, 12.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(4, 2, height_ratios=[1.3, 0.8, 1.0, 1.0])
    colours = _colours(subdomains)
    for col, (kind, title) in enumerate(CONVENTIONS):
        d = ddops.Decomposition1D(n, subdomains, overlap=overlap, kind=kind)
        sizes = d.sizes.tolist()
        axes[0, col].set_title(
            f"{title}: {d.num_dofs} unknowns, h = 1/{round(1 / d.h)}\n"
            f"subdomain sizes {sizes}, sum {sum(sizes)}", fontsize=10)
        plot_subdomains(axes[0, col], d, colours)
        plot_zoom(axes[1, col], d, colours)
        plot_weights(axes[2, col], d, colours)
        plot_hats(axes[3, col], d, colours)
    axes[1, 0].legend(loc="lower left", fontsize=8, ncol=2)
    axes[1, 1].legend(loc="lower left", fontsize=8, ncol=2)
    axes[2, 0].set_title("partition-of-unity weights $D_i$ (the 'pou' coarse basis)",
                         fontsize=10)
    axes[2, 1].set_title("partition-of-unity weights $D_i$ (the 'pou' coarse basis)",
                         fontsize=10)
    axes[3, 0].set_title("interface-hat coarse basis", fontsize=10)
    axes[3, 1].set_title("interface-hat coarse basis", fontsize=10)
    fig.suptitle(f"Overlapping decompositions: n = {n}, N = {subdomains}, overlap {overlap} "
                 "(grey: unknowns in two subdomains, dotted: interface nodes)", fontsize=12)
    return fig


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="problem size n (default 256)")
    parser.add_argument("--subdomains", type=int, default=8, help="number of subdomains N")
    parser.add_argument("--overlap", type=int, default=2, help="overlap (default 2)")
    parser.add_argument("--output", type=Path, default=Path("decomposition.png"),
                        help="image file to write (default: decomposition.png)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution (default 100)")
    parser.add_argument("--palette", action="store_true",
                        help="store a PNG as a 256-colour palette image (about 3x smaller)")
    args = parser.parse_args(argv)
    fig = make_figure(args.n, args.subdomains, args.overlap)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=args.dpi)
    if args.palette and args.output.suffix.lower() == ".png":
        from PIL import Image  # Pillow is a dependency of matplotlib

        with Image.open(args.output) as image:
            small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        small.save(args.output, optimize=True)
    print(f"wrote {args.output}")
    return args.output


if __name__ == "__main__":
    main()
