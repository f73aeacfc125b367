"""The demo's comparison with the simulator (issue 26 item 8): a z-score only where the
simulator's runs actually spread."""

from __future__ import annotations

import numpy as np
import pytest

from privbandit.demo.report import _reference, _reference_line


def test_a_degenerate_spread_gives_no_z_score_and_says_why() -> None:
    # One-batch runs: every run plays before any model, equal up to float rounding.
    finals = np.array([1000.0, 1000.0 + 1e-13, 1000.0 - 1e-13, 1000.0])
    ref = _reference(finals, 1003.5, "runs")
    assert ref["demo_z"] is None
    assert "agree to rounding" in ref["demo_z_note"] and "+3.5" in ref["demo_z_note"]
    line = _reference_line(ref)[0]
    assert "no z-score" in line and " sd)" not in line


def test_a_real_spread_gives_the_z_score() -> None:
    finals = np.array([90.0, 100.0, 110.0])
    ref = _reference(finals, 120.0, "runs")
    assert ref["demo_z"] == 2.0 and "demo_z_note" not in ref
    assert "this run is +2.0 sd" in _reference_line(ref)[0]


def test_identical_runs_give_no_z_score() -> None:
    ref = _reference(np.full(5, 7.0), 7.0, "runs")
    assert ref["demo_z"] is None and ref["sd"] == 0.0


# --- issue 26 item 8: no comparison on services the demo did not start; per-user ε; progress
# lines when the output is not a terminal ---


def test_no_simulator_reference_prints_why() -> None:
    from privbandit.demo.run import NOT_COMPARED

    assert _reference_line(None) == []
    line = _reference_line(None, NOT_COMPARED)[0]
    assert "simulator" in line and "not started by this demo" in line and " sd" not in line


def test_the_ledger_lines_show_the_per_user_epsilon() -> None:
    from privbandit.summary import ledger_lines

    p = {"threat_model": "ldp", "ldp_epsilon": None, "ldp_delta": 0.0,
         "central_epsilon": None, "central_delta": None,
         "per_user_epsilon": {"distribution": "choice:0.5,1,2", "mean": 7 / 6,
                              "fraction_used": 0.8, "fraction_declined": 0.2}}
    lines = [ln for ln in ledger_lines(p) if "per-user ε" in ln]
    assert lines == ["    per-user ε        choice:0.5,1,2: mean 1.167, used 0.8, declined 0.2"
                     "  (each user's own ε_t)"]
    assert not [ln for ln in ledger_lines({**p, "per_user_epsilon": None}) if "per-user" in ln]


class FakeDriver:
    def __init__(self, users: int) -> None:
        self.users, self.done = users, 0
        self.regret, self.random_regret, self.model_version = 0.0, 0.0, 0


def test_progress_is_printed_as_lines_when_not_on_a_terminal() -> None:
    import io

    from rich.console import Console

    from privbandit.demo.config import DemoOptions
    from privbandit.demo.report import ProgressBar
    from privbandit.shared.protocol.messages import TaskInfo

    out = io.StringIO()
    console = Console(file=out, width=200)
    assert not console.is_terminal
    task = TaskInfo.model_construct(id="t")
    bar = ProgressBar(DemoOptions("shuffle", users=1000), task, console)
    driver = FakeDriver(1000)
    with bar:
        for done in range(1, 1001):
            driver.done, driver.regret = done, done / 10
            bar.update(driver)  # type: ignore[arg-type]  # the fields the bar reads
    lines = out.getvalue().splitlines()
    assert len(lines) == 10  # one per tenth of the users, none in between
    assert lines[0].startswith("  100/1000 users,") and "regret 10.0" in lines[0]
    assert lines[-1].startswith("  1000/1000 users,")


@pytest.mark.parametrize("width", [80, 160])
def test_the_progress_bar_fits_the_terminal(width: int) -> None:
    """At 80 columns the live bar keeps to one line (it drops the rate, model version and
    elapsed time, and shortens the bar); wider, it shows them all (issue 45 item 8)."""
    import io
    import re
    import types

    from rich.console import Console

    from privbandit.demo.report import ProgressBar

    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None)
    bar = ProgressBar(types.SimpleNamespace(users=50_000),  # type: ignore[arg-type]
                      types.SimpleNamespace(id="demo-shuffle"), console)  # type: ignore[arg-type]
    driver = types.SimpleNamespace(done=12_345, users=50_000, regret=12_345.6,
                                   random_regret=43_210.9, model_version=123)
    with bar:
        bar.update(driver)  # type: ignore[arg-type]
        bar._bar.refresh()  # noqa: SLF001
    lines = [re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", line)
             for line in out.getvalue().replace("\r", "\n").split("\n")]
    shown = [line for line in lines if "12345/50000" in line]
    assert shown and all(len(line.rstrip()) <= width for line in shown)
    assert all("regret 12345.6 (random 43210.9)" in line for line in shown)
    assert all(("users/s" in line) == (width > 80) for line in shown)


def test_piped_output_is_not_wrapped_inside_numbers_or_urls() -> None:
    """Not a terminal: rich's console does not cut long lines at 80 columns."""
    import io

    from privbandit.demo.report import make_console

    console = make_console()
    assert not console.is_terminal and console.soft_wrap
    console.file = out = io.StringIO()
    url = "http://127.0.0.1:8701/v1/tasks/demo-shuffle/privacy?" + "x" * 80
    console.print(f"see {url} for ε = 0.123456789012345678901234567890", highlight=False)
    assert out.getvalue().count("\n") == 1 and url in out.getvalue()
