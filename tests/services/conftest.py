"""Fixtures for in-process service tests: real SQLite files under tmp_path, real HPKE, the apps'
lifespans running, and httpx clients over ASGI transports (helpers in ``tests.helpers``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from privbandit.shared.settings import Settings
from tests.helpers import make_settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path / "data")
