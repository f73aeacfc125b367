"""The Paillier pool is refilled off the request path (issue 13): the obfuscators are computed in
a worker process of lower scheduling priority, not by the device's interpreter, and a worker
that dies is replaced by refilling in the device process; nothing is lost either way."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from phe import paillier

from privbandit.services.device.transports.refiller import (
    WORKER_NICE,
    start_refiller,
    start_workers,
)
from privbandit.shared.crypto.paillier import PaillierEncryptor, decrypt_sum
from tests.helpers import deadline, patience


@pytest.fixture(scope="module")
def keypair() -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    return paillier.generate_paillier_keypair(n_length=1024)


@pytest.fixture
def workers() -> Iterator[object]:
    pool = start_workers(1)
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def wait_for(check: object, timeout: float = 30.0) -> None:
    until = deadline(timeout)
    while not check():  # type: ignore[operator]
        assert time.monotonic() < until, "timed out"
        time.sleep(0.01)


@contextmanager
def refilling(keypair, workers, target: int) -> Iterator[tuple[PaillierEncryptor, object, object]]:
    """An encryptor whose pool a refiller keeps at ``target`` with the worker pool, full at
    entry; (encryptor, refiller, private key). The refiller is stopped (and checked) on exit."""
    pk, sk = keypair
    enc = PaillierEncryptor(pk.n)
    refiller = start_refiller(enc, target=target, chunk=2, workers=workers)
    try:
        wait_for(lambda: enc.pool_size == target)
        yield enc, refiller, sk
    finally:
        refiller.stop()
    assert not refiller.is_alive()


def test_the_pool_is_refilled_by_a_worker_process_of_lower_priority(keypair, workers) -> None:
    with refilling(keypair, workers, 6) as (enc, refiller, sk):
        worker = workers.submit(os.getpid).result()
        assert worker != os.getpid()
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, worker) >= min(19, mine + WORKER_NICE)
        assert decrypt_sum(sk, enc.encrypt([5, 6, 7], fallback=False)) == [5, 6, 7]
        wait_for(lambda: enc.pool_size == 6)  # refilled after the take
        assert refiller.computed == 9
        assert enc.fallbacks == 0


def test_a_dead_worker_leaves_the_refill_to_the_device_process(keypair, workers) -> None:
    with refilling(keypair, workers, 4) as (enc, refiller, sk):
        os.kill(workers.submit(os.getpid).result(), signal.SIGKILL)
        assert decrypt_sum(sk, enc.encrypt([1, 2, 3, 4], fallback=False)) == [1, 2, 3, 4]
        wait_for(lambda: enc.pool_size == 4)
        assert refiller.workers is None  # computing in its own thread now
        assert decrypt_sum(sk, enc.encrypt([9] * 4, fallback=False)) == [9] * 4


ORPHAN_PROBE = """
import os, sys, time
from privbandit.services.device.transports.refiller import start_workers
pool = start_workers(2)
pids = {pool.submit(os.getpid).result() for _ in range(20)}
print(" ".join(map(str, sorted(pids))), flush=True)
time.sleep(600)
"""


def test_workers_exit_when_their_device_is_killed() -> None:
    """kill -9 of the process that owns the pool (as a crashed device): its worker processes,
    which no shutdown reached, leave by themselves (issue 26 item 6b)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", ORPHAN_PROBE], stdout=subprocess.PIPE,
                            text=True, cwd=os.getcwd())
    try:
        assert proc.stdout is not None
        workers = [int(pid) for pid in proc.stdout.readline().split()]
        assert workers and proc.pid not in workers
        for pid in workers:
            os.kill(pid, 0)  # alive while their device is
    finally:
        proc.kill()
        proc.wait()

    def gone() -> bool:
        for pid in workers:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            # A zombie awaiting its reaper has exited too.
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    return False
        return True

    wait_for(gone)


# A device run as ``python -m services.device``: ``spawn`` starts each worker by running that
# main module again (as ``__mp_main__``), then imports the initializer's module, then the task's.
SPAWN_PROBE = """
import importlib, json, sys
sys.modules["__main__"] = importlib.import_module("privbandit.services.device.__main__")
from privbandit.services.device.transports.refiller import start_workers
pool = start_workers(1)
print(json.dumps(pool.submit(eval, "sorted(__import__('sys').modules)").result()), flush=True)
pool.shutdown()
"""


def test_a_worker_of_a_device_run_as_a_module_imports_none_of_the_service() -> None:
    """The worker of a device started as ``python -m services.device`` re-runs the device's
    main module and imports its initializer's: neither may pull in the service (the app,
    FastAPI, numpy, the transports), which cost about a second of CPU per device start."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", SPAWN_PROBE], capture_output=True, text=True,
                          cwd=os.getcwd(), timeout=patience(60), check=False)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stdout))
    assert "__mp_main__" in modules  # the device's main module was run again, as spawn does
    assert "privbandit.services.device.refill_worker" in modules
    heavy = {"privbandit.services.device.app", "privbandit.services.device.transports",
             "fastapi", "numpy", "privbandit.shared.settings"}
    assert not heavy & modules, sorted(heavy & modules)


def test_a_worker_started_after_its_device_died_leaves() -> None:
    """The race that left orphans: the device is killed while a worker is still starting, so by
    the time the initializer runs the worker's parent is already init (or a subreaper). The
    initializer watches the pid the device gave it, not whoever is the parent then, and leaves
    at once; with ``os.getppid()`` taken in the worker it would watch init for ever."""
    import subprocess
    import sys

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that is nobody's parent any more
    code = ("import time\n"
            "from privbandit.services.device.refill_worker import init_worker\n"
            f"init_worker(0, parent={gone.pid})\n"
            "time.sleep(600)\n")
    done = subprocess.run([sys.executable, "-c", code], timeout=patience(60), check=False)
    assert done.returncode == 0  # os._exit(0) from the watch, long before the sleep ends
