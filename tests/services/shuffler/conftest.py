"""Fixtures of the shuffler tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from privbandit.shared.crypto.keystore import HpkeKeyStore
from tests.services.stores import store


@pytest.fixture
def keys(tmp_path: Path) -> HpkeKeyStore:
    """An analyzer key pair for tests whose analyzer is a fake."""
    return HpkeKeyStore(tmp_path / "fake-analyzer-keys")



__all__ = ["keys", "store"]
