"""Paillier (``secure_sum = "paillier"``) and 0/1-randomizer interop, in process: reports built with
plain integer Paillier (tests/interop/client.py, from docs/protocol.md §3.4 and §5.3–5.4) are summed
and opened by the project's shuffler and analyzer code, and the project's ciphertexts decrypt with
the plain integer implementation given the private key. The services themselves are exercised over
HTTP in ``test_services.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from privbandit.shared.core.policies import make_config, randomizer_for
from privbandit.shared.core.randomizers.binary import BinaryRandomizer, encode_values
from privbandit.shared.core.randomizers.skellam import clean_statistics
from privbandit.shared.crypto.keystore import HpkeKeyStore, PaillierKeyStore
from privbandit.shared.crypto.paillier import PaillierEncryptor, decode_ciphertexts, homomorphic_sum
from privbandit.shared.crypto.slots import encoding_layout, layout
from privbandit.shared.crypto.tags import ciphertext_digest, open_tag
from privbandit.shared.protocol.messages import b64decode
from privbandit.shared.protocol.paillier import EncryptedCounts, PaillierLayout
from tests.helpers import secure_sum_task
from tests.interop import client

# Small keys keep this in-process test fast; the services use 2048 bits (test_services.py).
KEY_BITS = 1024
L_BATCH, M, D = 10, 2, 3


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[HpkeKeyStore, PaillierKeyStore]:
    directory: Path = tmp_path_factory.mktemp("keys")
    return HpkeKeyStore(directory), PaillierKeyStore(directory, KEY_BITS, allow_small=True)


def published(keys: tuple[HpkeKeyStore, PaillierKeyStore]) -> tuple[dict, dict, dict]:
    """(task info, Paillier config with the task's layout, HPKE config) as the analyzer serves
    them (JSON), for a d = 3, m = 2, l = 10 secure-sum task."""
    hpke, pail = keys
    lay = layout(D * (D + 3) // 2, L_BATCH, M, pail.key_bits)
    info = {"d": D, "batch_size": L_BATCH, "policy": {"m": M}}
    return (info, pail.paillier_config(lay).model_dump(mode="json"),
            hpke.hpke_config().model_dump(mode="json"))


def test_published_layout_is_the_documents(keys) -> None:
    info, pconf, _ = published(keys)
    assert client.task_layout(info, pconf)["plaintexts"] == 1
    info["policy"]["m"] = 3
    with pytest.raises(ValueError, match="layout"):
        client.task_layout(info, pconf)


def test_plain_integer_reports_sum_and_open_with_the_projects_code(keys) -> None:
    """l reports encrypted with plain integers: the project's decoder takes each (lengths,
    units), its homomorphic sum opens to the sum of the counts, and every tag opens to a fresh
    report id and the digest of its ciphertext."""
    hpke, pail = keys
    info, pconf, hconf = published(keys)
    lay = client.task_layout(info, pconf)
    rng = np.random.default_rng(3)
    counts = rng.integers(0, M + 1, size=(L_BATCH, lay["c"]))
    reports = [EncryptedCounts.model_validate(
        client.encrypted_counts(pconf, hconf, "sum", [int(v) for v in row])) for row in counts]
    cts = [decode_ciphertexts(r.ct, pail.n, lay["plaintexts"]) for r in reports]
    total = homomorphic_sum(cts, pail.n * pail.n)
    task_layout = pail.layout(lay["c"], L_BATCH, M)
    np.testing.assert_array_equal(
        pail.open_batch_sum(total, task_layout, L_BATCH), counts.sum(axis=0)
    )
    ids = set()
    for r in reports:
        report_id, digest = open_tag(hpke.private_key, hpke.key_id, "sum", r.tag)
        assert digest == ciphertext_digest(b64decode(r.ct))
        ids.add(report_id)
    assert len(ids) == L_BATCH


def test_project_ciphertexts_decrypt_with_plain_integers(keys) -> None:
    """The converse: the project's device encryption, one report and a batch product, decrypts
    with L(c^λ mod n²)·μ mod n in plain integers and unpacks by the document's slot layout."""
    _, pail = keys
    info, pconf, _ = published(keys)
    lay = client.task_layout(info, pconf)
    p, q = int(pail.private_key.p), int(pail.private_key.q)
    rng = np.random.default_rng(4)
    counts = rng.integers(0, M + 1, size=(L_BATCH, lay["c"]))
    enc = PaillierEncryptor(pail.n)
    cts = [enc.encrypt_counts(row, L_BATCH, M) for row in counts]
    one = [client.paillier_decrypt(p, q, c) for c in cts[0]]
    assert client.unpack_slots(one, lay) == counts[0].tolist()
    total = [client.paillier_decrypt(p, q, c) for c in homomorphic_sum(cts, pail.n * pail.n)]
    assert client.unpack_slots(total, lay) == counts.sum(axis=0).tolist()


