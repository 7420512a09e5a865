"""Domain decomposition from an assembled sparse matrix.

:mod:`ddops.dd.partition`: non-overlapping partitions of the unknowns (METIS,
recursive coordinate bisection, user labels, boxes of structured grids) and
overlap growth through the graph of the matrix.
"""
