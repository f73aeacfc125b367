"""The shuffler's secure-sum intake: every bad upload (ciphertexts, or the tags of the reports) is
refused before anything is stored, and intake (and readiness) wait for the analyzer's keys."""


from pathlib import Path
from typing import Any

from privbandit.shared.crypto.slots import ciphertext_width
from privbandit.shared.protocol.messages import HpkeConfig, ReportsAccepted, b64decode, b64encode
from tests.helpers import counts_maker, error, eventually, paillier_ready, report_maker, upload

from .support import SUM, Recorder, acked, settings_for, stack


async def test_shuffler_intake_validation_stores_nothing(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    async with stack(settings) as s:
        make = counts_maker(s.config, s.hpke, seed=3)
        _, (good, other) = make(SUM, 2)
        url = "/v1/tasks/sum/encrypted-counts"
        width = ciphertext_width(s.config.key_bits)
        n = s.config.modulus()
        raw = b64decode(good.ct)

        def with_ct(ct: str) -> dict[str, Any]:
            return {"reports": [good.model_dump(), {**other.model_dump(), "ct": ct}]}

        for ct in ["***", b64encode(raw[:-1]), b64encode(raw + raw), b64encode(bytes(width)),
                   b64encode(n.to_bytes(width, "big")),
                   b64encode((n * n + 1).to_bytes(width, "big"))]:
            r = await s.shuffler.post(url, json=with_ct(ct))
            assert "reports[1]" in error(r, 422, "bad_ciphertext").message
        r = await s.shuffler.post(url, json={"reports": [
            {**good.model_dump(), "key_id": (s.config.key_id + 1) % 256}]})
        error(r, 422, "unknown_key")
        # The tag: sealed to the analyzer's HPKE key id, a sound encapsulated key, its length.
        tag = other.tag.model_dump()

        def with_tag(**update: Any) -> dict[str, Any]:
            return {"reports": [good.model_dump(), {**other.model_dump(),
                                                    "tag": {**tag, **update}}]}

        r = await s.shuffler.post(url, json=with_tag(key_id=(s.hpke.key_id + 1) % 256))
        assert "reports[1].tag" in error(r, 422, "unknown_hpke_key").message
        r = await s.shuffler.post(url, json=with_tag(enc=b64encode(bytes(32))))
        error(r, 422, "bad_encapsulated_key")
        r = await s.shuffler.post(url, json=with_tag(ct=b64encode(b64decode(tag["ct"]) + b"x")))
        error(r, 422, "bad_report_size")
        no_tag = {k: v for k, v in other.model_dump().items() if k != "tag"}
        error(await s.shuffler.post(url, json={"reports": [no_tag]}), 422, "invalid_request")
        for body in [{}, {"reports": []}, {"reports": [good.model_dump()] * 1001},
                     {"reports": [{**good.model_dump(), "enc": "AAAA"}]},
                     {"reports": [good.model_dump()], "device": "d1"}]:
            error(await s.shuffler.post(url, json=body), 422, "invalid_request")
        # The wrong transport for the task, or no such task.
        error(await s.shuffler.post("/v1/tasks/shuf/encrypted-counts",
                                    json={"reports": [good.model_dump()]}),
              409, "aggregation_mismatch")
        error(await s.shuffler.post("/v1/tasks/nope/encrypted-counts",
                                    json={"reports": [good.model_dump()]}), 404, "unknown_task")
        hpke = HpkeConfig.model_validate((await s.analyzer.get("/v1/hpke-config")).json())
        body = {"reports": [r.model_dump() for r in report_maker(hpke)(SUM, 1)]}
        error(await s.shuffler.post("/v1/tasks/sum/reports", json=body),
              409, "aggregation_mismatch")

        q = await s.queue()
        assert (q.accepted, q.pending, q.batches_formed) == (0, 0, 0)
        # The good reports of a refused upload were not stored: they are still new.
        assert await upload(s.shuffler, [good, other]) == ReportsAccepted(accepted=2,
                                                                            duplicates=0)


async def test_intake_waits_for_the_analyzer_key(tmp_path: Path) -> None:
    """Until the shuffler has fetched the Paillier config, secure-sum uploads get 503 not_ready
    (HPKE tasks are unaffected) and /healthz 503 starting; it keeps retrying and opens intake
    once it gets it."""
    settings = settings_for(tmp_path)
    rec = Recorder()
    rec.block_gets = True
    async with stack(settings, rec, wait_ready=False) as s:
        _, reports = counts_maker(s.config, s.hpke, seed=4)(SUM, 10)
        body = {"reports": [r.model_dump() for r in reports]}
        await eventually(lambda: _attempts(rec, 3))
        r = await s.shuffler.post("/v1/tasks/sum/encrypted-counts", json=body)
        error(r, 503, "not_ready")
        assert r.headers["retry-after"] == "1"
        # Not ready: /healthz says what it waits for (so the device is not started yet).
        health = error(await s.shuffler.get("/healthz"), 503, "starting")
        assert health.message == "waiting for the analyzer: hpke-config, paillier-config"
        assert (await s.queue()).accepted == 0
        rec.block_gets = False
        await eventually(lambda: paillier_ready(s.shuffler))
        assert (await upload(s.shuffler, reports)).accepted == 10
        await eventually(lambda: acked(s.shuffler, 1))
        assert (await s.privacy()).reports_counted == 10


async def _attempts(rec: Recorder, n: int) -> bool:
    return sum(path == "/v1/paillier-config" for _, path, _ in rec.requests) >= n