def test_secure_sum_task_config_layout_matches() -> None:
    """The documented c = d(d+3)/2 and m are those of the project's randomizer for the task, and
    §5.3's formulas give the project's published layout (``PaillierLayout``, offset 0)."""
    config = secure_sum_task(l=L_BATCH, m=M)
    rand = BinaryRandomizer(d=config.policy.d, eps0=config.policy.eps0, m=M)
    published = PaillierLayout.of(layout(rand.c, L_BATCH, M, 2048)).model_dump()
    assert client.secure_sum_layout(config.policy.d, M, L_BATCH, 2048) == published


def test_independent_bit_packing_is_the_randomizers() -> None:
    rand = BinaryRandomizer(d=4, eps0=2.0, m=3)
    rng = np.random.default_rng(6)
    for _ in range(50):
        bits = rng.integers(0, 2, rand.width).astype(np.uint8)
        assert client.pack_bits(bits) == rand.to_bytes(bits)
        np.testing.assert_array_equal(rand.from_bytes(client.pack_bits(bits)), bits)


@pytest.mark.parametrize(("d", "m", "eps0"), [(3, 1, 4.0), (3, 3, 8.0), (5, 2, 30.0)])
def test_independent_binary_rows_have_the_randomizers_law(d: int, m: int, eps0: float) -> None:
    """Over n = 4000 reports of one (x, r), the mean count of each value is m(1−p)v + mp/2 for
    the independent client and for the project's randomizer alike (6 standard errors, the
    standard error from the count's variance ≤ m²/4 per report)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=d)
    x *= 0.9 / np.linalg.norm(x)
    r, n = 0.3, 4000
    rand = BinaryRandomizer(d=d, eps0=eps0, m=m)
    v = encode_values(x[None], np.array([r]), 1.0)[0]
    expected = m * (1 - rand.p) * v + m * rand.p / 2
    theirs = np.array([client.counts(client.binary_bits(x, r, eps0, m, 1.0, rng), m)
                       for _ in range(n)])
    ours = rand.counts(rand.randomize(np.repeat(x[None], n, 0), np.full(n, r), rng))
    se = m / 2 / np.sqrt(n)
    assert theirs.shape == ours.shape == (n, rand.c)
    assert np.abs(theirs.mean(axis=0) - expected).max() < 6 * se
    assert np.abs(ours.mean(axis=0) - expected).max() < 6 * se


# ---------------------------------------------------------------------------------------------
# ddp-linucb: signed values, digits v + O (§3.5, §5.3)

DDP_TASK = {"algo": "ddp-linucb", "d": D, "batch_size": L_BATCH, "epsilon": 1.0}


def ddp_published(keys: tuple[HpkeKeyStore, PaillierKeyStore]) -> tuple[dict, dict, dict, Any]:
    """(task info, Paillier config with the task's signed layout, HPKE config, randomizer) as
    the analyzer serves them (JSON) for a d = 3, l = 10 ddp-linucb task."""
    hpke, pail = keys
    policy = make_config("ddp-linucb", **{k: v for k, v in DDP_TASK.items() if k != "algo"})
    lay = encoding_layout(randomizer_for(policy).sum_encoding(), L_BATCH, pail.key_bits)
    info = {"d": D, "batch_size": L_BATCH, "policy": policy.model_dump(mode="json")}
    return (info, pail.paillier_config(lay).model_dump(mode="json"),
            hpke.hpke_config().model_dump(mode="json"), randomizer_for(policy))


def test_signed_layout_is_the_documents(keys) -> None:
    """§5.3 with m = 2O gives the project's signed layout; O is the randomizer's."""
    info, pconf, _, rz = ddp_published(keys)
    lay = client.task_layout(info, pconf)
    assert lay["offset"] == rz.offset and lay["m"] == 2 * rz.offset and lay["c"] == 9
    pconf["layout"]["m"] += 2
    with pytest.raises(ValueError):
        client.task_layout(info, pconf)


def test_plain_integer_signed_reports_open_with_the_projects_code(keys) -> None:
    """l plain-integer reports of signed values (extremes ±O among them): their homomorphic sum
    opens, with the project's decoder and the randomizer's honest bound, to the sum of the values;
    the project's signed ciphertexts decrypt with plain integers to the values and their sum."""
    _, pail = keys
    info, pconf, hconf, rz = ddp_published(keys)
    lay = client.task_layout(info, pconf)
    rng = np.random.default_rng(8)
    values = [client.ddp_values(rng.normal(size=D) / 2, float(rng.uniform()), rz.scale, 1.0,
                                rz.share_variance, rng) for _ in range(L_BATCH)]
    values[0][0], values[1][-1] = rz.offset, -rz.offset  # the packing's extremes
    reports = [EncryptedCounts.model_validate(
        client.encrypted_counts(pconf, hconf, "ddp", client.signed_digits(v, lay)))
        for v in values]
    cts = [decode_ciphertexts(r.ct, pail.n, lay["plaintexts"]) for r in reports]
    total = homomorphic_sum(cts, pail.n * pail.n)
    task_layout = PaillierLayout.model_validate(pconf["layout"]).slot_layout()
    np.testing.assert_array_equal(
        pail.open_batch_sum(total, task_layout, L_BATCH, rz.sum_bound(L_BATCH)),
        np.sum(values, axis=0))
    with pytest.raises(ValueError):
        client.signed_digits([rz.offset + 1] + [0] * (lay["c"] - 1), lay)
    # The converse.
    p, q = int(pail.private_key.p), int(pail.private_key.q)
    enc = PaillierEncryptor(pail.n)
    ours = [enc.encrypt_report(v, task_layout) for v in values]
    assert client.signed_sums([client.paillier_decrypt(p, q, c) for c in ours[0]], lay, 1) \
        == values[0]
    total = [client.paillier_decrypt(p, q, c) for c in homomorphic_sum(ours, pail.n * pail.n)]
    assert client.signed_sums(total, lay, L_BATCH) == np.sum(values, axis=0).tolist()


def test_independent_ddp_values_are_the_randomizers_law() -> None:
    """Over n = 2000 reports of one (x, r), the independent client's values and the project's
    simulator randomizer's have the same mean s·v (6 standard errors of the share's σ/√n)."""
    rz = randomizer_for(make_config("ddp-linucb", d=D, batch_size=L_BATCH, epsilon=4.0))
    rng = np.random.default_rng(9)
    x = rng.normal(size=D)
    x *= 0.9 / np.linalg.norm(x)
    r, n = 0.3, 2000
    want = rz.scale * clean_statistics(x[None], np.array([r]), 1.0)[0]
    theirs = np.array([client.ddp_values(x, r, rz.scale, 1.0, rz.share_variance, rng)
                       for _ in range(n)])
    ours = rz.randomize(np.repeat(x[None], n, 0), np.full(n, r), rng)
    se = np.sqrt(rz.share_variance + 0.25) / np.sqrt(n)
    assert np.abs(theirs.mean(axis=0) - want).max() < 6 * se
    assert np.abs(ours.mean(axis=0) - want).max() < 6 * se


def test_independent_frobenius_ddp_values_are_the_randomizers_law() -> None:
    """§3.5's ``frobenius`` encoding (off-diagonals × √2, r x × w): the independent client's
    values and the project's randomizer's have the same mean s·v_w (6 standard errors)."""
    rz = randomizer_for(make_config("ddp-linucb", d=D, batch_size=L_BATCH, epsilon=4.0,
                                    encoding="frobenius", u_weight=1.3))
    rng = np.random.default_rng(10)
    x = rng.normal(size=D)
    x *= 0.9 / np.linalg.norm(x)
    r, n = 0.7, 2000
    want = rz.scale * rz.statistics(x[None], np.array([r]))[0]
    theirs = np.array([client.ddp_values(x, r, rz.scale, 1.0, rz.share_variance, rng,
                                         "frobenius", 1.3) for _ in range(n)])
    ours = rz.randomize(np.repeat(x[None], n, 0), np.full(n, r), rng)
    se = np.sqrt(rz.share_variance + 0.25) / np.sqrt(n)
    assert np.abs(theirs.mean(axis=0) - want).max() < 6 * se
    assert np.abs(ours.mean(axis=0) - want).max() < 6 * se


def test_independent_centered_ddp_values_are_the_randomizers_law() -> None:
    """§3.5's ``centered`` encoding (x[0] the intercept c, (r − ½) x × w): the independent
    client's values and the project's randomizer's have the same mean s·v (6 standard errors);
    and
    the client's reading of the sums (G₀₀ = n c², Σ r x = ũ + ½ G̃ e₀ / c) recovers Σ r x."""
    c = 1 / np.sqrt(2)
    rz = randomizer_for(make_config("ddp-linucb", d=D, batch_size=L_BATCH, epsilon=4.0,
                                    encoding="centered", u_weight=1.5, intercept=c))
    rng = np.random.default_rng(11)
    x = rng.normal(size=D)
    x[1:] *= 0.6 / np.linalg.norm(x[1:])
    x[0] = c  # the task's contexts (the device refuses others: feature_intercept)
    r, n = 0.2, 2000
    want = rz.scale * rz.statistics(x[None], np.array([r]))[0]
    theirs = np.array([client.ddp_values(x, r, rz.scale, 1.0, rz.share_variance, rng,
                                         "centered", 1.5, c) for _ in range(n)])
    ours = rz.randomize(np.repeat(x[None], n, 0), np.full(n, r), rng)
    se = np.sqrt(rz.share_variance + 0.25) / np.sqrt(n)
    assert np.abs(theirs.mean(axis=0) - want).max() < 6 * se
    assert np.abs(ours.mean(axis=0) - want).max() < 6 * se
    xp = x
    G, u = client.ddp_estimate(theirs.sum(axis=0).tolist(), D, rz.scale, "centered", 1.5, c,
                               count=n)
    assert G[0, 0] == pytest.approx(n * c * c)
    u_se = np.sqrt(n * (rz.share_variance + 0.25) * (1 / 1.5**2 + 1 / (8 * c * c))) / rz.scale
    assert np.abs(u - n * r * xp).max() < 6 * u_se
