"""The device's background refill of Paillier randomness (r^n mod n², off the request path)."""

from __future__ import annotations

import threading

import gmpy2

from shared.crypto.paillier import PaillierEncryptor


def start_refiller(encryptor: PaillierEncryptor, target: int, chunk: int = 8) -> PoolRefiller:
    """Start a daemon thread keeping about ``target`` obfuscators in the encryptor's pool."""
    refiller = PoolRefiller(encryptor, target, chunk)
    refiller.start()
    return refiller


class PoolRefiller(threading.Thread):
    """Background thread that tops the encryptor's pool up to ``target``, ``chunk`` at a time.

    It runs gmpy2 with ``allow_release_gil`` (a thread-local context), so the exponentiations do
    not hold the interpreter lock while a request encrypts on another thread."""

    def __init__(self, encryptor: PaillierEncryptor, target: int, chunk: int = 8) -> None:
        super().__init__(name="paillier-refiller", daemon=True)
        if target < 1 or chunk < 1:
            raise ValueError("target and chunk must be >= 1")
        self.encryptor, self.target, self.chunk = encryptor, target, chunk
        self._stop_event = threading.Event()

    def run(self) -> None:
        enc = self.encryptor
        with gmpy2.context(allow_release_gil=True):
            while not self._stop_event.is_set():
                missing = self.target - enc.pool_size
                if missing > 0:
                    enc.refill(min(self.chunk, missing))
                    continue
                enc.clear_wanted()
                # Re-check after clearing so a take between the size check and clear() is seen.
                if enc.pool_size >= self.target:
                    enc.wait_wanted(1.0)

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop_event.set()
        self.encryptor.wake()
        self.join(timeout)
