"""The device's background refill of Paillier randomness (r^n mod n², off the request path).

One thread per Paillier key (``PoolRefiller``) keeps the encryptor's pool at its target. It
does not compute the obfuscators itself when it is given a worker pool (``start_workers``, the
device's default): each chunk is computed by ``shared.crypto.obfuscators.obfuscators`` in a
separate process started with ``spawn`` (it imports only ``gmpy2``), at a lower scheduling
priority (``os.nice(WORKER_NICE)``), so the exponentiations neither hold this interpreter nor
take a core from the request path when it needs one; the refill then uses the CPU the requests
leave idle. Without workers (``device_timing.paillier_workers = 0``), or if the worker process
dies, the thread computes them itself (gmpy2 releases the GIL meanwhile).

Costs, at 2048 bits on the development machine (docs/benchmarks/secure-sum.md): ~8 ms of CPU per
obfuscator either way, plus ~0.1 ms to move it between processes (512 bytes); one worker process of
about 20 MB, started in the background in ~0.2 s when the first key arrives.

A worker exits when its device does, however the device ends (issue 26 item 6b): a ``kill -9``
gives the pool no chance to shut its workers down, so each worker watches its parent process
(``_exit_with_parent``) and leaves once it is gone, instead of living on under init.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import gmpy2

from privbandit.services.device.refill_worker import init_worker
from privbandit.shared.crypto.obfuscators import obfuscators
from privbandit.shared.crypto.paillier import PaillierEncryptor

log = logging.getLogger(__name__)

# Niceness of the worker processes: the request path (niceness 0) wins a contested core.
WORKER_NICE = 10


def start_workers(n: int) -> ProcessPoolExecutor:
    """``n`` worker processes for the refillers of all keys (spawned when first used); their
    initializer lives in a module that imports nothing of the service
    (``services.device.refill_worker``)."""
    return ProcessPoolExecutor(
        max_workers=n,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_worker,
        initargs=(WORKER_NICE, os.getpid()),
    )


def start_refiller(
    encryptor: PaillierEncryptor,
    target: int,
    chunk: int = 8,
    workers: ProcessPoolExecutor | None = None,
) -> PoolRefiller:
    """Start a daemon thread keeping about ``target`` obfuscators in the encryptor's pool,
    computed by ``workers`` if given."""
    refiller = PoolRefiller(encryptor, target, chunk, workers)
    refiller.start()
    return refiller


class PoolRefiller(threading.Thread):
    """Background thread that tops the encryptor's pool up to ``target``, ``chunk`` at a time.

    With ``workers`` the chunks are computed in a worker process; otherwise here, with gmpy2's
    ``allow_release_gil`` (a thread-local context), so the exponentiations do not hold the
    interpreter lock while a request encrypts on another thread. ``computed`` counts the
    obfuscators added."""

    def __init__(
        self,
        encryptor: PaillierEncryptor,
        target: int,
        chunk: int = 8,
        workers: ProcessPoolExecutor | None = None,
    ) -> None:
        super().__init__(name="paillier-refiller", daemon=True)
        if target < 1 or chunk < 1:
            raise ValueError("target and chunk must be >= 1")
        self.encryptor, self.target, self.chunk = encryptor, target, chunk
        self.workers = workers
        self.computed = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        enc = self.encryptor
        with gmpy2.context(allow_release_gil=True):
            while not self._stop_event.is_set():
                missing = self.target - enc.pool_size
                if missing > 0:
                    self._refill(min(self.chunk, missing))
                    continue
                enc.clear_wanted()
                # Re-check after clearing so a take between the size check and clear() is seen.
                if enc.pool_size >= self.target:
                    enc.wait_wanted(1.0)

    def _refill(self, k: int) -> None:
        enc = self.encryptor
        if self.workers is not None:
            try:
                fresh = self.workers.submit(obfuscators, int(enc.n), k).result()
            except (BrokenProcessPool, RuntimeError) as exc:  # RuntimeError: shut down
                if self._stop_event.is_set():
                    return
                log.warning("Paillier worker process failed (%s); refilling in the device "
                            "process instead", exc)
                self.workers = None
            else:
                enc.add(fresh)
                self.computed += k
                return
        enc.refill(k)
        self.computed += k

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop_event.set()
        self.encryptor.wake()
        self.join(timeout)
