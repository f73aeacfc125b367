"""Garbage of the right length is kept out of batches where the shuffler can tell: an HPKE report
must be sealed to the key id the analyzer publishes, with a well-formed encapsulated key (not a
point of small order) and the task's length. The shuffler learns the analyzer's HPKE config like
its Paillier config — fetched at start-up, kept in its data directory for a restart while the
analyzer is down — and asks again, at most every few seconds, when a report names a key id it does
not know."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from privbandit.services.shuffler import published
from privbandit.services.shuffler.tasks import ct_bytes
from privbandit.shared.crypto.hpke import LOW_ORDER_U
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.protocol.messages import EncryptedReport, ReportsAccepted, b64encode
from tests.helpers import error, queue_status, report_maker, running, upload

from .support import SHUF, FakeAnalyzer, settings_for, shuffler_app

URL = "/v1/tasks/shuf/reports"


def garbage(key_id: int, enc: bytes | None = None, ct: int | None = None) -> EncryptedReport:
    """Random bytes shaped as a report of the ``shuf`` task (or with the given lengths)."""
    return EncryptedReport(
        key_id=key_id,
        enc=b64encode(enc if enc is not None else secrets.token_bytes(32)),
        ct=b64encode(secrets.token_bytes(ct if ct is not None else ct_bytes(SHUF))),
    )


def key_store(path: Path, *taken: int) -> HpkeKeyStore:
    """A new analyzer key whose (8-bit) id differs from ``taken``."""
    while True:
        store = HpkeKeyStore(path)
        if store.key_id not in taken:
            return store
        store.path.unlink()


async def test_garbage_with_a_wrong_key_id_or_a_malformed_enc_is_refused_at_the_shuffler(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    fake = FakeAnalyzer(keys)
    async with running(shuffler_app(settings_for(tmp_path), fake)) as client:
        good = report_maker(keys.hpke_config())(SHUF, 1)[0]
        other_id = (keys.key_id + 1) % 256
        p = 2**255 - 19
        low_order = [u.to_bytes(32, "little") for u in sorted(LOW_ORDER_U)]
        low_order += [(1 | 1 << 255).to_bytes(32, "little"),  # the high bit is ignored
                      (p + 1).to_bytes(32, "little")]  # a non-canonical 1
        cases = [
            (garbage(other_id), "unknown_hpke_key"),
            (good.model_copy(update={"key_id": other_id}), "unknown_hpke_key"),
            *[(garbage(keys.key_id, enc=enc), "bad_encapsulated_key") for enc in low_order],
            (garbage(keys.key_id, enc=secrets.token_bytes(31)), "bad_report_size"),
            (garbage(keys.key_id, ct=ct_bytes(SHUF) - 1), "bad_report_size"),
        ]
        for bad, code in cases:
            # With a good report in the same upload: the whole upload is refused.
            body = {"reports": [good.model_dump(), bad.model_dump()]}
            r = await client.post(URL, json=body)
            assert "reports[1]" in error(r, 422, code).message
        q = await queue_status(client, "shuf")
        assert (q.accepted, q.pending) == (0, 0)
        # What the shuffler cannot tell: random bytes of the right shape under the analyzer's
        # key id are accepted (the analyzer rejects them when it fails to open them).
        assert await upload(client, [good, garbage(keys.key_id)]) == ReportsAccepted(
            accepted=2, duplicates=0)


async def test_made_up_key_ids_cost_the_analyzer_one_fetch_per_interval(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    fake = FakeAnalyzer(keys)
    async with running(shuffler_app(settings_for(tmp_path), fake)) as client:
        before = fake.hpke_gets
        for i in range(20):
            bad = garbage((keys.key_id + 1 + i) % 256)
            error(await client.post(URL, json={"reports": [bad.model_dump()]}),
                  422, "unknown_hpke_key")
        assert fake.hpke_gets - before == 1


async def test_a_new_analyzer_key_is_learned_when_a_report_names_it(
    tmp_path: Path, keys: HpkeKeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analyzer's key changed (say it was re-initialised): the first report sealed to the
    new key makes the shuffler fetch the config again and is accepted; reports under the old key
    are refused from then on. If the analyzer cannot be asked, the upload gets 503 (retry), not
    a refusal that would make a device drop a report the analyzer may accept."""
    monkeypatch.setattr(published, "REFRESH_INTERVAL", 0.0)
    fake = FakeAnalyzer(keys)
    async with running(shuffler_app(settings_for(tmp_path), fake)) as client:
        old = report_maker(keys.hpke_config(), seed=1)(SHUF, 2)
        assert (await upload(client, old[:1])).accepted == 1
        fake.keys = key_store(tmp_path / "new-analyzer-keys", keys.key_id)
        new = report_maker(fake.keys.hpke_config(), seed=2)(SHUF, 2)
        assert (await upload(client, new[:1])).accepted == 1
        error(await client.post(URL, json={"reports": [old[1].model_dump()]}),
              422, "unknown_hpke_key")
        fake.hpke_down = True
        newest_keys = key_store(tmp_path / "newest", keys.key_id, fake.keys.key_id)
        newest = report_maker(newest_keys.hpke_config())(SHUF, 1)
        r = await client.post(URL, json={"reports": [newest[0].model_dump()]})
        error(r, 503, "not_ready")
        assert (await upload(client, new[1:])).accepted == 1  # the known key needs no fetch


async def test_the_hpke_config_is_kept_for_a_restart_while_the_analyzer_is_down(
    tmp_path: Path, keys: HpkeKeyStore
) -> None:
    settings = settings_for(tmp_path)
    fake = FakeAnalyzer(keys)
    make = report_maker(keys.hpke_config())
    async with running(shuffler_app(settings, fake)):
        pass
    fake.hpke_down = True
    async with running(shuffler_app(settings, fake)) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await upload(client, make(SHUF, 2))).accepted == 2
    # Without the kept copy, nothing is accepted until the analyzer answers.
    other = settings_for(tmp_path / "other")
    async with running(shuffler_app(other, fake)) as client:
        health = error(await client.get("/healthz"), 503, "starting")
        assert health.message == "waiting for the analyzer: hpke-config"
        r = await client.post(URL, json={"reports": [make(SHUF, 1)[0].model_dump()]})
        error(r, 503, "not_ready")
