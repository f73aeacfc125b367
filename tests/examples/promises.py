"""What the scripts of examples/ promise in their docstrings, as assertions on their JSON output.

``tests/privbandit/test_install.py`` runs each script once, from the installed wheel outside the
checkout (as a user who installed the package runs it), and checks these promises on that run;
running them again from the checkout would show nothing more (the same script on the same
code, seeded) for ~15 s of CPU, most of it the OBD example's sblb ledger."""

from __future__ import annotations

from typing import Any


def assert_own_stream(out: dict[str, Any]) -> None:
    """``own_stream.py``: ldp-linucb at ε = 2 on the user's own stream learns (its second half's
    average reward above its first half's)."""
    assert out["ldp_epsilon"] == 2.0
    assert out["second_half"] > out["first_half"], out


def assert_own_environment(out: dict[str, Any]) -> None:
    """``own_environment.py``: on the user's own environment linucb's regret is under half the
    random policy's, ldp-linucb's under the random policy's."""
    assert out["linucb"] < 0.5 * out["random"], out
    assert out["ldp-linucb"] < out["random"], out


def assert_obd_example(out: dict[str, Any], stdout: str, rounds: int) -> None:
    """``obd_private_policies.py`` at ``--epsilons 8 --repeats 1`` on a log written by
    ``tests.shared.core.obd_format.write_obd(..., K=6, ctr=0.1, best_price=0.9)`` (the
    highest-priced item clicked 90% of the time, the others 10%): linucb on the example's
    features learns the price signal, its exact IPS interval above the logged random policy's
    (evaluated on ``rounds``, the log's second half); every verdict agrees with the printed
    intervals."""
    assert "| policy | ε |" in stdout and "logged random policy" in stdout
    r = out["random"]
    assert r["low"] <= r["value"] <= r["high"] and r["rounds"] == rounds
    verdicts = {}
    for run in out["policies"]:
        x = run["frozen"]["estimates"]["ips-exact"]
        assert x["low"] <= x["value"] <= x["high"]
        expected = ("beats" if x["low"] > r["high"] else
                    "worse" if x["high"] < r["low"] else "not distinguishable")
        assert run["verdict"] == expected
        verdicts[(run["algo"], run["epsilon"])] = run["verdict"]
    assert verdicts[("linucb", None)] == "beats", out["policies"][0]
    assert len(verdicts) == 1 + 4  # linucb and four private policies at ε = 8
    assert [r["algo"] for r in out["policies"]] == ["linucb", "ldp-linucb", "sblb",
                                                     "ddp-linucb", "adar-oful"]
