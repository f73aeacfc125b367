"""A device client written from docs/protocol.md alone, with independent implementations only:
``pyhpke`` for HPKE (RFC 9180), plain integer arithmetic for Paillier, numpy and scipy for the
randomizers, the standard library for base64 and JSON. It imports nothing from this project, so a
wire change that breaks the document breaks the interop tests that use it."""

from __future__ import annotations

import base64
import math
import secrets

import numpy as np
from pyhpke import AEADId, CipherSuite, KDFId, KEMId
from scipy.optimize import brentq
from scipy.stats import norm

SUITE = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)
REPORT_ID_BYTES = 16


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def info(task: str, key_id: int, purpose: str = "") -> bytes:
    """protocol.md §HPKE: ``privbandit/v1|task=<task>|key=<key id>`` (``|tag`` for tags)."""
    return f"privbandit/v1|task={task}|key={key_id}{'|' + purpose if purpose else ''}".encode()


def seal(public_key: bytes, key_id: int, task: str, plaintext: bytes, purpose: str = "",
         eks: object | None = None) -> dict[str, object]:
    """One EncryptedReport: HPKE base mode, empty AAD, enc and ct as separate base64url fields."""
    pkr = SUITE.kem.deserialize_public_key(public_key)
    enc, sender = SUITE.create_sender_context(pkr, info(task, key_id, purpose), eks=eks)
    return {"key_id": key_id, "enc": b64e(enc), "ct": b64e(sender.seal(plaintext, b""))}


def open_sealed(
    private_key: bytes, key_id: int, task: str, report: dict, purpose: str = ""
) -> bytes:
    skr = SUITE.kem.deserialize_private_key(private_key)
    recipient = SUITE.create_recipient_context(
        b64d(report["enc"]), skr, info(task, key_id, purpose)
    )
    return recipient.open(b64d(report["ct"]), b"")


# ---------------------------------------------------------------------------------------------
# Randomizers (protocol.md §Report plaintexts)


def upper(x: np.ndarray) -> np.ndarray:
    """x_i x_j for i <= j, row-major (i = 0: j = 0..d-1; i = 1: j = 1..d-1; ...)."""
    d = x.shape[0]
    return np.array([x[i] * x[j] for i in range(d) for j in range(i, d)])


def analytic_gaussian_sigma(eps: float, delta: float, sensitivity: float) -> float:
    """Smallest σ with Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) ≤ δ (Balle–Wang 2018, Thm 8)."""

    def gap(log_sigma: float) -> float:
        s = math.exp(log_sigma)
        a = sensitivity / (2 * s) - eps * s / sensitivity
        b = -sensitivity / (2 * s) - eps * s / sensitivity
        return norm.cdf(a) - math.exp(eps) * norm.cdf(b) - delta

    return math.exp(brentq(gap, math.log(1e-6 * sensitivity), math.log(1e6 * sensitivity),
                           xtol=1e-14))


def gaussian_row(x: np.ndarray, r: float, eps: float, delta: float, L: float,
                 rng: np.random.Generator) -> bytes:
    """Zheng Alg. 5 as protocol.md states it: (upper(x xᵀ), r x) + N(0, σ²) per entry,
    σ the analytic Gaussian calibration at Δ = √(2L⁴ + 4L²); little-endian float64."""
    sigma = analytic_gaussian_sigma(eps, delta, math.sqrt(2 * L**4 + 4 * L**2))
    clean = np.concatenate([upper(x), r * x])
    return (clean + rng.normal(0.0, sigma, clean.shape)).astype("<f8").tobytes()


def identity_row(x: np.ndarray, r: float) -> bytes:
    """Central tasks: the raw (x, r), little-endian float64."""
    return np.concatenate([x, [r]]).astype("<f8").tobytes()


def report(public_key: bytes, key_id: int, task: str, row: bytes) -> tuple[bytes, dict]:
    """(report id, EncryptedReport): plaintext = 16 random bytes ‖ row."""
    report_id = secrets.token_bytes(REPORT_ID_BYTES)
    return report_id, seal(public_key, key_id, task, report_id + row)
