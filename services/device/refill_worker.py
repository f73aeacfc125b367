"""What a Paillier refill worker process runs besides the obfuscators themselves
(``shared.crypto.obfuscators``): its initializer, which lowers its priority and makes it leave
when its device dies. Started by ``services.device.transports.refiller.start_workers``.

A module of its own, importing only the standard library: a ``spawn``ed worker imports the
module of its initializer before its first task, and ``services.device.transports`` (the
refiller's package) imports the whole service — about a second of CPU per worker, per device
start, which this module spares.
"""

from __future__ import annotations

import os
import threading
import time

# How often a worker checks that its device still runs (seconds): an orphan lingers at most this.
PARENT_POLL = 1.0


def init_worker(nice: int, parent: int | None = None) -> None:
    """In each worker process: lower its priority, and leave when the device process dies.
    ``parent``: the device's pid as the device saw it when it started the pool. It must come
    from the device, not from ``os.getppid()`` here: a device killed while the worker was still
    starting has already been replaced as the parent (by init or a subreaper) when this runs,
    and a watch of that new parent would never end (orphans seen after kill -9s in the tests)."""
    os.nice(nice)
    threading.Thread(target=exit_with_parent,
                     args=(os.getppid() if parent is None else parent,),
                     name="parent-watch", daemon=True).start()


def exit_with_parent(parent: int) -> None:
    """Exit this process once ``parent`` is no longer its parent (it died: the orphan is
    re-parented to init or a subreaper). ``os._exit``: nothing of a worker needs cleaning up."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(0)
