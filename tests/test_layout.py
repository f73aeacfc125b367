"""The code map's import rules (docs/architecture.md), checked on the source and on a real import.

One import name (issue 25): ``shared/`` and ``services/`` stay top-level folders of the repository
but are imported as ``privbandit.shared`` and ``privbandit.services`` (``privbandit/shared`` and
``privbandit/services`` are links to them), so the wheel installs only ``privbandit``.

- ``shared/`` holds what device, shuffler and analyzer have in common: no network, process or
  terminal code, and nothing of ``services`` or ``privbandit``.
- ``services/<name>/`` may import ``shared`` and ``services.common``, never another service nor
  the command line; ``services/common`` imports no service.
- ``privbandit/`` (the command line) may import everything.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import patience

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_SHARED = ("rich", "matplotlib", "httpx", "uvicorn", "fastapi", "subprocess")
SERVICES = ("analyzer", "shuffler", "device")


def imported_modules(path: Path) -> set[str]:
    """Absolute module names a file imports (at any depth: in functions too)."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def top(name: str) -> str:
    """The code map's area of a module: ``shared``, ``services`` (under ``privbandit.``), the
    command line ``privbandit``, or a third-party top-level name."""
    parts = name.split(".")
    if parts[0] == "privbandit" and len(parts) > 1 and parts[1] in ("shared", "services"):
        return parts[1]
    return parts[0]


def rest(name: str) -> list[str]:
    """The parts of a module name below its area (``privbandit.services.device.app`` →
    ``["device", "app"]``)."""
    parts = name.split(".")
    return parts[2:] if top(name) in ("shared", "services") else parts[1:]


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", sources("shared"), ids=lambda p: str(p.relative_to(ROOT)))
def test_shared_imports_no_network_process_or_terminal_code(path: Path) -> None:
    bad = {m for m in imported_modules(path)
           if top(m) in FORBIDDEN_IN_SHARED or top(m) in ("services", "privbandit")}
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_importing_all_of_shared_loads_none_of_them() -> None:
    """Also transitively: a library that shared uses must not pull them in either. (Except
    ``subprocess``, which scipy and pydantic-settings import themselves; that shared never
    calls it is the source check above.)"""
    transitive = tuple(m for m in FORBIDDEN_IN_SHARED if m != "subprocess")
    modules = [
        ".".join(("privbandit", *p.relative_to(ROOT).with_suffix("").parts))
        .removesuffix(".__init__")
        for p in sources("shared")
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {transitive!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=patience(120), check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", sources("services"), ids=lambda p: str(p.relative_to(ROOT)))
def test_services_import_only_shared_common_and_themselves(path: Path) -> None:
    parts = path.relative_to(ROOT).parts
    own = parts[1] if len(parts) > 2 else None
    bad = set()
    for m in imported_modules(path):
        if top(m) == "privbandit":
            bad.add(m)
        elif top(m) == "services" and rest(m):
            other = rest(m)[0]
            if own == "common" and other != "common":
                bad.add(m)
            elif other in SERVICES and other != own:
                bad.add(m)
    assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", ["shared", "services", "privbandit", "tests", "bench", "load",
                                     "examples"])
def test_nothing_imports_the_folders_by_their_own_names(package: str) -> None:
    """``import shared`` would load a second copy of every module beside ``privbandit.shared``
    (two registries, two settings classes) and fail outside the checkout: one name only."""
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in sources(package) for m in imported_modules(p)
           if m.split(".")[0] in ("shared", "services")]
    assert not bad, "\n".join(bad)


def test_the_links_point_at_the_top_level_folders() -> None:
    for name in ("shared", "services"):
        link = ROOT / "privbandit" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), name
