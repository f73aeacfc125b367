"""Returning users on the device (issue 24): who the person is, and her bound.

**Who**: a feedback names its person with an opaque ``user`` key chosen by the client (the app
on the person's device, or the simulated users of the demo); one device service serves many
persons, so "the device is the person" would not bound anyone. The key never leaves the device
in any form: it is not in a report, an id, a log line or a metric; the store keeps only
HMAC-SHA256(person_key, task ‖ 0 ‖ user), under a key of the store itself
(``DeviceStore.person_key``), so its file does not list user keys either. ``decide`` takes no
key: a decision costs the person nothing (it is served from the cached model and nothing of it
leaves the device), only a report does.

**The bound**: a task with ``contributions = {k, period_seconds}`` queues at most k reports per
person and period (fixed windows counted from the Unix epoch; no period: k in all). A feedback
beyond it is accepted and answered (``withheld: true``), its decision recorded as used, and its
report dropped before it is stored (``DeviceStore.complete_feedback``).

**Which feedbacks are kept: the first k of each period.** Each report leaves as soon as it is
made, so the learner is not delayed and the bound holds under any crash with nothing held back;
a uniformly random k (reservoir sampling) would keep the data unbiased with respect to when in
the period a person gives feedback, but must hold up to k sealed reports until the period ends —
forever, for a bound without a period — which delays learning by a period and keeps reports on
the device. The price of the first k: a person's later feedbacks in a period are not learned
from, so a task whose rewards drift within a period sees its early part. That is the choice,
stated in ``docs/protocol.md``.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from privbandit.services.device.errors import MissingUser
from privbandit.services.device.store import PersonSlot
from privbandit.shared.settings import TaskConfig


def period_of(period_seconds: int | None, now: float) -> int:
    """The period ``now`` falls in: ⌊now / length⌋, or 0 for a bound without a period."""
    return 0 if period_seconds is None else int(now // period_seconds)


def person_name(key: bytes, task: str, user: str) -> bytes:
    """The person's name in the store: HMAC-SHA256 of the task and her user key."""
    return hmac.new(key, task.encode() + b"\0" + user.encode(), hashlib.sha256).digest()


def slot_for(cfg: TaskConfig, key: bytes, user: str | None,
             now: float | None = None) -> PersonSlot | None:
    """Where a feedback counts: None for a task without a bound (a user key is then ignored);
    ``MissingUser`` (422) for a bounded task's feedback without one."""
    bound = cfg.contributions
    if bound is None:
        return None
    if user is None:
        raise MissingUser(f"task {cfg.id} bounds each person to {bound.k} reports per "
                          f"{bound.period}: the feedback needs the person's user key")
    when = time.time() if now is None else now
    return PersonSlot(person_name(key, cfg.id, user), period_of(bound.period_seconds, when),
                      bound.k)
