"""The shuffler's side of the ``prio3`` transport (docs/prio3.md, issue 23): the shuffler is
the Prio3 leader (aggregator 0), the analyzer the helper (aggregator 1).

Intake (``check``): each report's helper share must be sealed to the analyzer's HPKE key (key
id, encapsulated key, the one length), its leader share must decode to the task's number of
field elements. A report whose nonce the shuffler already holds is a duplicate
(``Candidate.prio3``: the nonce is in the ``seen`` entries), whatever its shares.

Delivery (``load``, worker thread, before every attempt): for a formed batch of l, in its CSPRNG
order,

1. ``verify_init`` as aggregator 0 on every member (the task's verification key is derived from
   the shuffler token, ``shared.crypto.prio3_task.verify_key``; devices never hold it);
2. ONE exchange with the analyzer, ``POST /v1/tasks/{task}/prio3-verify`` (bearer token, like
   every delivery): nonce, public share, sealed helper share and the leader's verifier share of
   each member, never its leader share; the answer is a verdict per member and the analyzer's
   sealed continuation;
3. ``verify_next`` with the verifier message of each accepted member (a mismatch means the two
   aggregators disagree: the batch is retried, loudly), the sum of their output shares;
4. the delivery: ``Prio3Aggregate`` — l, the accepted nonces, the leader's aggregate share over
   exactly them (for ``ddp-linucb`` with the noise added by the aggregators, plus the
   shuffler's Skellam noise, drawn from a keyed stream of (task, batch id) so that every attempt
   carries the same noise: ``shared.crypto.noise_stream``), the continuation — to
   ``POST /v1/tasks/{task}/prio3-aggregates``.

Nothing of the exchange is stored: verification is deterministic, so a retry (or a restart
after kill -9) verifies again and forwards the same aggregate; the analyzer counts a batch id
once (its ingest pipeline), and a nonce once (its verification refuses a nonce already counted).
The shuffler never forwards a member's leader share or output share: only the aggregate of a
whole batch of the task's schedule, which leaks no single report (batches never overlap).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import anyio.from_thread
import anyio.to_thread
import httpx
from pydantic import ValidationError

from privbandit.services.shuffler.errors import BadShare, VerifyUnavailable
from privbandit.services.shuffler.hpke import HpkeState, Refresh
from privbandit.services.shuffler.transports.base import (
    Context,
    Delivery,
    Reports,
    TransportBase,
    UploadRoute,
    upload_limit,
)
from privbandit.shared.crypto.noise_stream import KeyedBits, load_noise_key
from privbandit.shared.crypto.prio3.batch import encode_rows, leader_verify_init_rows
from privbandit.shared.crypto.prio3.prio3 import VerifyError
from privbandit.shared.crypto.prio3_task import (
    HELPER_CIPHERTEXT_BYTES,
    PUBLIC_SHARE_BYTES,
    TaskVdaf,
    task_vdaf,
    verify_key,
)
from privbandit.shared.protocol.messages import b64decode, b64encode
from privbandit.shared.protocol.prio3 import (
    Prio3Aggregate,
    Prio3Report,
    Prio3Upload,
    Prio3VerifyRequest,
    Prio3VerifyResponse,
    VerifyItem,
)
from privbandit.shared.settings import TaskConfig

log = logging.getLogger(__name__)

# The JSON of one report beyond its leader share: nonce, public share, sealed helper share and
# field names (bounded generously, like ``report_json_bytes``).
_REPORT_EXTRA_BYTES = 16 + PUBLIC_SHARE_BYTES + HELPER_CIPHERTEXT_BYTES + 32 + 256


def leader_verify(
    vd: TaskVdaf, key: bytes, batch_id: str, reports: Sequence[Prio3Report]
) -> tuple[Prio3VerifyRequest, list[Any]]:
    """Step 1: the verification request of a batch and the leader's verify states — the
    members verified together (``shared.crypto.prio3.batch``: the same verifier shares and
    states as ``verify_init`` on each alone). A member that ``verify_init`` refuses (its leader
    share was checked at intake, so only a test point that is a root of unity, probability
    ~2^-124) raises its ``ValueError``, as the single-report path does."""
    v = vd.vdaf
    nonces = [b64decode(r.nonce) for r in reports]
    publics = [v.decode_public_share(b64decode(r.public_share)) for r in reports]
    bv = leader_verify_init_rows(v, key, vd.ctx, nonces, publics,
                                 [b64decode(r.leader_share) for r in reports])
    for err in bv.errors:
        if err is not None:
            raise err
    encoded = encode_rows(v.field, bv.verifiers)
    items = [VerifyItem(nonce=r.nonce, public_share=r.public_share, helper_share=r.helper_share,
                        verifier_share=b64encode(enc + (part or b"")))
             for r, enc, part in zip(reports, encoded, bv.parts, strict=True)]
    states = [bv.state(i) for i in range(len(reports))]
    return Prio3VerifyRequest(batch_id=batch_id, reports=items), states


def leader_aggregate(
    vd: TaskVdaf, batch_id: str, count: int, reports: Sequence[Prio3Report], states: list[Any],
    answer: Prio3VerifyResponse, noise: Sequence[int] | None = None,
) -> Prio3Aggregate:
    """Steps 3–4: ``verify_next`` on each accepted member and the leader's aggregate share,
    with the shuffler's noise added when the task's aggregators add it (``noise``);
    ``VerifyUnavailable`` if the answer does not fit the batch or the aggregators disagree."""
    v = vd.vdaf
    if answer.batch_id != batch_id or len(answer.verdicts) != len(reports):
        raise VerifyUnavailable(f"batch {batch_id}: the analyzer's verdicts do not fit the batch")
    outs = []
    accepted = []
    for r, state, verdict in zip(reports, states, answer.verdicts, strict=True):
        if verdict.message is None:
            continue
        try:
            out = v.verify_next(state, v.decode_verifier_message(b64decode(verdict.message)))
        except (VerifyError, ValueError) as exc:
            # The analyzer accepted what the leader's joint randomness contradicts: never
            # aggregate it; the deployment needs a look (the analyzer checks this too).
            raise VerifyUnavailable(
                f"batch {batch_id}: the analyzer accepted report {r.nonce} whose joint "
                f"randomness the leader rejects ({exc})"
            ) from exc
        outs.append(out)
        accepted.append(r.nonce)
    agg = v.aggregate(outs)  # Σ of the output shares, one vectorised sum
    if noise is not None:
        agg = vd.noisy_agg_share(agg, noise)
    return Prio3Aggregate(batch_id=batch_id, count=count, accepted=accepted,
                          agg_share=b64encode(v.encode_agg_share(agg)),
                          continuation=answer.continuation)


class Prio3Transport(TransportBase):
    """Prio3 reports in; per batch of exactly l, one verification exchange and the leader's
    aggregate share over the valid members out. It needs the analyzer's HPKE config only (the
    helper shares are sealed to it); delivery starts at once (the verification key is derived,
    the analyzer is asked per batch), and a refused delivery leaves nothing to look at again (the
    next attempt verifies anew)."""

    name: ClassVar[str] = "prio3"
    route: ClassVar[UploadRoute] = UploadRoute(
        "prio3-reports", Prio3Upload, "Prio3 reports (Prio3Upload)",
        "Accept Prio3 reports of a secure-sum task (leader share, helper share sealed to the "
        "analyzer, public share, nonce); 202 only once they are durable. A nonce already held "
        "is a duplicate. Each batch of l is verified jointly with the analyzer and released "
        "only as the leader's aggregate share over its valid reports.")
    # Verified again before every attempt (nothing of the exchange is stored).
    reload: ClassVar[bool] = True

    def __init__(self, tasks: list[TaskConfig], context: Context) -> None:
        super().__init__(tasks, context)
        self.vdafs = {t.id: task_vdaf(t) for t in tasks}
        settings = context.settings
        if tasks and (settings is None or context.analyzer is None):
            raise ValueError("the prio3 transport needs the analyzer client and settings")
        self._keys = ({t: verify_key(settings.shuffler_token or "", t) for t in self.tasks}
                      if settings is not None and tasks else {})
        self._limit = max((upload_limit(v.leader_share_bytes + _REPORT_EXTRA_BYTES)
                           for v in self.vdafs.values()), default=0)
        # The shuffler's own noise (ddp-linucb with noise by the aggregators): a key only it
        # holds, so a batch's noise is the same at every attempt (shared.crypto.noise_stream).
        self._noise_key: bytes | None = None
        if any(v.noise_variance > 0 for v in self.vdafs.values()):
            if context.cache_dir is None:
                raise ValueError("the prio3 transport's aggregator noise needs the shuffler's "
                                 "data directory (its noise key)")
            self._noise_key = load_noise_key(context.cache_dir)

    def batch_noise(self, task: str, batch_id: str) -> list[int] | None:
        """The shuffler's Skellam noise for this batch (None where the task has none): exact
        samples from the batch's keyed stream, the same at every attempt."""
        vd = self.vdafs[task]
        if vd.noise_variance <= 0 or self._noise_key is None:
            return None
        sampler = vd.noise_sampler(KeyedBits(self._noise_key, task, batch_id).randbits)
        return sampler.sample_vector(vd.length)

    @staticmethod
    def ct_bytes(config: TaskConfig) -> int:
        """0: no HPKE report of one fixed length (the sealed helper share is checked apart)."""
        return 0

    async def check(self, task: str, reports: Reports, hpke: HpkeState, refresh: Refresh
                    ) -> None:
        prio = cast("Sequence[Prio3Report]", reports)
        await hpke.check_sealed(
            task, [(f"reports[{i}].helper_share", r.helper_share) for i, r in enumerate(prio)],
            HELPER_CIPHERTEXT_BYTES, refresh)
        # CPU (base64 and field decoding of every leader share): off the event loop.
        await anyio.to_thread.run_sync(self.check_shares, task, prio)

    def check_shares(self, task: str, reports: Sequence[Prio3Report]) -> None:
        """``BadShare`` for the first report whose leader share is not ``MEAS_LEN + PROOF_LEN``
        field elements (each below p) and a blind; nothing of the upload is stored then. What
        such a share proves is the verification's business, report by report."""
        vd = self.vdafs[task]
        for i, r in enumerate(reports):
            try:
                vd.vdaf.decode_input_share(0, b64decode(r.leader_share))
            except ValueError as exc:
                raise BadShare(
                    f"reports[{i}]: {exc} (task {task!r} takes a leader share of "
                    f"{vd.leader_share_bytes} bytes); no report was stored"
                ) from exc

    def load(self, task: str, batch_id: str) -> Delivery | None:
        """(Worker thread.) Verify the batch with the analyzer and form its aggregate (module
        docstring); None if it was acknowledged meanwhile."""
        batch = self.context.store.load_secure_batch(batch_id)
        if batch is None:
            return None
        if len(batch.members) != batch.size:
            raise VerifyUnavailable(
                f"batch {batch_id} has {len(batch.members)} stored members, not {batch.size}")
        try:
            reports = [Prio3Report.model_validate_json(ct) for _, ct, _ in batch.members]
        except ValidationError as exc:
            raise VerifyUnavailable(f"batch {batch_id}: a stored report does not parse") from exc
        vd = self.vdafs[task]
        request, states = leader_verify(vd, self._keys[task], batch_id, reports)
        answer = anyio.from_thread.run(self._exchange, task, request)
        aggregate = leader_aggregate(vd, batch_id, batch.size, reports, states, answer,
                                     self.batch_noise(task, batch_id))
        refused = batch.size - len(aggregate.accepted)
        if refused:
            log.warning("task %s batch %s: %d of %d reports failed verification (refused)",
                        task, batch_id, refused, batch.size)
        return Delivery(batch_id, task, f"/v1/tasks/{task}/prio3-aggregates",
                        aggregate.model_dump_json())

    async def _exchange(self, task: str, request: Prio3VerifyRequest) -> Prio3VerifyResponse:
        """(Event loop.) The verification exchange of one batch."""
        client, settings = self.context.analyzer, self.context.settings
        assert client is not None and settings is not None
        try:
            resp = await client.post(
                f"/v1/tasks/{task}/prio3-verify", content=request.model_dump_json(),
                headers={"Authorization": f"Bearer {settings.shuffler_token}",
                         "Content-Type": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise VerifyUnavailable(f"verification of batch {request.batch_id}: "
                                    f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise VerifyUnavailable(f"verification of batch {request.batch_id}: HTTP "
                                    f"{resp.status_code} {resp.text[:200]}")
        try:
            return Prio3VerifyResponse.model_validate_json(resp.content)
        except ValidationError as exc:
            raise VerifyUnavailable(f"verification of batch {request.batch_id}: the answer "
                                    "is not a Prio3VerifyResponse") from exc
