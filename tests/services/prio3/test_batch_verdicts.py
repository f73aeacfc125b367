"""The services' batch verification (issue 23 item 5) gives, report by report, the verdicts of
the single-report path: the analyzer's ``Prio3Decoder.verify`` against ``_verify_one`` on each
report, and the shuffler's ``leader_verify`` against ``verify_init`` on each member, on a batch
that mixes honest reports with every kind of bad one (refused alone)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from privbandit.services.analyzer.transports.prio3 import Prio3Decoder
from privbandit.services.shuffler.transports.prio3 import leader_aggregate, leader_verify
from privbandit.shared.crypto.hpke import CryptoError
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.crypto.prio3.prio3 import VerifyError
from privbandit.shared.crypto.prio3_task import task_vdaf, verify_key
from privbandit.shared.protocol.messages import b64decode, b64encode
from privbandit.shared.protocol.prio3 import Prio3VerifyRequest, VerifyItem
from privbandit.shared.settings import TaskConfig

from .support import Maker, ddp_prio3_task, prio3_task

TOKEN = "batch-verdicts-test-token"


def reference_reason(decoder: Prio3Decoder, key: bytes, item: VerifyItem, known: set[bytes],
                     seen: set[bytes]) -> str | None:
    """The single-report path's verdict on one item (None: accepted)."""
    nonce = b64decode(item.nonce)
    if nonce in known:
        return "replayed_nonce"
    if nonce in seen:
        return "repeated_nonce"
    seen.add(nonce)
    try:
        decoder._verify_one(key, nonce, item)
    except CryptoError:
        return "bad_helper_share"
    except VerifyError:
        return "invalid_proof"
    except ValueError:
        return "malformed"
    return None


@pytest.mark.parametrize("config", [prio3_task("sum", l=16), ddp_prio3_task("ddp", l=16)],
                         ids=["sblb", "ddp-linucb"])
def test_batch_verdicts_equal_single_path(config: TaskConfig, tmp_path: Path) -> None:
    hpke = HpkeKeyStore(tmp_path)
    make = Maker(config, hpke.hpke_config(), seed=23)
    vd = task_vdaf(config)
    key = verify_key(TOKEN, config.id)
    _, honest = make.honest(10)
    bits = vd.max_value.bit_length()
    reports = honest + [
        make.forged([5] + [0] * (vd.length * bits - 1)),  # invalid measurement
        make.forged([0] * (vd.length * bits)),  # valid, for tampering below
        make.forged([0] * (vd.length * bits)),
        make.forged([0] * (vd.length * bits)),
    ]
    request, states = leader_verify(vd, key, "ab" * 16, reports)
    # the leader's batch states and verifier shares are the single path's
    v = vd.vdaf
    for r, item, state in zip(reports, request.reports, states, strict=True):
        ref_state, ref_share = v.verify_init(
            key, vd.ctx, 0, b64decode(r.nonce), v.decode_public_share(b64decode(r.public_share)),
            v.decode_input_share(0, b64decode(r.leader_share)))
        assert b64decode(item.verifier_share) == v.encode_verifier_share(ref_share)
        assert state.corrected_joint_rand_seed == ref_state.corrected_joint_rand_seed
        assert v.field.encode_vec(state.out_share) == v.field.encode_vec(ref_state.out_share)
    items = list(request.reports)
    # 11: a helper share sealed for another report; 12: a verifier share one byte short;
    # 13: a public share whose leader part is wrong; and a repeat and a replay of honest ones
    items[11] = items[11].model_copy(update={"helper_share": items[0].helper_share})
    items[12] = items[12].model_copy(
        update={"verifier_share": b64encode(b64decode(items[12].verifier_share)[:-1])})
    public = b64decode(items[13].public_share)
    items[13] = items[13].model_copy(
        update={"public_share": b64encode(secrets.token_bytes(32) + public[32:])})
    items.append(items[1])
    request = Prio3VerifyRequest(batch_id=request.batch_id, reports=items)
    known = {b64decode(items[2].nonce)}

    decoder = Prio3Decoder(config, vd, hpke)
    answer = decoder.verify(request, known, TOKEN)
    seen: set[bytes] = set()
    expected = [reference_reason(decoder, key, item, known, seen) for item in items]
    assert [vd_.refused for vd_ in answer.verdicts] == expected
    assert expected == ([None, None, "replayed_nonce"] + [None] * 7
                        + ["invalid_proof", "bad_helper_share", "malformed", "bad_helper_share",
                           "repeated_nonce"])
    for item, verdict in zip(items, answer.verdicts, strict=True):
        if verdict.message is not None:
            _, message = decoder._verify_one(key, b64decode(item.nonce), item)
            assert b64decode(verdict.message) == message
    # the leader aggregates exactly the accepted ones and the analyzer decodes their sum
    members = reports + [reports[1]]
    aggregate = leader_aggregate(vd, request.batch_id, len(items) - 1, members[:-1],
                                 states, answer.model_copy(update={
                                     "verdicts": answer.verdicts[:-1]}))
    assert len(aggregate.accepted) == 9
