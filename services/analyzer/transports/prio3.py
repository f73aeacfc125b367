"""The analyzer's side of the ``prio3`` transport (docs/prio3.md, issue 23): the analyzer is the
Prio3 helper (aggregator 1), the shuffler the leader.

**Verification** (``POST /v1/tasks/{task}/prio3-verify``, shuffler token; ``Prio3Decoder.verify``
in a worker thread). Per report of the batch, in its order: a nonce already counted for the task
(``Store.known_report_ids``) or repeated in the batch is refused (``replayed_nonce``,
``repeated_nonce``); otherwise the sealed helper share is opened (refused as
``bad_helper_share`` unless sealed for this task, nonce and public share:
``shared.crypto.prio3_task.open_helper``), ``verify_init`` runs as aggregator 1,
``verifier_shares_to_message`` combines the leader's verifier share with its own (``decide``:
refused as ``invalid_proof`` when the proof fails — a count outside [0, m], a ddp value outside
±O, garbage, a proof made for another report), and both joint-randomness checks run: the
helper's (``verify_next``) and the leader's (the leader's corrected seed recomputed from its
part and the public share), so that the leader's ``verify_next`` accepts exactly what the
helper accepted. A bad leader verifier share is ``malformed``. The answer: a verdict per report
(the verifier message, or the refusal) and the continuation — the helper's aggregate share over
the accepted reports, their count and nonce digest, sealed to this analyzer alone and bound to
(task, batch id). No state is kept: verification is deterministic, the shuffler repeats it on
every attempt.

**Aggregation** (``POST /v1/tasks/{task}/prio3-aggregates``: ``Prio3Aggregate``, through the
ingest pipeline): the continuation must open and agree with the aggregate (count l, refusals,
accepted nonces), else 422 ``bad_continuation`` and nothing is recorded. The batch sum is
``unshard`` of the leader's and the helper's aggregate shares (for ``ddp-linucb`` minus n·O per
coordinate), fed with n = the accepted count and their nonces as report ids; the refused reports
are counted as ``rejected`` alone. The analyzer never sees a report's measurement, only the sum.

**Aggregator noise** (``ddp-linucb``, the default ``noise = "aggregators"``, issue 40). The
shuffler's aggregate share carries its Skellam noise; the analyzer adds its own to its share
before unsharding. The noise does not depend on what devices send, so a refused report costs
nothing but itself: the batch is released with its valid reports (refused ones counted as
``rejected``), never below the ledger's noise.

**The honest fraction** (``ddp-linucb`` with ``noise = "devices"``). Each Skellam share is sized
so that ⌈γ l⌉ honest shares carry the central noise μ the accountant charges. A report refused
here is certainly not an honest device's (an honest one is always valid), so a batch with fewer
than ⌈γ l⌉ valid reports cannot carry μ: it is quarantined whole (nothing unsharded, its reports
refused), never released below the ledger's guarantee.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, cast

import numpy as np
from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from privbandit.services.analyzer.auth import require_shuffler
from privbandit.services.analyzer.errors import BadContinuation
from privbandit.services.analyzer.transports.base import (
    AnalyzerKeys,
    Delivery,
    Fed,
    TaskDecoder,
    UploadJob,
    admit,
)
from privbandit.services.common.deps import get_runtime, task_dependency
from privbandit.services.common.web import error_responses, report_json_bytes
from privbandit.shared.core.policies import Policy
from privbandit.shared.core.policies.base import Scheduled, SumIngesting
from privbandit.shared.core.randomizers.base import NoiseShares
from privbandit.shared.crypto.hpke import CryptoError
from privbandit.shared.crypto.keystore import HpkeKeyStore
from privbandit.shared.crypto.prio3.batch import (
    aggregate_rows,
    decode_rows,
    helper_verify_init_rows,
    verifier_shares_to_message_rows,
)
from privbandit.shared.crypto.prio3.circuits import SumVec
from privbandit.shared.crypto.prio3.prio3 import HelperShare, VerifyError
from privbandit.shared.crypto.prio3_task import (
    HELPER_CIPHERTEXT_BYTES,
    PUBLIC_SHARE_BYTES,
    Continuation,
    TaskVdaf,
    continuation_key,
    nonces_digest,
    open_continuation,
    open_helper,
    seal_continuation,
    task_vdaf,
    verify_key,
)
from privbandit.shared.protocol.messages import b64decode, b64encode
from privbandit.shared.protocol.prio3 import (
    Prio3Aggregate,
    Prio3Config,
    Prio3VerifyRequest,
    Prio3VerifyResponse,
    Verdict,
    VerifyItem,
)
from privbandit.shared.settings import TaskConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AggregateJob(UploadJob[Prio3Aggregate]):
    """A ``Prio3Aggregate`` whose continuation opened and agrees with it: the helper's aggregate
    share and the refused count the continuation holds."""

    helper_share: bytes
    refused: int


@dataclass
class DecodedAggregate:
    """A verified batch: the sum of its ``count`` valid reports, their nonces, and how many of
    the batch were refused in verification (``rejected``)."""

    task: str
    batch_id: str
    stat: np.ndarray | None
    count: int
    ids: list[bytes]
    rejected: int
    quarantine: str | None = None

    @property
    def report_ids(self) -> Sequence[bytes]:
        return self.ids

    def feed(self, policy: Policy, known: set[bytes]) -> Fed:
        if self.quarantine is None and any(rid in known for rid in self.ids):
            # Verification refuses a nonce already counted; one counted meanwhile (two batches
            # with one nonce, which the shuffler's intake refuses) cannot be taken out of a sum.
            self.quarantine = "a valid report's nonce was counted meanwhile"
        if self.quarantine is not None:
            log.warning("task %s: prio3 batch %s quarantined, its %d valid reports refused (%s)",
                        self.task, self.batch_id, self.count, self.quarantine)
            return Fed(0, quarantined=self.count)
        if self.count == 0 or self.stat is None:
            return Fed(0)
        if not isinstance(policy, SumIngesting):  # the registry offers sums only to these
            raise TypeError(f"{policy.algo} cannot learn from batch sums")
        policy.ingest_statistic(self.stat, self.count)
        known.update(self.ids)
        return Fed(self.count, new_ids=list(self.ids))


@dataclass
class Prio3Decoder(TaskDecoder):
    """A task's Prio3 verification (``verify``) and aggregation (``accept``/``decode``)."""

    vdaf: TaskVdaf
    hpke: HpkeKeyStore
    # ddp-linucb: the valid reports a batch of l needs to carry the accountant's noise (⌈γ l⌉).
    honest_needed: Callable[[int], int] | None = None
    report_level: ClassVar[bool] = True
    delivery: ClassVar[Delivery] = Delivery(
        Prio3Aggregate, "aggregates of exactly l = {l} reports, got count = {n}",
        "it takes only Prio3 aggregates (POST /v1/tasks/{task}/prio3-aggregates)")

    @property
    def continuation_key(self) -> bytes:
        return continuation_key(self.hpke.private_key)

    def public_config(self) -> Prio3Config:
        """The task's Prio3 parameters (``GET /v1/tasks/{task}/secure-sum``)."""
        vd = self.vdaf
        valid = vd.vdaf.flp.valid
        assert isinstance(valid, SumVec)  # SumVecRanges is one too
        maxima = vd.encoding.maxima
        return Prio3Config(
            task=self.config.id,
            vdaf="Prio3SumVec" if maxima is None else "Prio3SumVecRanges",
            length=vd.length, max_value=vd.max_value,
            max_values=None if maxima is None else list(maxima),
            offsets=vd.entry_offsets, chunk_length=valid.chunk_length, proofs=vd.vdaf.PROOFS,
            noise_variance=vd.noise_variance,
            endpoint=f"/v1/tasks/{self.config.id}/prio3-reports")

    # -- verification ---------------------------------------------------------------------------

    def check_length(self, request: Prio3VerifyRequest) -> None:
        """422 ``batch_size_mismatch`` unless the request holds one of the schedule's l."""
        admit(self.config, request, Prio3VerifyRequest, lambda r: len(r.reports),
              "verification of exactly l = {l} reports, got {n}", self.delivery.hint)

    def verify(self, request: Prio3VerifyRequest, known: set[bytes], token: str
               ) -> Prio3VerifyResponse:
        """(Worker thread.) The verdicts on a batch and its continuation (module docstring).
        The reports are verified together (``shared.crypto.prio3.batch``: the same verdicts
        as verifying each alone, ``_verify_one``), a refused one alone."""
        vd, task = self.vdaf, self.config.id
        v = vd.vdaf
        key = verify_key(token, task)
        count = len(request.reports)
        reasons: list[str | None] = [None] * count
        seen: set[bytes] = set()
        live: list[int] = []
        nonces: list[bytes] = []
        publics: list[list[bytes]] = []
        helpers: list[HelperShare] = []
        leader_raw: list[bytes] = []
        for i, item in enumerate(request.reports):
            nonce = b64decode(item.nonce)
            if nonce in known:
                reasons[i] = "replayed_nonce"
                continue
            if nonce in seen:
                reasons[i] = "repeated_nonce"
                continue
            seen.add(nonce)
            try:
                public_bytes = b64decode(item.public_share)
                helper = open_helper(self.hpke.private_key, self.hpke.key_id, task, nonce,
                                     public_bytes, item.helper_share)
                public = v.decode_public_share(public_bytes)
            except CryptoError:
                reasons[i] = "bad_helper_share"
                continue
            except ValueError:
                reasons[i] = "malformed"
                continue
            assert public is not None  # SumVec uses joint randomness
            live.append(i)
            nonces.append(nonce)
            publics.append(public)
            helpers.append(helper)
            leader_raw.append(b64decode(item.verifier_share))
        messages = self._verify_rows(key, nonces, publics, helpers, leader_raw)
        accepted_rows: list[int] = []
        for row, (i, result) in enumerate(zip(live, messages[0], strict=True)):
            if isinstance(result, VerifyError):
                reasons[i] = "invalid_proof"
            elif isinstance(result, ValueError):
                reasons[i] = "malformed"
            else:
                accepted_rows.append(row)
        mask = np.zeros(len(live), dtype=bool)
        mask[accepted_rows] = True
        agg = aggregate_rows(v, messages[1], mask)
        verdicts: list[Verdict | None] = [None if r is None else Verdict(refused=r)
                                          for r in reasons]
        for row in accepted_rows:
            msg = messages[0][row]
            assert isinstance(msg, bytes)
            verdicts[live[row]] = Verdict(message=b64encode(msg))
        accepted = [nonces[row] for row in accepted_rows]
        refused = Counter(r for r in reasons if r is not None)
        if refused:
            log.warning("task %s batch %s: %d of %d reports refused in verification (%s)", task,
                        request.batch_id, count - len(accepted), count,
                        ", ".join(f"{k}: {n}" for k, n in sorted(refused.items())))
        sealed = seal_continuation(
            self.continuation_key, task, request.batch_id,
            Continuation(count, count - len(accepted), nonces_digest(accepted),
                         v.encode_agg_share(agg)),
        )
        final = [x for x in verdicts if x is not None]
        assert len(final) == count  # every report has its refusal or its message
        return Prio3VerifyResponse(batch_id=request.batch_id, verdicts=final,
                                   continuation=b64encode(sealed))

    def _verify_rows(
        self, key: bytes, nonces: list[bytes], publics: list[list[bytes]],
        helpers: list[HelperShare], leader_raw: list[bytes],
    ) -> tuple[list[bytes | ValueError], Any]:
        """For reports whose helper share opened: per report its verifier message or the error
        ``_verify_one`` raises from ``verify_init`` on (``ValueError``: malformed;
        ``VerifyError``: invalid proof), and the output shares (rows)."""
        vd = self.vdaf
        v, ctx = vd.vdaf, vd.ctx
        rows = len(nonces)
        bv = helper_verify_init_rows(v, key, ctx, 1, nonces, publics, helpers)
        vlen = v.field.ENCODED_SIZE * v.flp.VERIFIER_LEN * v.PROOFS
        part_len = v.xof.SEED_SIZE
        leader_mat, leader_ok = decode_rows(v.field, [b[:vlen] for b in leader_raw],
                                            v.flp.VERIFIER_LEN * v.PROOFS)
        leader_parts: list[bytes | None] = [b[vlen:] for b in leader_raw]
        errors: list[ValueError | None] = list(bv.errors)
        for i in range(rows):
            if errors[i] is None and (not leader_ok[i] or len(leader_raw[i]) != vlen + part_len):
                errors[i] = ValueError("verifier share of the wrong length or not in the field")
        # the corrected seed is joint_rand_seed(public share with the helper's part): reused
        # when the leader's part is the public share's (the honest case)
        known = [(p, s) if p is not None and s is not None else None
                 for p, s in zip(bv.seed_parts, bv.corrected_seeds, strict=True)]
        combined = verifier_shares_to_message_rows(
            v, ctx, [leader_mat, bv.verifiers], [leader_parts, bv.parts], known)
        out: list[bytes | ValueError] = []
        for i in range(rows):
            err = errors[i]
            msg = combined[i]
            if err is not None:
                out.append(err)
            elif isinstance(msg, ValueError):
                out.append(msg)
            elif msg != bv.corrected_seeds[i]:
                out.append(VerifyError("joint randomness check failed"))
            else:
                # the leader's check (see _verify_one): its seed is joint_rand_seed(leader part,
                # public helper part); equal inputs to the helper's message give the same seed
                leader_parts_i = [leader_parts[i] or b"", publics[i][1]]
                if leader_parts_i != [leader_parts[i], bv.parts[i]] and (
                        msg != v.joint_rand_seed(ctx, leader_parts_i)):
                    out.append(VerifyError("the public share's helper part is not the helper's"))
                else:
                    assert msg is not None
                    out.append(msg)
        return out, bv.out_shares

    def _verify_one(self, key: bytes, nonce: bytes, item: VerifyItem) -> tuple[Any, bytes]:
        """(Output share, verifier message) of a valid report; ``CryptoError``, ``VerifyError``
        or ``ValueError`` otherwise: the spec's single-report path, which ``verify`` gives the
        same verdicts as (tests/services/analyzer: the batch against this, report by report)."""
        vd = self.vdaf
        v, ctx = vd.vdaf, vd.ctx
        public_bytes = b64decode(item.public_share)
        helper = open_helper(self.hpke.private_key, self.hpke.key_id, self.config.id, nonce,
                             public_bytes, item.helper_share)
        public = v.decode_public_share(public_bytes)
        assert public is not None  # SumVec uses joint randomness
        state, own = v.verify_init(key, ctx, 1, nonce, public, helper)
        leader = v.decode_verifier_share(b64decode(item.verifier_share))
        message = v.verifier_shares_to_message(ctx, [leader, own])
        assert message is not None
        out = v.verify_next(state, message)
        # The leader's own check (its part and the helper's part from the public share): the
        # shuffler's verify_next must accept exactly what is accepted here.
        assert leader.joint_rand_part is not None
        if message != v.joint_rand_seed(ctx, [leader.joint_rand_part, public[1]]):
            raise VerifyError("the public share's helper part is not the helper's")
        return out, message

    # -- aggregation ----------------------------------------------------------------------------

    def accept(self, upload: BaseModel) -> AggregateJob:
        agg = cast("Prio3Aggregate", self.admit(upload))
        try:
            cont = open_continuation(self.continuation_key, self.config.id, agg.batch_id,
                                     b64decode(agg.continuation))
        except CryptoError as exc:
            raise BadContinuation(f"batch {agg.batch_id}: {exc}; nothing was counted") from exc
        nonces = [b64decode(n) for n in agg.accepted]
        if (cont.count != agg.count or cont.refused != agg.count - len(nonces)
                or cont.accepted_digest != nonces_digest(nonces)):
            raise BadContinuation(
                f"batch {agg.batch_id}: the aggregate's count or accepted reports differ from "
                "what the analyzer verified; nothing was counted")
        if len(b64decode(agg.agg_share)) != self.vdaf.agg_share_bytes:
            raise BadContinuation(f"batch {agg.batch_id}: the leader's aggregate share is not "
                                  f"{self.vdaf.agg_share_bytes} bytes; nothing was counted")
        return AggregateJob(agg, cont.agg_share, cont.refused)

    def weight(self, item: AggregateJob) -> int:
        return item.upload.count

    def decode(self, item: AggregateJob) -> DecodedAggregate:
        """The batch sum: ``unshard`` of the two aggregate shares (``ValueError``-free: both
        lengths were checked in ``accept``)."""
        vd, upload = self.vdaf, item.upload
        ids = [b64decode(n) for n in upload.accepted]
        n = len(ids)
        out = DecodedAggregate(self.config.id, upload.batch_id, None, n, ids, item.refused)
        need = self.honest_needed(upload.count) if self.honest_needed is not None else 0
        if n < need:
            out.quarantine = (f"{n} valid reports of {upload.count}, fewer than the ⌈γl⌉ = "
                              f"{need} whose noise shares the ledger counts on")
            return out
        if n:
            v = vd.vdaf
            shares = [v.decode_agg_share(b64decode(upload.agg_share)),
                      v.decode_agg_share(item.helper_share)]
            if vd.noise_variance > 0:
                # The analyzer's own noise, from the OS CSPRNG, on its share before unsharding:
                # what covers the shuffler, which sees the models and knows its own noise.
                # A decode that is not committed (a crash) is never published, so a fresh
                # draw on a retry releases nothing twice.
                noise = vd.noise_sampler().sample_vector(vd.length)
                shares[1] = vd.noisy_agg_share(shares[1], noise)
            out.stat = vd.statistic(v.unshard(shares, n), n)
        return out


