"""Slow, obviously-correct reference constructions used by the tests.

Everything here is built from first principles with Python loops and dense
matrices, independently of the vectorised code under test.
"""

import numpy as np
import pytest
import scipy.sparse as sp

from ddops.operators.losses import loss_value


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


def reference_subdomains(d):
    """Index sets of a decomposition from its definition.

    1D decompositions by the textual conventions; a general decomposition is
    defined by the sets it was given, which ``d.subdomains`` holds sorted (the
    decomposition tests check that against the input).
    """
    from ddops import Decomposition1D

    if isinstance(d, Decomposition1D):
        return subdomains_1d(d.n, d.num_subdomains, d.overlap, d.kind)
    return [np.asarray(s) for s in d.subdomains]


def dense_base(op):
    """The fixed term of a Schwarz operator as a dense array (zero without one)."""
    n = op.shape[0]
    if op.base is None:
        return np.zeros((n, n))
    matrix = getattr(op.base, "matrix", None)  # a matrix the user passed, kept as given
    if matrix is not None:
        return matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix)
    return np.asarray(op.base.matmat(np.eye(n)))  # the user's own LinearOperator


def dense_operator(op, part="full"):
    """Any SchwarzOperator (partition, tied, user Phi, base) assembled densely by definition."""
    p = op.get_params()
    if op.tied:
        p = {"Q": p["Q"], "K": p["Q"], "Q0": p["Q0"], "K0": p["Q0"]}
    d = op.decomposition
    subs = reference_subdomains(d)
    Phi = None if op.coarse_matrix is None else op.coarse_matrix.toarray()
    if part == "local":
        Phi = None
    if part == "coarse":
        p = dict(p, Q=[np.zeros_like(q) for q in p["Q"]], K=[np.zeros_like(k) for k in p["K"]])
    M = dense_schwarz_partition(p, subs, d.num_dofs, op.partition, Phi)
    return M + dense_base(op) if part == "full" else M


def batch(op, B, seed=0):
    rng = np.random.default_rng(seed)
    F = rng.standard_normal((op.shape[0], B))
    U = rng.standard_normal((op.shape[0], B))
    return F, U


def fd_check(op, F, U, loss, coords=12, seed=0):
    """Compare the flat gradient with central differences at random coordinates."""
    value, grad = op.value_and_grad_flat(F, U, loss)
    theta0 = op.theta.copy()
    # rounding in the two loss values limits what a difference quotient can resolve:
    # about eps |L| / step (a large fixed term makes |L| large, not the gradient)
    noise = 100 * np.finfo(np.float64).eps * abs(float(value))
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
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=max(
            1e-9 * max(1.0, np.abs(grad).max()), noise / step))
    return grad


def dense_two_level(A, subdomains, num_dofs, variant, Phi=None):
    """The classical Schwarz preconditioner by definition: loops, dense R_i, explicit inverses."""
    A = A.toarray() if sp.issparse(A) else np.asarray(A, dtype=float)
    m = np.zeros(num_dofs)
    for s in subdomains:
        m[s] += 1
    M = np.zeros((num_dofs, num_dofs))
    for s in subdomains:
        R = np.zeros((len(s), num_dofs))
        R[np.arange(len(s)), s] = 1.0
        Ai_inv = np.linalg.inv(R @ A @ R.T)
        D = np.diag(1.0 / m[s])
        if variant in ("additive", "hybrid"):
            M += R.T @ Ai_inv @ R
        elif variant == "restricted":
            M += R.T @ D @ Ai_inv @ R
        else:
            M += R.T @ np.sqrt(D) @ Ai_inv @ np.sqrt(D) @ R
    if Phi is not None:
        P0 = Phi @ np.linalg.inv(Phi.T @ A @ Phi) @ Phi.T
        if variant == "hybrid":  # multiplicative coarse correction around the local sum
            eye = np.eye(num_dofs)
            return P0 + (eye - P0 @ A) @ M @ (eye - A @ P0)
        M += P0
    return M


def scrambled_csr(A):
    """``A`` (CSR) with the same stored pattern in a non-canonical form: the entries of
    every row in reverse order and the first entry stored twice (flags cleared), as a
    caller's matrix may come.  The values are ``A``'s but for that entry, which sums to
    twice its own: for tests of patterns."""
    coo = sp.coo_matrix(A)
    order = np.lexsort((-coo.col, coo.row))
    row, col, val = coo.row[order], coo.col[order], coo.data[order]
    row, col, val = np.r_[row[:1], row], np.r_[col[:1], col], np.r_[val[:1], val]
    n = A.shape[0]
    indptr = np.r_[0, np.cumsum(np.bincount(row, minlength=n))]
    out = sp.csr_matrix((val, col, indptr), shape=A.shape)
    out.has_canonical_format = out.has_sorted_indices = False
    return out
