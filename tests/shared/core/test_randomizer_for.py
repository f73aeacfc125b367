"""``randomizer_for`` builds a BCO task's randomizer without its policy's initial model (which
loads the compiled loops): the shuffler sizes ciphertexts with it at start-up (issue 26 item 6).
It must be the very randomizer the policy holds."""

from __future__ import annotations

import pickle

import pytest

from privbandit.shared.core.policies import build_policy, make_config, randomizer_for
from privbandit.shared.crypto.hpke import row_length


@pytest.mark.parametrize("algo", ["bco", "ldp-bco", "bco2", "ldp-bco2"])
@pytest.mark.parametrize("d", [1, 3])
def test_a_bco_randomizer_without_the_policy_is_the_policys(algo: str, d: int) -> None:
    config = make_config(algo, d=d)
    direct, whole = randomizer_for(config), build_policy(config).randomizer
    assert type(direct) is type(whole)
    assert row_length(direct) == row_length(whole)
    # σ is calibrated on first use (the shuffler needs only the row length); once both have
    # it, every field is equal (the report's calibration included): same bytes once pickled
    for r in (direct, whole):
        _ = r.value_range  # σ, and the admissible values it gives
        if r.report is not None:
            _ = r.report.sigma
    assert pickle.dumps(vars(direct)) == pickle.dumps(vars(whole))
