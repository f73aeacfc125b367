"""``digits``: scikit-learn's handwritten digits (1,797 images, 10 classes) as a contextual bandit,
by the conversion of ``multiclass`` (arm = class, reward 1 for the right class, features e_a ⊗ c
with c the first p = d // 10 principal components)."""

from __future__ import annotations

import numpy as np

from privbandit.shared.core.environments.multiclass import MulticlassEnvironment, components_for

N_CLASSES = 10


def digits_dimension(d: int) -> int:
    """The dimension actually used for a requested d: 10·p with p = max(1, d // 10)."""
    return N_CLASSES * components_for(d, N_CLASSES)


class DigitsEnvironment(MulticlassEnvironment):
    name = "digits"
    K = N_CLASSES

    def __init__(self, d: int, rng: np.random.Generator) -> None:
        from sklearn.datasets import load_digits

        data = load_digits()
        super().__init__(data.data, data.target, N_CLASSES, d, rng)
