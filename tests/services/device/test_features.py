"""The device's feature checks (services/device/decisions.py ``check_features``) for a
``ddp-linucb`` or ``ldp-linucb`` task in a centered encoding: every context must carry the task's
intercept x[0] = c, which the encoding's sensitivity (and so its noise) assumes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.services.device.decisions import check_features
from privbandit.services.device.errors import FeatureIntercept, FeatureNorm
from privbandit.shared.settings import TaskConfig

C = 1 / math.sqrt(2)


def task(encoding: str, algo: str = "ddp-linucb") -> TaskConfig:
    policy = {"algo": algo, "d": 3, "encoding": encoding, "intercept": C}
    if algo == "ldp-linucb":
        return TaskConfig(id="t", threat_model="ldp", K=3, policy=policy)
    return TaskConfig(id="t", threat_model="shuffle", aggregation="secure-sum", K=3,
                      policy=policy)


CENTERED = [("centered", "ddp-linucb"), ("centered", "ldp-linucb"),
            ("centered-upper", "ldp-linucb"), ("auto", "ldp-linucb")]


def rows(x0: float) -> list[list[float]]:
    return [[C, 0.5, 0.1], [x0, -0.3, 0.2], [C, 0.0, 0.7]]


@pytest.mark.parametrize(("encoding", "algo"), CENTERED)
def test_contexts_with_the_intercept_are_accepted(encoding: str, algo: str) -> None:
    """x[0] = c, also computed another way (np.ones/√2 and 1/√2 may differ in the last bit)."""
    X = check_features(task(encoding, algo), rows(float(np.ones(1)[0] / np.sqrt(2))))
    assert X.shape == (3, 3)


@pytest.mark.parametrize(("encoding", "algo"), CENTERED)
@pytest.mark.parametrize("x0", [0.0, 0.70710, C + 1e-6, -C])
def test_a_context_off_the_intercept_is_refused(x0: float, encoding: str, algo: str) -> None:
    with pytest.raises(FeatureIntercept, match=r"row 1 has x\[0\]"):
        check_features(task(encoding, algo), rows(x0))


@pytest.mark.parametrize(("encoding", "algo"), [("frobenius", "ddp-linucb"),
                                                ("frobenius", "ldp-linucb"),
                                                ("plain", "ldp-linucb")])
def test_other_encodings_do_not_check_the_intercept(encoding: str, algo: str) -> None:
    """Under frobenius (or ldp-linucb's plain) the intercept is unused, so a context without it
    is fine; the norm bound is still checked first everywhere."""
    assert check_features(task(encoding, algo), rows(0.0)).shape == (3, 3)
    with pytest.raises(FeatureNorm):
        check_features(task("centered", algo), [[C, 0.9, 0.9], *rows(C)[1:]])
