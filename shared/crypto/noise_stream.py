"""The shuffler's noise bits for one batch: a keyed stream, so a batch delivered twice carries
the same noise (issue 40).

With ``noise = "aggregators"`` the shuffler adds Skellam noise to its aggregate share of every
batch. A delivery can be attempted several times (a lost acknowledgement, a restart after
kill -9, a replica taking over), and the analyzer sees every attempt's aggregate share even when
it counts only one: fresh noise per attempt would hand it several independent draws on the same
sum, whose average carries less noise than the ledger states. So the shuffler draws a batch's
noise from a stream that is a function of a secret only it holds and of (task, batch id):

    key_b = HMAC-SHA256(K, "privbandit/aggregator-noise|" ‖ task ‖ "|" ‖ batch id)
    bits  = AES-256-CTR(key_b, counter 0) applied to zeros

K is 32 bytes from the OS CSPRNG in the shuffler's data directory (``noise.key``, mode 0600;
replicas of one deployment share the directory, so they draw the same noise). AES-CTR under a
uniformly random key is a standard pseudorandom generator (NIST SP 800-90A's CTR_DRBG is built
on it); without K the stream is indistinguishable from uniform bits, so the noise is, to the
analyzer, exactly the Skellam law the exact sampler produces from uniform bits.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from privbandit.shared.crypto.key_files import KeyFile

NOISE_KEY_FILE = "noise.key"
NOISE_KEY_BYTES = 32
_DOMAIN = b"privbandit/aggregator-noise|"


def load_noise_key(directory: Path) -> bytes:
    """The shuffler's noise key in ``directory``, created (from the OS CSPRNG) on first use."""
    key = KeyFile(Path(directory) / NOISE_KEY_FILE, "noise").read(
        lambda: os.urandom(NOISE_KEY_BYTES))
    if len(key) != NOISE_KEY_BYTES:
        raise ValueError(f"{Path(directory) / NOISE_KEY_FILE}: a noise key is "
                         f"{NOISE_KEY_BYTES} bytes, this file holds {len(key)}")
    return key


class KeyedBits:
    """``randbits(k)`` from the AES-256-CTR stream of one (task, batch id) under the key."""

    def __init__(self, key: bytes, task: str, batch_id: str) -> None:
        if len(key) != NOISE_KEY_BYTES:
            raise ValueError(f"a noise key is {NOISE_KEY_BYTES} bytes")
        label = _DOMAIN + task.encode("utf-8") + b"|" + batch_id.encode("utf-8")
        batch_key = hmac.new(key, label, hashlib.sha256).digest()
        self._enc = Cipher(algorithms.AES(batch_key), modes.CTR(bytes(16))).encryptor()

    def randbits(self, k: int) -> int:
        if k < 0:
            raise ValueError("k must be non-negative")
        if k == 0:
            return 0
        nbytes = (k + 7) // 8
        value = int.from_bytes(self._enc.update(bytes(nbytes)), "big")
        return value >> (8 * nbytes - k)