def honest_needed(config: TaskConfig, policy: Policy) -> Callable[[int], int] | None:
    """ddp-linucb: ⌈γ l⌉ for a batch of length l (``SkellamRandomizer.honest`` of the
    randomizer sized for l); None for a policy without noise shares (sblb)."""
    def honest(randomizer: object) -> int | None:
        return randomizer.honest if isinstance(randomizer, NoiseShares) else None

    if isinstance(policy, Scheduled):
        if honest(policy.randomizer_for(config.schedule.size(0))) is None:
            return None
        return lambda l: int(cast(int, honest(policy.randomizer_for(l))))
    fixed = honest(policy.randomizer)
    return None if fixed is None else (lambda _l: fixed)


# The analyzer's runtime and a task's, as the route gets them (typed loosely: the runtime
# module imports this one).
RuntimeDep = Annotated[Any, Depends(get_runtime)]
TaskDep = Annotated[Any, Depends(task_dependency("analyzer"))]


async def prio3_verify(request: Prio3VerifyRequest, rt: TaskDep, runtime: RuntimeDep
                       ) -> Prio3VerifyResponse:
    """The verification exchange of one batch (module docstring)."""
    decoder = rt.decoder
    if not isinstance(decoder, Prio3Decoder):
        from privbandit.services.analyzer.transports.base import wrong_transport

        raise wrong_transport(rt.config, "it takes no Prio3 verification")
    decoder.check_length(request)
    nonces = [b64decode(item.nonce) for item in request.reports]
    known = await run_in_threadpool(runtime.store.known_report_ids, rt.id, nonces)
    return cast("Prio3VerifyResponse", await run_in_threadpool(
        decoder.verify, request, set(known), runtime.settings.shuffler_token or ""))


