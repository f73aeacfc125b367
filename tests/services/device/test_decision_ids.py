"""Sealed decision ids (``services.device.decision_ids``): an id opens to exactly the state it
sealed, only for its task and only under its device's key; any altered byte makes it unknown;
ids are unique and ordered by issue time; the key persists owner-only across restarts."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import numpy as np
import pytest

from privbandit.services.device.decision_ids import (
    KEY_BYTES,
    DecisionIds,
    issued_ms,
    uid_floor,
)
from privbandit.services.device.errors import UnknownDecision


def raw(decision_id: str) -> bytes:
    return base64.urlsafe_b64decode(decision_id + "=" * (-len(decision_id) % 4))


def encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_an_id_opens_to_exactly_its_state_and_issue_time() -> None:
    ids = DecisionIds(bytes(range(KEY_BYTES)), clock=lambda: 1_790_000_000.1234)
    rng = np.random.default_rng(1)
    for d in (1, 3, 64, 30_001):  # up to a two-point BCO task's state at d = 10⁴
        state = rng.standard_normal(d)
        opened = ids.open("cen", ids.issue("cen", state))
        np.testing.assert_array_equal(opened.state, state)  # bit for bit
        assert opened.issued == 1_790_000_000.123
        assert issued_ms(opened.uid) == 1_790_000_000_123


def test_an_id_opens_only_for_its_task_and_under_its_key() -> None:
    key = bytes(KEY_BYTES)
    ids, other = DecisionIds(key), DecisionIds(b"\x01" * KEY_BYTES)
    did = ids.issue("cen", np.ones(3))
    assert DecisionIds(key).open("cen", did).state.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(UnknownDecision):
        ids.open("loc", did)
    with pytest.raises(UnknownDecision):
        other.open("cen", did)


def test_any_altered_byte_makes_the_id_unknown() -> None:
    ids = DecisionIds(bytes(KEY_BYTES))
    data = raw(ids.issue("cen", np.array([0.25, -0.5])))
    for i in range(len(data)):
        for flip in (0x01, 0x80):
            altered = bytearray(data)
            altered[i] ^= flip
            with pytest.raises(UnknownDecision):
                ids.open("cen", encode(bytes(altered)))
    for cut in (data[:-1], data[:29], data + b"\x00", b"", b"\x01" * 28):
        with pytest.raises(UnknownDecision):
            ids.open("cen", encode(cut))
    with pytest.raises(UnknownDecision):
        ids.open("cen", "not base64 at all!")


def test_ids_are_unique_and_their_uids_ordered_by_issue_time() -> None:
    now = [1_790_000_000.0]
    ids = DecisionIds(bytes(KEY_BYTES), clock=lambda: now[0])
    uids = []
    for _ in range(2000):
        now[0] += 0.0005  # two ids per millisecond: ordered across ms, random within one
        uids.append(ids.open("t", ids.issue("t", np.zeros(2))).uid)
    assert len(set(uids)) == 2000 and len({u[6:] for u in uids}) == 2000
    by_ms = [issued_ms(u) for u in uids]
    assert by_ms == sorted(by_ms)
    assert all(uid_floor(issued_ms(u)) <= u < uid_floor(issued_ms(u) + 1) for u in uids)


def test_the_key_is_created_owner_only_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "device" / "decision.key"
    first = DecisionIds.load_or_create(path)
    assert len(path.read_bytes()) == KEY_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    did = first.issue("cen", np.arange(4.0))
    again = DecisionIds.load_or_create(path)
    assert again.open("cen", did).state.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert len({DecisionIds.load_or_create(tmp_path / f"k{i}").issue("cen", np.ones(1))
                for i in range(3)}) == 3
    assert len({(tmp_path / f"k{i}").read_bytes() for i in range(3)}) == 3
