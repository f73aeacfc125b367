"""The layers inside ``shared/`` (issue 45): the wire stands below the learning.

``shared/crypto`` (HPKE, Paillier, slots, Prio3) and ``shared/protocol`` (the wire messages) know no
policy: what they need of a task's policy reaches them as plain data (``SumEncoding``, a layout,
bounds), described by the randomizer through its capability (``randomizers.base.Summable``). So
no module of theirs imports ``shared.core.policies`` (or ``shared.settings``, which imports the
registry), at any depth: in functions and under ``TYPE_CHECKING`` too.

Also the code map's rules within ``shared/`` (docs/architecture.md): ``shared/core`` imports
nothing of ``shared.crypto``, the settings or the files helpers; only the policy families may
name the wire messages (they publish models as them).

The walk reads the ASTs, so it needs no import and costs milliseconds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_layout import ROOT, imported_modules

WIRE = ("crypto", "protocol")
# What the wire layer must not import (module prefixes, under ``privbandit.shared``).
ABOVE_THE_WIRE = ("privbandit.shared.core.policies", "privbandit.shared.settings")
# What ``shared/core`` must not import, and the one exception: the families publish wire models.
OUTSIDE_CORE = ("privbandit.shared.crypto", "privbandit.shared.settings",
                "privbandit.shared.files", "privbandit.shared.credentials")
CORE_MAY_NAME_THE_WIRE = {Path("shared/core/policies/families.py")}


def wire_sources() -> list[Path]:
    return sorted(p for package in WIRE for p in (ROOT / "shared" / package).rglob("*.py"))


def offending(path: Path, prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported_modules(path)
                  if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("path", wire_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_wire_layer_imports_no_policy(path: Path) -> None:
    bad = offending(path, ABOVE_THE_WIRE)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: pass plain data down instead"


def test_the_walk_finds_the_wire_modules_and_would_see_such_an_import(tmp_path: Path) -> None:
    """The check can fail: a module importing the registry inside a function is caught."""
    names = {p.relative_to(ROOT).as_posix() for p in wire_sources()}
    assert {"shared/crypto/slots.py", "shared/crypto/prio3_task.py",
            "shared/protocol/messages.py"} <= names
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from privbandit.shared.core.policies import randomizer_for\n"
                     "    import privbandit.shared.settings\n", "utf-8")
    assert offending(probe, ABOVE_THE_WIRE) == ["privbandit.shared.core.policies",
                                                "privbandit.shared.settings"]


@pytest.mark.parametrize("path", sorted((ROOT / "shared" / "core").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_core_imports_only_core(path: Path) -> None:
    prefixes = OUTSIDE_CORE
    if path.relative_to(ROOT) not in CORE_MAY_NAME_THE_WIRE:
        prefixes = (*prefixes, "privbandit.shared.protocol")
    bad = offending(path, prefixes)
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
