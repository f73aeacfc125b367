"""HPKE interop both ways: reports sealed by pyhpke as docs/protocol.md describes open with the
analyzer's code, and the project's reports open with pyhpke; the independent Gaussian calibration
agrees with the project's."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privbandit.shared.core.randomizers.gaussian import GaussianRandomizer
from privbandit.shared.crypto.hpke import open_report, seal
from privbandit.shared.protocol.messages import EncryptedReport
from tests.interop import client


@pytest.fixture
def key() -> tuple[X25519PrivateKey, bytes, bytes]:
    sk = X25519PrivateKey.generate()
    raw_sk = sk.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                              serialization.NoEncryption())
    raw_pk = sk.public_key().public_bytes(serialization.Encoding.Raw,
                                          serialization.PublicFormat.Raw)
    return sk, raw_sk, raw_pk


def test_pyhpke_reports_open_with_the_analyzers_code(key) -> None:
    sk, _, pk = key
    plaintext = secrets.token_bytes(16) + secrets.token_bytes(160)
    sealed = client.seal(pk, 42, "demo-ldp", plaintext)
    report = EncryptedReport.model_validate(sealed)
    assert open_report(sk, 42, "demo-ldp", report) == plaintext


def test_project_reports_open_with_pyhpke(key) -> None:
    _, raw_sk, pk = key
    plaintext = secrets.token_bytes(64)
    report = seal(pk, 7, "demo-central", plaintext)
    assert client.open_sealed(raw_sk, 7, "demo-central", report.model_dump()) == plaintext


def test_info_binds_task_and_key(key) -> None:
    sk, _, pk = key
    report = EncryptedReport.model_validate(client.seal(pk, 7, "a", b"x" * 32))
    from privbandit.shared.crypto.hpke import CryptoError

    with pytest.raises(CryptoError):
        open_report(sk, 7, "b", report)


@pytest.mark.parametrize(
    ("eps", "delta", "L"), [(1.0, 1e-6, 1.0), (4.0, 1e-5, 1.0), (0.5, 1e-6, 2.0)]
)
def test_independent_gaussian_calibration_matches(eps: float, delta: float, L: float) -> None:
    ours = GaussianRandomizer(d=3, epsilon=eps, delta=delta, L=L).sigma
    theirs = client.analytic_gaussian_sigma(eps, delta, client.gaussian_row_sensitivity(L))
    assert theirs == pytest.approx(ours, rel=1e-7)


@pytest.mark.parametrize(("encoding", "L", "w", "c"), [
    ("frobenius", 1.0, 1.5, None), ("frobenius", 0.5, 1.0, None), ("centered", 1.0, 1.0, 0.7),
    ("centered", 1.0, 2.0, 0.9), ("centered-upper", 1.0, 1.5, 0.7),
    ("centered-upper", 1.0, 0.5, 0.3)])
def test_independent_encoding_calibration_matches(encoding: str, L: float, w: float,
                                                  c: float | None) -> None:
    """§3.3's Δ of every ldp-linucb encoding, computed by the independent client."""
    ours = GaussianRandomizer(3, 1.0, 1e-6, L, encoding, w, c).sigma
    theirs = client.analytic_gaussian_sigma(
        1.0, 1e-6, client.gaussian_row_sensitivity(L, encoding, w, c))
    assert theirs == pytest.approx(ours, rel=1e-7)


@pytest.mark.parametrize(("eps", "L", "S"), [(1.0, 1.0, 3.0), (4.0, 0.5, 1.0), (0.5, 2.0, 0.5)])
def test_independent_glb_calibration_matches(eps: float, L: float, S: float) -> None:
    from privbandit.shared.core.randomizers.glb import GLBRandomizer

    ours = GLBRandomizer(d=3, epsilon=eps, delta=1e-6, L=L, S=S).sigma
    theirs = client.analytic_gaussian_sigma(eps, 1e-6, client.glb_row_sensitivity(L, S))
    assert theirs == pytest.approx(ours, rel=1e-7)


def test_independent_rows_have_the_randomizers_layout() -> None:
    """The document's row layout is the randomizer's: over 4000 rows of one (x, r), the mean of
    the independent client's rows equals the mean of the project's rows entry by entry (6
    standard errors), and the analyzer's decoder takes them."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=3)
    x /= 2 * np.linalg.norm(x)
    rand = GaussianRandomizer(d=3, epsilon=1.0, delta=1e-6)
    n = 4000
    theirs = np.stack([np.frombuffer(client.gaussian_row(x, 0.7, 1.0, 1e-6, 1.0, rng), "<f8")
                       for _ in range(n)])
    ours = rand.randomize(np.repeat(x[None], n, 0), np.full(n, 0.7), rng)
    se = rand.sigma * np.sqrt(2.0 / n)
    assert theirs.shape == ours.shape
    assert np.abs(theirs.mean(axis=0) - ours.mean(axis=0)).max() < 6 * se
    assert np.array_equal(rand.from_bytes(theirs[0].tobytes()), theirs[0])


@pytest.mark.parametrize("encoding", ["centered", "centered-upper"])
def test_independent_centered_rows_match_the_randomizers(encoding: str) -> None:
    """§3.3's centered rows: the independent client's mean row equals the project's (6 s.e.),
    and the analyzer's decoder takes them."""
    rng = np.random.default_rng(6)
    c = 1 / np.sqrt(2)
    x = np.array([c, 0.3, -0.4])
    rand = GaussianRandomizer(3, 1.0, 1e-6, 1.0, encoding, 1.5, c)
    n = 4000
    theirs = np.stack([np.frombuffer(client.gaussian_row(x, 0.7, 1.0, 1e-6, 1.0, rng, encoding,
                                                         1.5, c), "<f8") for _ in range(n)])
    ours = rand.randomize(np.repeat(x[None], n, 0), np.full(n, 0.7), rng)
    se = rand.sigma * np.sqrt(2.0 / n)
    assert np.abs(theirs.mean(axis=0) - ours.mean(axis=0)).max() < 6 * se
    assert np.array_equal(rand.from_bytes(theirs[0].tobytes()), theirs[0])
