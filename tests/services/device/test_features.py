"""The device's feature checks (services/device/decisions.py ``check_features``) for a
``ddp-linucb`` task in the centered encoding: every context must carry the task's intercept
x[0] = c, which the encoding's sensitivity (and so its noise) assumes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.services.device.decisions import check_features
from privbandit.services.device.errors import FeatureIntercept, FeatureNorm
from privbandit.shared.settings import TaskConfig

C = 1 / math.sqrt(2)


def task(encoding: str) -> TaskConfig:
    return TaskConfig(id="t", threat_model="shuffle", aggregation="secure-sum", K=3,
                      policy={"algo": "ddp-linucb", "d": 3, "encoding": encoding,
                              "intercept": C})


def rows(x0: float) -> list[list[float]]:
    return [[C, 0.5, 0.1], [x0, -0.3, 0.2], [C, 0.0, 0.7]]


def test_contexts_with_the_intercept_are_accepted() -> None:
    """x[0] = c, also computed another way (np.ones/√2 and 1/√2 may differ in the last bit)."""
    X = check_features(task("centered"), rows(float(np.ones(1)[0] / np.sqrt(2))))
    assert X.shape == (3, 3)


@pytest.mark.parametrize("x0", [0.0, 0.70710, C + 1e-6, -C])
def test_a_context_off_the_intercept_is_refused(x0: float) -> None:
    with pytest.raises(FeatureIntercept, match=r"row 1 has x\[0\]"):
        check_features(task("centered"), rows(x0))


def test_other_encodings_do_not_check_the_intercept() -> None:
    """Under frobenius the intercept is unused, so a context without it is fine; the norm bound
    is still checked first everywhere."""
    assert check_features(task("frobenius"), rows(0.0)).shape == (3, 3)
    with pytest.raises(FeatureNorm):
        check_features(task("centered"), [[C, 0.9, 0.9], *rows(C)[1:]])
