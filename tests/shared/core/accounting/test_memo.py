"""The accountant's memo (``accounting.memo``): a remembered figure is the computed float, bit for
bit; it is read only for its own key and version; anything else on disk is ignored and the
figure computed; unset, nothing is read or written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from privbandit.shared.core.accounting import memo, shuffle, sum_only
from privbandit.shared.core.accounting.memo import ENV, Memo, remembered


class Counted:
    """A figure's computation that counts its calls."""

    def __init__(self, value: float) -> None:
        self.value, self.calls = value, 0

    def __call__(self) -> float:
        self.calls += 1
        return self.value


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "memo"
    monkeypatch.setenv(ENV, str(root))
    return root


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.json"))


def test_unset_nothing_is_read_or_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    f = Counted(0.25)
    assert remembered("f", (1.0, 2), f) == 0.25 and remembered("f", (1.0, 2), f) == 0.25
    assert f.calls == 2
    assert list(tmp_path.iterdir()) == []


def test_a_remembered_figure_is_the_computed_float_and_is_not_computed_again(cache: Path) -> None:
    value = 1 / 3 + 1e-17 * math.pi  # a float whose repr needs all 17 digits
    f = Counted(value)
    assert remembered("f", (0.1, 7, "secure-sum"), f) == value
    assert remembered("f", (0.1, 7, "secure-sum"), f).hex() == value.hex()
    assert f.calls == 1
    assert len(entries(cache)) == 1
    # another key of the same function, or another function at the same key: computed
    assert remembered("f", (0.1, 8, "secure-sum"), f) == value and f.calls == 2
    assert remembered("g", (0.1, 7, "secure-sum"), f) == value and f.calls == 3
    assert len(entries(cache)) == 3


def test_the_accountants_figures_are_remembered_bit_for_bit(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sum_only_epsilon and shuffle_epsilon read back from the memo equal the figures computed
    without it, and a hit computes nothing (the PLD and the FMT bound are made to fail)."""
    args = (40.0, 200, 1e-6, 3, 2)
    computed_sum = sum_only.sum_only_epsilon(*args)
    computed_fmt = shuffle.shuffle_epsilon(2.0, 500, 1e-6)
    computed_start = shuffle.shuffle_max_eps0(1.0, 500, 1e-6)
    monkeypatch.delenv(ENV)
    assert sum_only.sum_only_epsilon(*args) == computed_sum  # the memo's answer is the cold one
    assert shuffle.shuffle_epsilon(2.0, 500, 1e-6) == computed_fmt
    assert shuffle.shuffle_max_eps0(1.0, 500, 1e-6) == computed_start
    monkeypatch.setenv(ENV, str(cache))

    def broken(*a: object, **k: object) -> None:
        raise AssertionError("computed although remembered")

    monkeypatch.setattr(sum_only, "composed_pld", broken)
    monkeypatch.setattr(shuffle, "shuffle_delta", broken)
    assert sum_only.sum_only_epsilon(*args).hex() == float(computed_sum).hex()
    assert shuffle.shuffle_epsilon(2.0, 500, 1e-6).hex() == float(computed_fmt).hex()
    assert shuffle.shuffle_max_eps0(1.0, 500, 1e-6).hex() == float(computed_start).hex()
    with pytest.raises(AssertionError, match="computed although"):
        sum_only.sum_only_epsilon(40.0, 201, 1e-6, 3, 2)  # not remembered: computed


def test_another_version_of_the_accountant_reads_nothing(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = Counted(0.5)
    remembered("f", (1.0,), f)
    monkeypatch.setattr(memo, "accountant_version", lambda: "an edited accountant")
    assert remembered("f", (1.0,), f) == 0.5 and f.calls == 2


@pytest.mark.parametrize("content", [
    "",  # truncated
    "{\"key\": ",  # truncated JSON
    "[1, 2]",  # not an entry
    "{\"key\": \"other\", \"value\": 0.75}",  # another key's entry (a collision, or an edit)
    "KEY -1.0",  # negative
    "KEY NaN",  # not finite
    "KEY Infinity",
    "KEY \"0.75\"",  # not a float
    "KEY 1",  # an int, not the float written
])
def test_an_entry_that_is_not_this_keys_finite_figure_is_ignored_and_rewritten(
    cache: Path, content: str
) -> None:
    f = Counted(0.125)
    remembered("f", (3.0, 4), f)
    (path,) = entries(cache)
    stored = json.loads(path.read_text())["key"]
    if content.startswith("KEY "):
        content = f"{{\"key\": {json.dumps(stored)}, \"value\": {content[4:]}}}"
    path.write_text(content)
    assert remembered("f", (3.0, 4), f) == 0.125 and f.calls == 2
    assert json.loads(path.read_text()) == {"key": stored, "value": 0.125}
    assert remembered("f", (3.0, 4), f) == 0.125 and f.calls == 2


def test_a_directory_that_cannot_be_written_costs_only_the_speed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(ENV, str(blocker / "memo"))
    f = Counted(0.625)
    assert remembered("f", (1.0,), f) == 0.625 and remembered("f", (1.0,), f) == 0.625
    assert f.calls == 2


def test_only_finite_figures_are_written(tmp_path: Path) -> None:
    m = Memo(tmp_path)
    for bad in (math.inf, math.nan, -1.0):
        m.put("f", (bad,), bad)
    assert entries(tmp_path) == []
    m.put("f", (2.0,), 2.0)
    assert m.get("f", (2.0,)) == 2.0 and m.get("f", (3.0,)) is None
