"""Pure tensor math of the server rules (no algorithm state, no config).

- :mod:`fedmoo.moo.gram`: Gram matrix of the ``[K, d]`` updates and the one weighted sum.
- :mod:`fedmoo.moo.simplex`: Euclidean projection onto the probability simplex.
- :mod:`fedmoo.moo.minnorm`: min-norm point of a convex hull (box-constrained simplex QP via
  qpsolvers, with a bounded Frank-Wolfe fallback).
- :mod:`fedmoo.moo.gram_schmidt`: AdaFed's loss-scaled Gram-Schmidt in coefficient space.
- :mod:`fedmoo.moo.conflict`: FedFV's projections of conflicting updates.
- :mod:`fedmoo.moo.tasks`: FMGDA's per-task averaging and S-task min-norm direction.
- :mod:`fedmoo.moo.descent`: cosines between the updates and the server direction (every
  rule's ``server/min_cos`` and ``server/harmed``).
"""