class Prio3Transport:
    """``prio3``: Prio3 reports verified jointly with the shuffler, the batch sum of the valid
    ones unsharded from the two aggregate shares."""

    name = "prio3"
    endpoint = "prio3-aggregates"
    upload: type[BaseModel] = Prio3Aggregate
    summary = (
        "The outcome of one verified Prio3 batch from the shuffler: l, the accepted nonces, the "
        "leader's aggregate share over them and the analyzer's continuation; idempotent on "
        "batch id. Refused reports are counted as rejected; a continuation that does not open "
        "or agree is 422 ``bad_continuation`` (nothing recorded)."
    )
    key_files: dict[str, str] = {}

    def add_routes(self, router: APIRouter) -> None:
        """``POST /v1/tasks/{task}/prio3-verify`` (the shuffler only)."""
        router.add_api_route(
            "/v1/tasks/{task}/prio3-verify", prio3_verify, methods=["POST"],
            description="The verification exchange of one Prio3 batch (shuffler only): a "
                        "verdict per report and the analyzer's sealed continuation.",
            responses=error_responses(401, 404, 409, 413, 422),
            dependencies=[Depends(require_shuffler)])

    def open_keys(self, keys: AnalyzerKeys) -> None:
        """Nothing beyond the HPKE key (helper shares are sealed to it)."""

    def decoder(self, config: TaskConfig, policy: Policy, keys: AnalyzerKeys) -> Prio3Decoder:
        return Prio3Decoder(config, task_vdaf(config), keys.keys,
                            honest_needed=honest_needed(config, policy))

    def max_body(self, config: TaskConfig) -> int:
        """The verification request of the longest batch: per report a nonce, public share,
        sealed helper share and verifier share (the aggregate is smaller)."""
        vd = task_vdaf(config)
        item = 16 + PUBLIC_SHARE_BYTES + HELPER_CIPHERTEXT_BYTES + 32 + vd.verifier_share_bytes
        return config.max_batch * report_json_bytes(item)
