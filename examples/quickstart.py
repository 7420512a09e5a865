"""Build the paper's default Schwarz attention operator, apply it and inspect it.

Run with ``python examples/quickstart.py``.
"""

import numpy as np
import scipy.sparse.linalg as spla

import ddops

# The newer paper version's setting: 256 line elements (255 unknowns), 8 subdomains,
# overlap of 2 elements, local rank 4 and the interface-hat coarse space (n0 = 7).
decomposition = ddops.Decomposition1D(n=256, subdomains=8, overlap=2, kind="element")
op = ddops.SchwarzOperator(decomposition, local_rank=4, coarse_rank=None, init="scaled", seed=0)
baseline = ddops.GlobalLowRankOperator(decomposition.num_dofs, rank=39)

print(op)
print("subdomain sizes      :", decomposition.sizes.tolist())
print("interface nodes      :", decomposition.interface_nodes.tolist())
print("parameters (Schwarz) :", op.num_params)
print("parameters (global)  :", baseline.num_params)
print("rank bound (Thm. 2)  :", op.rank_bound)

A = ddops.poisson_1d(256)
print("best rank-39 error of A^-1 (Thm. 1):", f"{ddops.best_rank_error(A, op.rank_bound):.4e}")

# Apply to a block of right-hand sides and check the adjoint.
F = np.random.default_rng(0).standard_normal((op.shape[0], 16))
Y = op.matmat(F)
print("M F shape            :", Y.shape)
print("dot test passed      :", ddops.testing.dottest(op, nblock=4))

# It is a scipy LinearOperator: aslinearoperator, products and adjoints all work.
L = spla.aslinearoperator(op)
print("||M^T F - (M^T) F||  :", np.linalg.norm(L.H @ F - op.rmatmat(F)))
