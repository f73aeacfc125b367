"""Seeded randomness: every stochastic component receives its own ``numpy.random.Generator``.

Streams are spawned from one ``SeedSequence`` so runs are reproducible and independent without any
global state. Cryptographic choices (permutations in the shuffler, report ids, keys) never use these
generators: they use the OS CSPRNG (``secrets``).
"""

from __future__ import annotations

import numpy as np


def spawn_generators(seed: int | np.random.SeedSequence, n: int) -> list[np.random.Generator]:
    """``n`` independent generators derived from ``seed`` (SeedSequence spawning)."""
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return [np.random.default_rng(child) for child in ss.spawn(n)]
