"""Solvers for block-diagonal SPD matrices: the local solves of the Schwarz preconditioners
and the interior solves of the harmonic extension.

:mod:`ddops.linalg.local_solvers`: exact sparse factorisations (SuperLU, MKL PARDISO)
and an inexact one (an aggregation-AMG V-cycle), all behind one ``solve`` interface.
:mod:`ddops.linalg.spd`: the one test, on a sparse (SuperLU) or dense (Cholesky)
factorisation, of whether a matrix is numerically symmetric positive definite.
:mod:`ddops.linalg.parallel`: independent chunks of a set-up on threads, one BLAS thread
each.
"""
