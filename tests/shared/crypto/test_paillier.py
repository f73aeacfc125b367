"""Paillier secure-sum: device encryption, shuffler batch sum, analyzer decryption into SBLB."""

from __future__ import annotations

import copy
import json
import os
import stat
import time

import gmpy2
import numpy as np
import pytest
from phe import paillier
from pydantic import ValidationError

from privbandit.services.device.transports.refiller import start_refiller
from privbandit.shared.core.policies import build_policy, make_config
from privbandit.shared.core.policies.sblb import SBLB
from privbandit.shared.core.randomizers.binary import BinaryRandomizer, n_coords
from privbandit.shared.crypto.keystore import PAILLIER_KEY_FILE, PaillierKeyStore
from privbandit.shared.crypto.paillier import (
    CiphertextError,
    PaillierEncryptor,
    PaillierKeyError,
    PoolEmpty,
    decode_ciphertexts,
    decrypt_sum,
    encode_ciphertexts,
    homomorphic_sum,
    open_batch_sum,
    paillier_key_id,
)
from privbandit.shared.crypto.slots import SlotRangeError, ciphertext_width, layout, pack, unpack
from privbandit.shared.protocol.messages import b64encode
from privbandit.shared.protocol.paillier import PaillierConfig, paillier_config
from tests.helpers import deadline

KEY_BITS = 1024  # small keys keep the suite fast; one test below uses the 2048-bit default


@pytest.fixture(scope="module")
def keypair() -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    return paillier.generate_paillier_keypair(n_length=KEY_BITS)


def random_rows(rand: BinaryRandomizer, n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=(n, rand.d))
    x *= (rng.random(n) / np.linalg.norm(x, axis=1))[:, None]  # ‖x‖ ≤ 1 = L
    return rand.randomize(x, rng.random(n), rng)


def encrypt_batch(enc: PaillierEncryptor, counts: np.ndarray, l: int, m: int) -> list[list[int]]:
    return [enc.encrypt_counts(row, l, m) for row in counts]


@pytest.mark.parametrize("d,m", [(5, 1), (20, 2)])  # d = 20 needs 2 plaintexts at 1024 bits
def test_homomorphic_batch_sum_equals_plaintext_sum(keypair, d: int, m: int) -> None:
    pk, sk = keypair
    l = 50
    rand = BinaryRandomizer(d, eps0=2.0, m=m)
    rows = random_rows(rand, l, np.random.default_rng(d))
    counts = rand.counts(rows)
    lay = layout(rand.c, l, m, KEY_BITS)
    assert lay.plaintexts == (1 if d == 5 else 2)
    enc = PaillierEncryptor(pk.n)
    enc.refill(l * lay.plaintexts)
    reports = encrypt_batch(enc, counts, l, m)
    assert enc.fallbacks == 0 and enc.pool_size == 0
    total = homomorphic_sum(reports, pk.n * pk.n)
    assert len(total) == lay.plaintexts
    plain = decrypt_sum(sk, total)
    # The decrypted sum is the integer sum of the packed plaintexts (no wrap mod n)...
    packed = [pack(r, l, m, KEY_BITS) for r in counts]
    assert plain == [sum(col) for col in zip(*packed, strict=True)]
    # ...and unpacks to exactly the batch counts Z the plaintext path computes.
    np.testing.assert_array_equal(unpack(plain, rand.c, l, m, KEY_BITS), rand.sufficient(rows))
    np.testing.assert_array_equal(open_batch_sum(sk, total, lay, l), rand.sufficient(rows))


def test_sum_agrees_with_phe_addition(keypair) -> None:
    """Our product mod n² is phe's ciphertext addition (E(a)E(b) = E(a + b))."""
    pk, sk = keypair
    values = [3, 10**20, 0, 12345]
    numbers = [pk.encrypt(v) for v in values]
    total = homomorphic_sum([[x.ciphertext(be_secure=False)] for x in numbers], pk.nsquare)
    phe_total = numbers[0]
    for x in numbers[1:]:
        phe_total = phe_total + x
    assert total == [phe_total.ciphertext(be_secure=False)]
    assert sk.decrypt(phe_total) == sum(values) == decrypt_sum(sk, total)[0]


