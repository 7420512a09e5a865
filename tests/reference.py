"""Slow, obviously-correct reference constructions used by the tests.

Everything here is built from first principles with Python loops and dense
matrices, independently of the vectorised code under test.
"""

import numpy as np


def split(total, parts):
    base, rem = divmod(total, parts)
    return [base + (1 if i < rem else 0) for i in range(parts)]


def subdomains_1d(n, N, overlap, kind):
    """Index sets by the textual definition of the two conventions."""
    sizes = split(n, N)
    starts = [sum(sizes[:i]) for i in range(N)]
    out = []
    for i in range(N):
        lo = max(starts[i] - overlap, 0)
        hi = min(starts[i] + sizes[i] + overlap, n)
        if kind == "element":
            nodes = [v for v in range(lo, hi + 1) if 0 < v < n]  # closure minus Dirichlet
            out.append(np.array([v - 1 for v in nodes]))
        else:
            out.append(np.arange(lo, hi))
    return out


def dense_schwarz(params, subdomains, num_dofs, Phi=None):
    """M = Phi Q0 K0^T Phi^T + sum_i R_i^T D_i^{1/2} Q_i K_i^T D_i^{1/2} R_i, densely."""
    m = np.zeros(num_dofs)
    for s in subdomains:
        m[s] += 1
    M = np.zeros((num_dofs, num_dofs))
    for s, Q, K in zip(subdomains, params["Q"], params["K"]):
        R = np.zeros((len(s), num_dofs))
        R[np.arange(len(s)), s] = 1.0
        Dh = np.diag(1.0 / np.sqrt(m[s]))
        M += R.T @ Dh @ Q @ K.T @ Dh @ R
    if Phi is not None and params["Q0"].size:
        M += Phi @ params["Q0"] @ params["K0"].T @ Phi.T
    return M


def hat(x, left, peak, right):
    """A single hat function evaluated pointwise."""
    if left < x <= peak:
        return (x - left) / (peak - left)
    if peak < x < right:
        return (right - x) / (right - peak)
    return 0.0


def poisson_dense(n, kind):
    m = n - 1 if kind == "element" else n
    h = 1.0 / n if kind == "element" else 1.0 / (n + 1)
    return (2 * np.eye(m) - np.eye(m, k=1) - np.eye(m, k=-1)) / h**2
