"""Issue 44 item 1: the non-private policies have practical defaults like the private ones (their
registry entry's ``practical``, searched on tuning seeds: docs/benchmarks/yardstick.md) — what
``privbandit simulate`` and the library use — and ``--paper`` restores the paper's settings (width
1 for linucb and ucb, step scale 1 for the BCO policies). Tiny runs: the settings, not the
learning, are what is checked here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from privbandit.cli import main
from privbandit.shared.core.policies.registry import REGISTRY
from privbandit.simulation import resolve_config

NON_PRIVATE = sorted(algo for algo, e in REGISTRY.items() if e.threat_models == ("none",))
# Where each is run by the command line (a BCO policy needs a BCO environment).
ENV = {"linucb": "linear", "ucb": "mab", "bco": "bco-quadratic", "bco2": "bco-quadratic"}


def test_every_non_private_policy_has_practical_defaults() -> None:
    assert NON_PRIVATE == sorted(ENV)  # a new non-private policy needs its search and its entry
    for algo in NON_PRIVATE:
        cls = REGISTRY[algo].config
        practical = dict(REGISTRY[algo].practical)
        assert practical, algo
        paper = cls()
        for key, value in practical.items():
            # Each is one of the paper's knobs moved: the paper's value is 1 (a multiplier).
            assert getattr(paper, key) == 1.0 and value != 1.0, (algo, key)
        config, _ = resolve_config(algo)
        assert {k: getattr(config, k) for k in practical} == practical
        config, _ = resolve_config(algo, paper=True)
        assert config == paper


@pytest.mark.parametrize("algo", NON_PRIVATE)
def test_simulate_uses_them_and_paper_restores_the_papers(tmp_path: Path, algo: str) -> None:
    base = ["simulate", "--algo", algo, "--env", ENV[algo], "--T", "200", "--no-progress"]
    practical = dict(REGISTRY[algo].practical)
    assert main([*base, "--json", str(tmp_path / "a.json")]) == 0
    params = json.loads((tmp_path / "a.json").read_text())["params"]
    assert {k: params[k] for k in practical} == practical
    assert main([*base, "--paper", "--json", str(tmp_path / "p.json")]) == 0
    params = json.loads((tmp_path / "p.json").read_text())["params"]
    assert {k: params[k] for k in practical} == {k: 1.0 for k in practical}
    # A flag given explicitly wins over the practical default.
    flag, value = ("--step-scale", "step_scale") if algo.startswith("bco") else (
        "--confidence-scale", "confidence_scale")
    assert main([*base, flag, "0.5", "--json", str(tmp_path / "f.json")]) == 0
    assert json.loads((tmp_path / "f.json").read_text())["params"][value] == 0.5


def test_packaged_tasks_state_their_practical_defaults() -> None:
    """The services take a task's policy as written (no registry defaults are filled in), so each
    task of the packaged config states its entry's practical settings, as ``simulate`` and the
    library run them: the demo's regret is the policy's at its default (demo-ucb ran UCB1's width
    1 before). small.toml's tasks are sized for the tests and keep their own settings, except
    small-ucb's width, the same as demo-ucb's."""
    from privbandit.demo.config import load_settings
    from privbandit.shared.settings import DEFAULT_CONFIG

    for task in load_settings(DEFAULT_CONFIG).tasks:
        e = REGISTRY[task.policy.algo]
        stated = task.policy.model_dump(exclude_unset=True)
        want = e.config.model_validate({**stated, **e.practical_for(task.aggregation)})
        assert task.policy == want, task.id
    ucb = load_settings(DEFAULT_CONFIG.parent / "small.toml").task("small-ucb")
    assert ucb is not None and ucb.policy.confidence_scale == dict(REGISTRY["ucb"].practical)[
        "confidence_scale"]