def test_encryption_formula_matches_phe_for_a_known_r(keypair) -> None:
    """E(M) = (1 + M n) r^n mod n²: with the same r our ciphertext equals phe's raw_encrypt."""
    pk, sk = keypair
    enc = PaillierEncryptor(pk.n)
    r = 0x1234567890ABCDEF1234567890ABCDEF
    enc._pool.append(gmpy2.powmod(r, pk.n, pk.nsquare))
    plaintext = 987654321987654321
    assert enc.encrypt([plaintext], fallback=False) == [pk.raw_encrypt(plaintext, r_value=r)]


def test_pooled_encryption_is_correct_and_fresh(keypair) -> None:
    pk, sk = keypair
    enc = PaillierEncryptor(pk.n)
    assert enc.refill(4) == 4
    a = enc.encrypt([42], fallback=False)
    b = enc.encrypt([42], fallback=False)
    assert a != b  # each encryption consumes its own r^n
    assert decrypt_sum(sk, a) == decrypt_sum(sk, b) == [42]
    # The pool entries are distinct and each is used at most once.
    rest = list(enc._pool)
    assert len(rest) == 2 and rest[0] != rest[1]
    enc.encrypt([1, 2], fallback=False)
    assert enc.pool_size == 0 and enc.fallbacks == 0
    with pytest.raises(PoolEmpty):
        enc.encrypt([7], fallback=False)
    # Without a pool, encryption computes r^n inline and is still correct and fresh.
    c1, c2 = enc.encrypt([7]), enc.encrypt([7])
    assert c1 != c2 and decrypt_sum(sk, c1 + c2) == [7, 7]
    assert enc.fallbacks == 2
    n = pk.n
    with pytest.raises(ValueError):
        enc.encrypt([n])
    with pytest.raises(ValueError):
        enc.encrypt([-1])


def test_background_refiller_tops_the_pool_up(keypair) -> None:
    pk, sk = keypair
    enc = PaillierEncryptor(pk.n)
    refiller = start_refiller(enc, target=6, chunk=2)
    try:
        until = deadline(10)
        while enc.pool_size < 6 and time.monotonic() < until:
            time.sleep(0.005)
        assert enc.pool_size == 6
        cts = enc.encrypt([5, 6, 7], fallback=False)
        assert decrypt_sum(sk, cts) == [5, 6, 7]
        until = deadline(10)
        while enc.pool_size < 6 and time.monotonic() < until:
            time.sleep(0.005)
        assert enc.pool_size == 6  # refilled after the take
    finally:
        refiller.stop()
    assert not refiller.is_alive()


def test_wire_round_trip_and_validation(keypair) -> None:
    pk, sk = keypair
    n, n2 = pk.n, pk.nsquare
    width = ciphertext_width(KEY_BITS)
    assert width == 2 * KEY_BITS // 8
    cts = PaillierEncryptor(n).encrypt([1, 2])
    text = encode_ciphertexts(cts, KEY_BITS)
    assert decode_ciphertexts(text, n, 2) == cts

    def wire(values: list[int]) -> str:
        return b64encode(b"".join(v.to_bytes(width, "big") for v in values))

    with pytest.raises(CiphertextError, match="bytes"):
        decode_ciphertexts(text, n, 1)  # two ciphertexts where one is expected
    with pytest.raises(CiphertextError, match="bytes"):
        decode_ciphertexts(b64encode(b"\x01" * (width - 1)), n, 1)
    with pytest.raises(CiphertextError, match="range"):
        decode_ciphertexts(wire([0]), n, 1)
    with pytest.raises(CiphertextError, match="range"):
        decode_ciphertexts(wire([n2]), n, 1)
    with pytest.raises(CiphertextError, match="range"):
        decode_ciphertexts(wire([n2 + 5]), n, 1)
    # Multiples of p (or q, or n) are not units mod n²: refuse them.
    for bad in (sk.p * 12345, sk.q, n, n * 7 + sk.p * sk.p):
        with pytest.raises(CiphertextError, match="unit"):
            decode_ciphertexts(wire([bad % n2]), n, 1)
    for junk in ("not base64!", text + "A", "@" + text[1:], text[:-4] + " " + text[-3:]):
        with pytest.raises(CiphertextError):
            decode_ciphertexts(junk, n, 2)
    with pytest.raises(CiphertextError):
        encode_ciphertexts([n2 * n2], KEY_BITS)
    with pytest.raises(CiphertextError):
        encode_ciphertexts([0], KEY_BITS)
    # The analyzer's decryption checks the same.
    with pytest.raises(CiphertextError):
        decrypt_sum(sk, [n])


