"""One group-commit loop for the three services.

Requests that must be durable before they are answered (a shuffler 202, a device 202, an analyzer
batch ack) are queued; one worker takes everything waiting (up to ``max_items`` items or
``max_weight`` units of work) and hands the group to ``commit``, which runs in a worker thread and
writes the whole group in one transaction — one fsync for all of them. Each submitter then gets
its own outcome: ``commit`` returns one value per item, and an exception instance in that list
fails that item alone; an exception raised by ``commit`` itself fails the whole group.

A submitter that goes away (its request cancelled) cancels only its own wait: its item stays in
the queue or the group and is committed all the same, and nobody is answered for it. ``stop()``
lets the group in progress finish and fails what is still queued with ``ShuttingDown``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Generic, TypeAlias, TypeVar

import anyio.to_thread

from privbandit.services.common.errors import Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# One item's outcome: its value, or the exception that fails that item alone.
Outcome: TypeAlias = R | BaseException


class ShuttingDown(Unavailable):
    """The service stopped before the item could be committed (nothing of it was stored): a
    503 ``unavailable`` if it reaches a client, who retries."""


class GroupCommitter(Generic[T, R]):
    """Coalesces submitted items into groups committed together in a worker thread.

    ``commit(items)`` → one outcome per item (a value, or an exception for that item alone).
    ``after(items, outcomes)`` runs on the event loop after every group, also when ``commit``
    raised (then every outcome is that exception): metrics, publishing, waking other loops.
    ``weight(item)`` is an item's share of ``max_weight`` (default 1 per item).

    ``in_loop``: run ``commit`` on the event loop's thread instead of a worker thread, for a
    store whose groups are small and cheap apart from the fsync (the device's). No request
    then waits for a thread hand-off per statement and for the GIL to come back from a worker,
    which under load cost more CPU and latency than the fsync itself (docs/benchmarks/
    load.md: decide). ``sync``: what makes an ``in_loop`` commit durable (an fsync), run in a worker
    thread after ``commit`` returns and before any submitter of the group is answered; the loop
    serves requests meanwhile, and what they submit forms the next group. One thread hand-off
    per group, not per statement. If ``sync`` raises, every item of the group fails with it
    (its writes may not be on disk).
    """

    def __init__(
        self,
        name: str,
        commit: Callable[[list[T]], Sequence[Outcome[R]]],
        *,
        max_items: int = 256,
        max_weight: int | None = None,
        weight: Callable[[T], int] | None = None,
        after: Callable[[list[T], list[Outcome[R]]], None] | None = None,
        in_loop: bool = False,
        sync: Callable[[], None] | None = None,
    ) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        if sync is not None and not in_loop:
            raise ValueError("sync is for an in_loop committer (a threaded commit syncs itself)")
        self.name = name
        self._commit = commit
        self._after = after
        self._weight = weight or (lambda _: 1)
        self.max_items = max_items
        self.max_weight = max_weight
        self.in_loop = in_loop
        self._sync = sync
        # None is the stop sentinel.
        self._queue: asyncio.Queue[tuple[T, asyncio.Future[R]] | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._stopping

    def queued(self) -> int:
        """Items waiting for a group (not counting the group being committed)."""
        return self._queue.qsize()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"group-commit-{self.name}")

    async def stop(self) -> None:
        """Finish the group in progress (its submitters get their answers), then fail anything
        still queued with ``ShuttingDown``."""
        if self._task is None:
            return
        self._stopping = True
        self._queue.put_nowait(None)
        await self._task
        self._task = None
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and not item[1].done():
                item[1].set_exception(ShuttingDown(f"{self.name}: shutting down"))
                item[1].exception()  # retrieved (see ``_commit_group``)

    async def submit(self, item: T) -> R:
        """The item's committed outcome (its exception is raised here)."""
        if not self.running:
            raise ShuttingDown(f"{self.name}: not accepting work")
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((item, fut))
        # No ``asyncio.shield``: cancelling this wait cancels ``fut`` only, never the commit
        # (``_commit_group`` skips a future that is done). One future and one wake-up per item.
        return await fut

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            if first is None:
                return
            group = [first]
            load = self._weight(first[0])
            while len(group) < self.max_items and not self._queue.empty():
                if self.max_weight is not None and load >= self.max_weight:
                    break
                nxt = self._queue.get_nowait()
                if nxt is None:
                    self._queue.put_nowait(None)  # stop after this group
                    break
                group.append(nxt)
                load += self._weight(nxt[0])
            await self._commit_group(group)

    async def _commit_group(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        items = [item for item, _ in group]
        outcomes: list[Outcome[R]]
        try:
            if self.in_loop:
                outcomes = list(self._commit(items))
                if self._sync is not None:
                    await anyio.to_thread.run_sync(self._sync)
            else:
                # Not abandoned on cancellation: shutdown waits for a commit in progress.
                outcomes = list(await anyio.to_thread.run_sync(self._commit, items))
            if len(outcomes) != len(items):
                raise RuntimeError(f"{self.name}: commit returned {len(outcomes)} outcomes "
                                   f"for {len(items)} items")
        except Exception as exc:
            log.exception("%s: group commit of %d item(s) failed", self.name, len(items))
            outcomes = [exc] * len(items)
        if self._after is not None:
            try:
                self._after(items, outcomes)
            except Exception:
                log.exception("%s: after-commit hook failed", self.name)
        for (_, fut), outcome in zip(group, outcomes, strict=True):
            if fut.done():
                continue
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
                # Marked retrieved: a submitter cancelled after this point never reads it, and
                # that is no error worth a "never retrieved" log line.
                fut.exception()
            else:
                fut.set_result(outcome)
