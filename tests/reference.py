"""Slow, obviously-correct reference constructions used by the tests.

Everything here is built from first principles with Python loops and dense
matrices, independently of the vectorised code under test.
"""

import numpy as np
import pytest

from ddops.losses import loss_value


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
    return dense_schwarz_partition(params, subdomains, num_dofs, "symmetric", Phi)


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


def dense_schwarz_partition(params, subdomains, num_dofs, partition, Phi=None):
    """Like dense_schwarz with the weight split (input power, output power)."""
    p_in, p_out = {"symmetric": (0.5, 0.5), "left": (0.0, 1.0), "none": (0.0, 0.0)}[partition]
    m = np.zeros(num_dofs)
    for s in subdomains:
        m[s] += 1
    M = np.zeros((num_dofs, num_dofs))
    for s, Q, K in zip(subdomains, params["Q"], params["K"]):
        R = np.zeros((len(s), num_dofs))
        R[np.arange(len(s)), s] = 1.0
        M += R.T @ np.diag(m[s] ** -p_out) @ Q @ K.T @ np.diag(m[s] ** -p_in) @ R
    if Phi is not None and params["Q0"].size:
        M += Phi @ params["Q0"] @ params["K0"].T @ Phi.T
    return M


def batch(op, B, seed=0):
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((op.shape[0], B))
    U = rng.standard_normal((op.shape[0], B))
    return F, U


def fd_check(op, F, U, loss, coords=12, seed=0):
    """Compare the flat gradient with central differences at random coordinates."""
    _, grad = op.value_and_grad_flat(F, U, loss)
    theta0 = op.theta.copy()
    rng = np.random.default_rng(seed)
    # padding rows of the stored factors have no effect: they must get zero gradient
    ones = {k: ([np.ones_like(a) for a in v] if isinstance(v, list) else np.ones_like(v))
            for k, v in op.get_params().items()}
    mask = op.flatten(ones) != 0
    np.testing.assert_array_equal(grad[~mask], 0.0)
    live = np.flatnonzero(mask)
    idx = rng.choice(live, size=min(coords, live.size), replace=False)
    for j in idx:
        step = 1e-6 * max(1.0, abs(theta0[j]))
        op.theta[j] = theta0[j] + step
        fp = float(loss_value(loss, op.matmat(F), U))
        op.theta[j] = theta0[j] - step
        fm = float(loss_value(loss, op.matmat(F), U))
        op.theta[j] = theta0[j]
        fd = (fp - fm) / (2 * step)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-9 * max(1.0, np.abs(grad).max()))
    return grad