def test_key_store_round_trip(tmp_path) -> None:
    store = PaillierKeyStore(tmp_path, KEY_BITS, allow_small=True)
    path = tmp_path / PAILLIER_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.key_bits == KEY_BITS and store.key_id == paillier_key_id(store.n)
    cts = PaillierEncryptor.from_config(store.paillier_config()).encrypt([31337])
    again = PaillierKeyStore(tmp_path, KEY_BITS, allow_small=True)
    assert (again.n, again.private_key.p, again.private_key.q) == (
        store.n, store.private_key.p, store.private_key.q,
    )
    assert again.paillier_config() == store.paillier_config()
    assert decrypt_sum(again.private_key, cts) == [31337]
    # A key readable by others is tightened to 0600 on load.
    os.chmod(path, 0o644)
    PaillierKeyStore(tmp_path, KEY_BITS, allow_small=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # A small key is refused unless explicitly allowed.
    with pytest.raises(PaillierKeyError):
        PaillierKeyStore(tmp_path)
    with pytest.raises(PaillierKeyError):
        PaillierKeyStore(tmp_path / "other", KEY_BITS)
    # A tampered key file is refused, not silently used.
    data = json.loads(path.read_text())
    data["p"] = format(int(data["p"], 16) + 2, "x")
    path.write_text(json.dumps(data))
    with pytest.raises(PaillierKeyError, match="inconsistent"):
        PaillierKeyStore(tmp_path, KEY_BITS, allow_small=True)
    path.write_text("[]")
    with pytest.raises(PaillierKeyError):
        PaillierKeyStore(tmp_path, KEY_BITS, allow_small=True)


def test_default_2048_bit_key_end_to_end(tmp_path) -> None:
    """The production default: a 2048-bit key, d = 5, l = 1000, m = 1 (one plaintext, 512 bytes
    per report), a few reports summed and decrypted through the wire form."""
    store = PaillierKeyStore(tmp_path)
    assert store.key_bits == 2048
    d, l, m = 5, 1000, 1
    lay = store.layout(n_coords(d), l, m)
    assert (lay.slot_bits, lay.plaintexts, lay.ciphertext_bytes) == (10, 1, 512)
    config = store.paillier_config(lay)
    config = PaillierConfig.model_validate_json(config.model_dump_json())
    enc = PaillierEncryptor.from_config(config)
    enc.refill(3)
    rng = np.random.default_rng(0)
    counts = rng.integers(0, m + 1, size=(3, lay.c))
    wire = [encode_ciphertexts(enc.encrypt_counts(row, l, m), 2048) for row in counts]
    assert all(len(w) == 4 * ((lay.ciphertext_bytes + 2) // 3) for w in wire)
    reports = [decode_ciphertexts(w, config.modulus(), lay.plaintexts) for w in wire]
    total = homomorphic_sum(reports, store.n**2)
    np.testing.assert_array_equal(store.open_batch_sum(total, lay, 3), counts.sum(axis=0))


def test_config_validation(keypair) -> None:
    pk, _ = keypair
    lay = layout(20, 50, 1, KEY_BITS)
    good = paillier_config(pk.n, lay).model_dump()
    PaillierConfig.model_validate(good)
    for field, value in [
        ("key_id", (good["key_id"] + 1) % 256),
        ("key_bits", 2048),
        ("n", "!!"),
        ("n", b64encode((pk.n + 1).to_bytes(128, "big"))),
    ]:
        with pytest.raises(ValidationError):
            PaillierConfig.model_validate({**good, field: value})
    bad_layout = {**good["layout"], "slot_bits": 7}
    with pytest.raises(ValidationError):
        PaillierConfig.model_validate({**good, "layout": bad_layout})


# ---------------------------------------------------------------------------------------------
# Analyzer: SBLB fed from decrypted batch sums


def sblb(l: int) -> SBLB:
    policy = build_policy(make_config("sblb-fixed", d=3, eps0=4.0, m=2, batch_size=l))
    assert isinstance(policy, SBLB)
    return policy


def analyzer_ingest(policy: SBLB, sk, total: list[int], count: int) -> None:
    """What the analyzer does with one forwarded batch sum: open (checks), then ingest."""
    c = policy.randomizer
    lay = layout(c.c, policy.batch_size, c.m, KEY_BITS)
    policy.ingest_statistic(open_batch_sum(sk, total, lay, count), count)


def test_sblb_state_from_secure_sum_equals_plaintext_ingest(keypair) -> None:
    pk, sk = keypair
    l = 50
    plain, secure = sblb(l), sblb(l)
    rand = plain.randomizer
    enc = PaillierEncryptor(pk.n)
    rng = np.random.default_rng(7)
    for _ in range(3):
        rows = random_rows(rand, l, rng)
        plain.ingest(rows)
        # Device → wire → shuffler (decode, multiply) → wire → analyzer.
        lay = layout(rand.c, l, rand.m, KEY_BITS)
        wire = [
            encode_ciphertexts(enc.encrypt_counts(cnt, l, rand.m), KEY_BITS)
            for cnt in rand.counts(rows)
        ]
        reports = [decode_ciphertexts(w, pk.n, lay.plaintexts) for w in wire]
        forwarded = encode_ciphertexts(homomorphic_sum(reports, pk.nsquare), KEY_BITS)
        analyzer_ingest(secure, sk, decode_ciphertexts(forwarded, pk.n, lay.plaintexts), l)
    assert plain.model.version == secure.model.version == 3
    assert secure.get_state() == plain.get_state()
    np.testing.assert_array_equal(secure.G, plain.G)
    np.testing.assert_array_equal(secure.u, plain.u)
    np.testing.assert_array_equal(secure.model.theta, plain.model.theta)


def test_refused_batches_leave_sblb_state_untouched(keypair) -> None:
    pk, sk = keypair
    l = 50
    policy = sblb(l)
    rand = policy.randomizer
    lay = layout(rand.c, l, rand.m, KEY_BITS)
    enc = PaillierEncryptor(pk.n)
    rng = np.random.default_rng(8)
    honest = [enc.encrypt_counts(c, l, rand.m) for c in rand.counts(random_rows(rand, l, rng))]
    analyzer_ingest(policy, sk, homomorphic_sum(honest, pk.nsquare), l)
    before = copy.deepcopy(policy.get_state())

    s = lay.slot_bits
    attacks = {
        # one device puts l·m + 1 into slot 3 while the others send zeros
        "slot out of range": [enc.encrypt([(l * rand.m + 1) << (3 * s)])]
        + [enc.encrypt([0]) for _ in range(l - 1)],
        # one device encrypts −1 ≡ n − 1 and slot 0 has nothing to borrow from: the batch sum
        # wraps modulo n into the guard bits. (A −1 that does not borrow is indistinguishable
        # from a device reporting a smaller count: in-range poisoning is not detectable.)
        "negative plaintext": [enc.encrypt([0]) for _ in range(l - 1)] + [enc.encrypt([pk.n - 1])],
        # a plaintext with a bit above the last slot
        "bits above last slot": honest[1:] + [enc.encrypt([1 << (rand.c * s)])],
    }
    for name, reports in attacks.items():
        with pytest.raises(SlotRangeError):
            analyzer_ingest(policy, sk, homomorphic_sum(reports, pk.nsquare), l)
        assert policy.get_state() == before, name
    # l + 1 reports (or a count the shuffler misstates) are refused before decryption is trusted.
    extra = honest + [enc.encrypt_counts(np.zeros(rand.c, np.int64), l, rand.m)]
    with pytest.raises(SlotRangeError):
        analyzer_ingest(policy, sk, homomorphic_sum(extra, pk.nsquare), l + 1)
    # Claiming fewer reports than were summed trips the per-slot bound n_reports·m.
    full = [enc.encrypt_counts(np.full(rand.c, rand.m), l, rand.m) for _ in range(5)]
    with pytest.raises(SlotRangeError):
        analyzer_ingest(policy, sk, homomorphic_sum(full, pk.nsquare), 4)
    # A ciphertext that is not a unit, or the wrong number of them.
    with pytest.raises(CiphertextError):
        analyzer_ingest(policy, sk, [pk.n], l)
    with pytest.raises(SlotRangeError):
        analyzer_ingest(policy, sk, homomorphic_sum(honest, pk.nsquare) * 2, l)
    assert policy.get_state() == before
    # An honest batch is still accepted afterwards.
    analyzer_ingest(policy, sk, homomorphic_sum(honest, pk.nsquare), l)
    assert policy.reports == 2 * l
