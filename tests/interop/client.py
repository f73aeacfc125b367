"""A device client written from docs/protocol.md alone, with independent implementations only:
``pyhpke`` for HPKE (RFC 9180), integer arithmetic for Paillier (GMP's modular power), numpy
and scipy for the randomizers, the standard library for base64 and JSON. It imports nothing from
this project, so a wire change that breaks the document breaks the interop tests that use it."""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import secrets
import struct
from typing import Any

import gmpy2
import numpy as np
from pyhpke import AEADId, CipherSuite, KDFId, KEMId
from scipy.optimize import brentq
from scipy.stats import norm

SUITE = CipherSuite.new(KEMId.DHKEM_X25519_HKDF_SHA256, KDFId.HKDF_SHA256, AEADId.AES128_GCM)
REPORT_ID_BYTES = 16


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64e(data: bytes) -> str:
    """protocol.md §2: URL-safe base64; senders SHOULD pad with ``=``."""
    return base64.urlsafe_b64encode(data).decode("ascii")


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


@functools.cache
def analytic_gaussian_sigma(eps: float, delta: float, sensitivity: float) -> float:
    """Smallest σ with Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) ≤ δ (Balle–Wang 2018, Thm 8)."""

    def gap(log_sigma: float) -> float:
        s = math.exp(log_sigma)
        a = sensitivity / (2 * s) - eps * s / sensitivity
        b = -sensitivity / (2 * s) - eps * s / sensitivity
        return norm.cdf(a) - math.exp(eps) * norm.cdf(b) - delta

    return math.exp(brentq(gap, math.log(1e-6 * sensitivity), math.log(1e6 * sensitivity),
                           xtol=1e-14))


def gaussian_row_sensitivity(L: float, encoding: str = "plain", w: float = 1.0,
                             c: float | None = None) -> float:
    """protocol.md §3.3: Δ of an ``ldp-linucb`` row in the task's ``encoding``."""
    if encoding == "plain":
        return math.sqrt(2 * L**4 + 2 * L**2 + 0.5) if L * L >= 0.5 else 2 * L
    if encoding == "frobenius":
        A, U = L**4, (w * L) ** 2
        return math.sqrt(2 * A + 2 * U + U * U / (2 * A)) if U <= 2 * A else 2 * math.sqrt(U)
    assert c is not None
    k, low = w * w / 4, 2 * c * c - L * L
    if encoding == "centered":
        t = min(max(k / 2, low, 0.0), L * L)
        return math.sqrt(2 * L**4 - 2 * t * t + 2 * k * (L * L + t))
    # centered-upper: the larger of the two signs' clamped maximisers
    R2 = L * L - c * c
    ts = [min(max((c * c + k) / 2, low, 0.0), L * L)]
    if low < 0:
        ts.append(min(max((c * c - k) / 2, low), 0.0))
    return math.sqrt(max(L**4 - t * t + R2 * R2 - (t - c * c) ** 2 + 2 * k * (L * L + abs(t))
                         for t in ts))


def glb_row_sensitivity(L: float, S: float) -> float:
    """protocol.md §3.3: Δ of an ``ldp-glb`` row."""
    k = 2 + S * S
    return math.sqrt(k * L**4 + 2 * L**2 + 1 / k) if 1 / k <= L * L else 2 * L


def gaussian_row(x: np.ndarray, r: float, eps: float, delta: float, L: float,
                 rng: np.random.Generator, encoding: str = "plain", u_weight: float = 1.0,
                 intercept: float | None = None, noise: bool = True) -> bytes:
    """Zheng Alg. 5 as protocol.md states it: (upper(x xᵀ), r x) + N(0, σ²) per entry,
    σ the analytic Gaussian calibration at the encoding's Δ (plain: √(2L⁴ + 2L² + 1/2) if
    L² ≥ 1/2, else 2L); "frobenius" multiplies the off-diagonal entries by √2 and r x by
    w = ``u_weight``; "centered" is "frobenius" after setting x[0] = c (``intercept``, the rest
    clipped to √(L² − c²)) with (r − ½) x in place of r x; "centered-upper" the same with the
    off-diagonal entries once; little-endian float64."""
    sigma = analytic_gaussian_sigma(eps, delta,
                                    gaussian_row_sensitivity(L, encoding, u_weight, intercept))
    x = np.asarray(x, float)
    if encoding in ("centered", "centered-upper"):
        assert intercept is not None
        rest = x[1:] * min(1.0, math.sqrt(L * L - intercept * intercept)
                           / max(float(np.linalg.norm(x[1:])), 1e-300))
        x, r = np.concatenate([[intercept], rest]), r - 0.5
    m = upper(x)
    if encoding in ("frobenius", "centered"):
        d = len(x)
        m = np.where([i == j for i in range(d) for j in range(i, d)], m, math.sqrt(2) * m)
    clean = np.concatenate([m, u_weight * r * x])
    if not noise:  # the noise-free row (privunit_row's input)
        return clean.astype("<f8").tobytes()
    return (clean + rng.normal(0.0, sigma, clean.shape)).astype("<f8").tobytes()


@functools.cache
def privunit_parameters(D: int, eps: float) -> tuple[float, float, float]:
    """protocol.md §3.3 "mechanism": (γ, p, m) with q(γ) and μ₊(γ) by quadrature of t's density
    ∝ (1 − t²)^{(D−3)/2} (not the document's Beta-function forms) and m maximised over γ."""
    from scipy.integrate import quad
    from scipy.optimize import minimize_scalar

    k = (D - 3) / 2
    total = quad(lambda t: (1 - t * t) ** k, -1, 1, epsabs=0, epsrel=1e-11, limit=200)[0]

    def q(g: float) -> float:
        return quad(lambda t: (1 - t * t) ** k, g, 1, epsabs=0, epsrel=1e-11, limit=200)[0] / total

    def m(g: float) -> tuple[float, float]:
        qq = q(g)
        p = 1 / (1 + math.exp(-(eps - math.log((1 - qq) / qq))))
        mu = quad(lambda t: t * (1 - t * t) ** k, g, 1, epsabs=0, epsrel=1e-11,
                  limit=200)[0] / total
        return p, mu * (p / qq - (1 - p) / (1 - qq))

    g_max = brentq(lambda g: math.log((1 - q(g)) / q(g)) - eps, 0.0, 0.99)
    g = float(minimize_scalar(lambda g: -m(g)[1], bounds=(0.0, g_max), method="bounded",
                              options={"xatol": 1e-10}).x)
    return g, *m(g)


def privunit_row(x: np.ndarray, r: float, eps: float, L: float, rng: np.random.Generator,
                 encoding: str, u_weight: float, intercept: float | None) -> bytes:
    """protocol.md §3.3, ``mechanism = "privunit"``: the weighted noise-free row of
    ``gaussian_row`` with its non-constant entries replaced by r z / m, z drawn here by
    rejection (uniform directions kept in the chosen region)."""
    clean = np.frombuffer(gaussian_row(x, r, 1.0, 0.5, L, rng, encoding, u_weight, intercept,
                                       noise=False), "<f8").copy()
    free = np.ones(clean.size, bool)
    c = 0.0 if intercept is None else intercept
    if intercept is not None:
        free[0] = False
    D = int(free.sum())
    a = 0.5 if encoding.startswith("centered") else 1.0
    radius = math.sqrt(L**4 - c**4 + (u_weight * a * L) ** 2)
    gamma, p, m = privunit_parameters(D, eps)
    v = clean[free]
    n = float(np.linalg.norm(v))
    s = 1.0 if rng.random() < (1 + n / radius) / 2 else -1.0
    u = s * v / n if n > 0 else s * np.eye(D)[0]
    want_cap = rng.random() < p
    while True:
        z = rng.normal(size=D)
        z /= np.linalg.norm(z)
        if (float(z @ u) >= gamma) == want_cap:
            break
    clean[free] = radius / m * z
    return clean.astype("<f8").tobytes()


def identity_row(x: np.ndarray, r: float) -> bytes:
    """Central tasks: the raw (x, r), little-endian float64."""
    return np.concatenate([x, [r]]).astype("<f8").tobytes()


def report(public_key: bytes, key_id: int, task: str, row: bytes) -> tuple[bytes, dict]:
    """(report id, EncryptedReport): plaintext = 16 random bytes ‖ row."""
    report_id = secrets.token_bytes(REPORT_ID_BYTES)
    return report_id, seal(public_key, key_id, task, report_id + row)


def binary_bits(x: np.ndarray, r: float, eps0: float, m: int, L: float,
                rng: np.random.Generator) -> np.ndarray:
    """protocol.md §3.4: the m·d(d+3)/2 randomized bits of one report (uint8, value order).

    Values r x/(2L) + 1/2, then upper(x xᵀ)/(2L²) + 1/2 (clipped to [0, 1]); each value v to m
    bits by stochastic unary rounding (u = v m, f = ⌊u⌋: bits 1..f are 1, bit f+1 is 1 with
    probability u − f); each bit replaced by a fair coin with p = 2 / (exp(2ε0/(m d (d+3))) + 1)."""
    d = x.shape[0]
    values = np.clip(np.concatenate([r * x / (2 * L) + 0.5, upper(x) / (2 * L * L) + 0.5]),
                     0.0, 1.0)
    bits = np.zeros((values.size, m), dtype=np.uint8)
    for i, v in enumerate(values):
        u = v * m
        f = math.floor(u)
        bits[i, :f] = 1
        if f < m and rng.random() < u - f:
            bits[i, f] = 1
    p = 2.0 / (math.exp(2.0 * eps0 / (m * d * (d + 3))) + 1.0)
    replace = rng.random(bits.shape) < p
    coins = rng.integers(0, 2, bits.shape, dtype=np.uint8)
    return np.where(replace, coins, bits).reshape(-1).astype(np.uint8)


def pack_bits(bits: np.ndarray) -> bytes:
    """protocol.md §3.3: the bits packed MSB first, zero-padded to a byte."""
    out = bytearray((bits.size + 7) // 8)
    for i, b in enumerate(bits):
        if b:
            out[i // 8] |= 0x80 >> (i % 8)
    return bytes(out)


def counts(bits: np.ndarray, m: int) -> list[int]:
    """Per value, the number of 1 bits among its m bits (0..m)."""
    return [int(v) for v in bits.reshape(-1, m).sum(axis=1)]


# ---------------------------------------------------------------------------------------------
# Secure sum (protocol.md §5.2–5.4): Paillier with g = n + 1 in plain integers


def secure_sum_layout(d: int, m: int, batch_size: int, key_bits: int, offset: int = 0
                      ) -> dict[str, int]:
    """§5.3's formulas, as the fields of the published ``layout`` (``offset`` O > 0: a signed
    layout, m = 2O)."""
    c = d * (d + 3) // 2
    s = (batch_size * m).bit_length()
    k = (key_bits - 1 - 8) // s
    plaintexts = -(-c // k)
    return {"c": c, "m": m, "batch_size": batch_size, "key_bits": key_bits, "slot_bits": s,
            "slots_per_plaintext": k, "plaintexts": plaintexts,
            "ciphertext_bytes": plaintexts * -(-2 * key_bits // 8), "offset": offset}


def ddp_values(x: np.ndarray, r: float, scale: float, L: float, share_variance: float,
               rng: np.random.Generator, encoding: str = "upper",
               u_weight: float = 1.0, intercept: float | None = None) -> list[int]:
    """§3.5: clip x to ‖x‖ ≤ L and r to [0, 1]; v = (upper(x xᵀ), r x) — with ``encoding``
    "frobenius" the off-diagonal entries times √2 and r x times w = ``u_weight`` — clipped to
    ‖v‖ ≤ √(L⁴ + w²L²); "centered" as "frobenius" after setting x[0] = c (``intercept``, the
    rest clipped to √(L² − c²)) and with (r − ½) x in place of r x, clipped to
    √(L⁴ + w²L²/4); y = s·v; each y_i to ⌊y_i⌋ + Bernoulli(y_i − ⌊y_i⌋); plus
    Poisson(λ) − Poisson(λ), λ = σ²/2 (numpy's Poisson here: a test client; a device samples it
    exactly from a CSPRNG)."""
    x = np.asarray(x, float)
    r = min(max(float(r), 0.0), 1.0)
    if encoding == "centered":
        assert intercept is not None
        rest = x[1:] * min(1.0, math.sqrt(L * L - intercept * intercept)
                           / max(float(np.linalg.norm(x[1:])), 1e-300))
        x = np.concatenate([[intercept], rest])
        r -= 0.5
    else:
        x = x * min(1.0, L / max(float(np.linalg.norm(x)), 1e-300))
    m = upper(x)
    w = 1.0
    if encoding in ("frobenius", "centered"):
        d = len(x)
        diagonal = [i == j for i in range(d) for j in range(i, d)]
        m = np.where(diagonal, m, math.sqrt(2) * m)
        w = u_weight
    v = np.concatenate([m, w * r * x])
    h = 0.5 if encoding == "centered" else 1.0
    v *= min(1.0, math.sqrt(L**4 + (w * h * L) ** 2) / max(float(np.linalg.norm(v)), 1e-300))
    y = scale * v
    low = np.floor(y)
    z = low + (rng.random(y.shape) < y - low)
    lam = share_variance / 2
    noise = rng.poisson(lam, y.shape) - rng.poisson(lam, y.shape)
    return [int(t) for t in z + noise]


def ddp_estimate(sums: list[int], d: int, scale: float, encoding: str = "upper",
                 u_weight: float = 1.0, intercept: float | None = None,
                 count: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """§3.5, the analyzer's reading of decoded batch sums S (summed over batches, ``count``
    reports): Σ x xᵀ as the symmetric matrix of S's upper-triangle values / s — off-diagonal
    ones also / √2 under ``frobenius`` and ``centered`` — and Σ r x as S's last d values / (s·w)
    (w = 1 under ``upper``); under ``centered`` entry (0, 0) is count·c² and ½ × row 0 / c is
    added to Σ r x."""
    G = np.zeros((d, d))
    k = 0
    off, w = (math.sqrt(2), u_weight) if encoding in ("frobenius", "centered") else (1.0, 1.0)
    for i in range(d):
        for j in range(i, d):
            G[i, j] = G[j, i] = sums[k] / (scale * (1.0 if i == j else off))
            k += 1
    u = np.array(sums[k:], dtype=float) / (scale * w)
    if encoding == "centered":
        assert intercept is not None
        G[0, 0] = count * intercept**2
        u = u + 0.5 * G[0] / intercept
    return G, u


def signed_digits(values: list[int], layout: dict[str, int]) -> list[int]:
    """§5.3, signed layouts: the digit v + O of each value, which MUST lie in [0, 2O]."""
    o = layout["offset"]
    if any(abs(v) > o for v in values):
        raise ValueError(f"a value lies outside ±{o}")
    return [v + o for v in values]


def signed_sums(plaintexts: list[int], layout: dict[str, int], count: int) -> list[int]:
    """The coordinate sums of ``count`` signed reports: slot values minus count·O."""
    return [u - count * layout["offset"] for u in unpack_slots(plaintexts, layout)]


def pack_slots(values: list[int], layout: dict[str, int]) -> list[int]:
    """Plaintext j = Σ_{i<k} counts[j·k + i] · 2^{i·s}."""
    s, k = layout["slot_bits"], layout["slots_per_plaintext"]
    return [sum(v << (i * s) for i, v in enumerate(values[j * k:(j + 1) * k]))
            for j in range(layout["plaintexts"])]


def unpack_slots(plaintexts: list[int], layout: dict[str, int]) -> list[int]:
    s, k, c = layout["slot_bits"], layout["slots_per_plaintext"], layout["c"]
    return [(plaintexts[i // k] >> ((i % k) * s)) & ((1 << s) - 1) for i in range(c)]


def paillier_encrypt(n: int, plaintext: int, r: int | None = None) -> int:
    """(1 + M n) · r^n mod n², r uniform in Z*_n from the OS CSPRNG (or ``r``: test vectors)."""
    n2 = n * n
    while r is None or math.gcd(r, n) != 1:
        r = secrets.randbelow(n - 1) + 1
    # GMP's modular power (exact, as pow): Python's takes ~40 ms for a 2048-bit n
    return (1 + plaintext * n) * int(gmpy2.powmod(r, n, n2)) % n2


def paillier_decrypt(p: int, q: int, ciphertext: int) -> int:
    """M = L(c^λ mod n²) · μ mod n with L(u) = (u − 1)/n, λ = lcm(p − 1, q − 1) and, for
    g = n + 1, μ = λ⁻¹ mod n (Paillier 1999)."""
    n = p * q
    lam = math.lcm(p - 1, q - 1)
    return (int(gmpy2.powmod(ciphertext, lam, n * n)) - 1) // n * pow(lam, -1, n) % n


def encrypted_counts(paillier_config: dict, hpke_config: dict, task: str, values: list[int],
                     *, rs: list[int] | None = None, report_id: bytes | None = None,
                     eks: object | None = None) -> dict[str, object]:
    """One EncryptedCounts: the counts packed and encrypted under the task's published Paillier
    key (each ciphertext ⌈2·key_bits/8⌉ big-endian bytes, concatenated, base64url), and the tag
    = HPKE-Seal(info ‖ ``|tag``) of report id ‖ SHA-256("privbandit/paillier-ct|" ‖ ct bytes).
    ``rs``, ``report_id`` and ``eks`` fix the randomness (test vectors only)."""
    n = int.from_bytes(b64d(paillier_config["n"]), "big")
    plaintexts = pack_slots(values, paillier_config["layout"])
    width = -(-2 * paillier_config["key_bits"] // 8)
    ct = b"".join(paillier_encrypt(n, m, r).to_bytes(width, "big")
                  for m, r in zip(plaintexts, rs or [None] * len(plaintexts), strict=True))
    digest = hashlib.sha256(b"privbandit/paillier-ct|" + ct).digest()
    rid = report_id if report_id is not None else secrets.token_bytes(REPORT_ID_BYTES)
    tag = seal(b64d(hpke_config["public_key"]), hpke_config["key_id"], task, rid + digest,
               purpose="tag", eks=eks)
    return {"key_id": paillier_config["key_id"], "ct": b64e(ct), "tag": tag}


def task_layout(task_info: dict, paillier_config: dict) -> dict[str, int]:
    """The layout §5.3's formulas give for this task (d, m, l from ``GET /v1/tasks/{task}``;
    for ``ddp-linucb`` m = 2O with the published O) and key; a client MUST refuse to encrypt
    under a published layout that differs."""
    if task_info["policy"].get("algo") == "ddp-linucb":
        o = paillier_config["layout"]["offset"]
        if o < 1:
            raise ValueError("a ddp-linucb layout is signed: offset O ≥ 1")
        want = secure_sum_layout(task_info["d"], 2 * o, task_info["batch_size"],
                                 paillier_config["key_bits"], offset=o)
    else:
        want = secure_sum_layout(task_info["d"], task_info["policy"]["m"],
                                 task_info["batch_size"], paillier_config["key_bits"])
    if paillier_config["layout"] != want:
        raise ValueError(f"published layout {paillier_config['layout']} is not {want}")
    n = int.from_bytes(b64d(paillier_config["n"]), "big")
    if n.bit_length() != paillier_config["key_bits"]:
        raise ValueError("key_bits is not the bit length of n")
    return want


def split_ciphertexts(ct: str, layout: dict[str, int]) -> list[int]:
    """The P ciphertexts of an EncryptedCounts ``ct`` (fixed-width big-endian, concatenated)."""
    raw = b64d(ct)
    width = layout["ciphertext_bytes"] // layout["plaintexts"]
    return [int.from_bytes(raw[j:j + width], "big") for j in range(0, len(raw), width)]


# ---------------------------------------------------------------------------------------------
# Multi-armed tasks (protocol.md §3.3 "Multi-armed tasks" and §4 ArmModelMessage)


def choose_arm(model: dict, u: float) -> tuple[int, float | None]:
    """§4: the arm a device plays from an ``ArmModelMessage``, and p_a for a sampling model.

    ``arm``: the episode's arm. ``probabilities``: the first a with u·Σp < Σ_{b≤a} p_b, u ~ U[0, 1)
    the device's own. ``indices``: the first arm with the largest index, null = +∞."""
    if model.get("arm") is not None:
        return int(model["arm"]), None
    if model.get("probabilities") is not None:
        p = model["probabilities"]
        total, acc = sum(p), 0.0  # Σp and the partial sums, left to right
        for a, pa in enumerate(p):
            acc += pa
            if u * total < acc:
                return a, float(pa)
        raise ValueError("u·Σp reached no arm")
    idx = [math.inf if v is None else float(v) for v in model["indices"]]
    return idx.index(max(idx)), None


def laplace_value(s: float, eps_t: float, rng: np.random.Generator) -> float:
    """CTL (``heldp-ucb-l``): s + Laplace(1/ε_t); a user who declines (ε_t = 0) sends 0."""
    return 0.0 if eps_t == 0 else s + float(rng.laplace(0.0, 1.0 / eps_t))


def bernoulli_bit(s: float, eps_t: float, rng: np.random.Generator) -> int:
    """CTB (``heldp-ucb-b``): x ~ Bernoulli(1/(1+e^ε_t) + s·tanh(ε_t/2)); declined: 0."""
    if eps_t == 0:
        return 0
    return int(rng.random() < 1.0 / (1.0 + math.exp(eps_t)) + s * math.tanh(eps_t / 2))


def gaussian_reward(r: float, eps: float, delta: float, rng: np.random.Generator) -> float:
    """``ldp-mab``: y = r − 1/2 + N(0, σ²), σ the analytic Gaussian σ at sensitivity 1."""
    return r - 0.5 + float(rng.normal(0.0, analytic_gaussian_sigma(eps, delta, 1.0)))


def mab_fields(policy: dict, arm: int, p: float | None, r: float, eps_t: float,
               rng: np.random.Generator) -> list[float]:
    """The row of one multi-armed report, [arm, middle fields..., value], per §3.3's table."""
    algo = policy["algo"]
    s = 1.0 / (1.0 + math.exp(-r)) if policy.get("sigmoid") else r
    if algo in ("ucb", "adar-ucb"):
        return [arm, r]
    if algo == "heldp-ucb-l":
        return [arm, eps_t, laplace_value(s, eps_t, rng)]
    if algo == "heldp-ucb-b":
        return [arm, eps_t, bernoulli_bit(s, eps_t, rng)]
    if algo == "ldp-mab":
        y = gaussian_reward(r, policy["epsilon"], policy["delta"], rng)
        if policy.get("black_box", "tsallis-inf") == "tsallis-inf":
            if p is None:
                raise ValueError("a Tsallis-INF report carries p, from a probabilities model")
            return [arm, p, y]
        return [arm, y]
    raise ValueError(f"no multi-armed row for {algo!r}")


def arm_row(fields: list[float], bit: bool = False) -> bytes:
    """§3.3: little-endian arm (uint16), the middle fields (float64), the value (float64, or
    uint8 for a bit)."""
    arm, *middle, value = fields
    fmt = "<H" + "d" * len(middle) + ("B" if bit else "d")
    return struct.pack(fmt, int(arm), *map(float, middle), int(value) if bit else float(value))


def mab_row(policy: dict, fields: list[float]) -> bytes:
    """The wire row of ``mab_fields``' output for this task (a bit for ``heldp-ucb-b``)."""
    return arm_row(fields, bit=policy["algo"] == "heldp-ucb-b")


# ---------------------------------------------------------------------------------------------
# Bandit-convex-optimisation tasks (protocol.md §3.3 "Bandit-convex-optimisation tasks" and §4
# BCOModelMessage)

ONE_POINT_BCO = ("bco", "ldp-bco")


def unit_direction(d: int, rng: np.random.Generator) -> np.ndarray:
    """u uniform on the unit sphere in d dimensions: a standard normal vector over its norm
    (rotation invariance of N(0, I_d))."""
    while True:
        z = rng.standard_normal(d)
        norm_z = float(np.linalg.norm(z))
        if norm_z > 0.0:
            return z / norm_z


def bco_points(model: dict, u: np.ndarray) -> np.ndarray:
    """§4: the point(s) a device with direction u plays from a ``BCOModelMessage``: one point
    x = y + δ A u (``A``, ``delta``), or two points x₁ = y + ρu, x₂ = y − ρu (``rho``)."""
    y = np.asarray(model["y"], dtype=float)
    if model.get("rho") is not None:
        rho = float(model["rho"])
        return np.stack([y + rho * u, y - rho * u])
    A = np.asarray(model["A"], dtype=float)
    return (y + float(model["delta"]) * (A @ u))[None]


def bco_sigma(policy: dict) -> float:
    """§3.3: σ of ``ldp-bco`` (sensitivity B) or ``ldp-bco2`` (sensitivity 2G, per unit of
    ‖x₁ − x₂‖): the analytic Gaussian σ, or with ``calibration = "paper"`` the paper's
    2B√(2 ln(1.25/δ))/ε, resp. 2G√(2 ln(1.25/δ))/ε (Zheng et al. Alg. 1/2 line 2)."""
    eps, delta = float(policy["epsilon"]), float(policy["delta"])
    one = policy["algo"] in ONE_POINT_BCO
    bound = float(policy["loss_bound"]) if one else float(policy["lipschitz"])  # B or G
    if policy.get("calibration", "analytic") == "paper":
        return 2.0 * bound * math.sqrt(2.0 * math.log(1.25 / delta)) / eps
    scale = bound if one else 2.0 * bound
    return analytic_gaussian_sigma(eps, delta, scale)


def bco_value(policy: dict, losses: list[float], points: np.ndarray,
              rng: np.random.Generator) -> float:
    """§3.3's value column. One point: clip(f(x), 0, B), + N(0, σ²) for ``ldp-bco`` (Zheng et al.
    Alg. 1 line 5). Two points: clip(f(x₁) − f(x₂), ±G‖x₁ − x₂‖), + nᵀ(x₁ − x₂) with
    n ~ N(0, σ² I_d) for ``ldp-bco2`` (Alg. 2 line 5)."""
    algo = policy["algo"]
    private = algo.startswith("ldp-")
    if algo in ONE_POINT_BCO:
        clean = min(max(float(losses[0]), 0.0), float(policy["loss_bound"]))
        return clean + float(rng.normal(0.0, bco_sigma(policy))) if private else clean
    dx = points[0] - points[1]
    bound = float(policy["lipschitz"]) * float(np.linalg.norm(dx))
    clean = min(max(float(losses[0]) - float(losses[1]), -bound), bound)
    if not private:
        return clean
    return clean + float(rng.normal(0.0, bco_sigma(policy), dx.shape[0]) @ dx)


def bco_row(version: int, u: np.ndarray, value: float) -> bytes:
    """§3.3: little-endian version (uint32), u (d float64), value (float64)."""
    return struct.pack(f"<I{u.shape[0] + 1}d", int(version), *map(float, u), float(value))


# ---------------------------------------------------------------------------------------------
# ldp-glb and adar-gope (protocol.md §3.3 "ldp-glb" / "adar-gope", §4 GLBModelMessage and
# PhaseModelMessage)


def choose_linear(model: dict, X: np.ndarray) -> int:
    """§4: argmax_a ⟨x_a, θ̃⟩ + β ‖x_a‖_{V⁻¹} (first maximum), ‖x‖²_{V⁻¹} by a linear solve."""
    theta, V = np.asarray(model["theta"], dtype=float), np.asarray(model["V"], dtype=float)
    widths = np.sqrt(np.einsum("ij,ji->i", X, np.linalg.solve(V, X.T)))
    return int(np.argmax(X @ theta + float(model["beta"]) * widths))


def glb_row(x: np.ndarray, r: float, model: dict, policy: dict,
            rng: np.random.Generator) -> tuple[list[float], bytes]:
    """§3.3 ``ldp-glb``: [v, upper(x xᵀ) + B, z x + ξ, (g(z) − r) x + ρ], z = ⟨x, θ̂_v⟩, noise
    N(0, σ²) per entry at Δ = ``glb_row_sensitivity``; v as uint32, the rest float64."""
    L, S = float(policy["L"]), float(policy["S"])
    sigma = analytic_gaussian_sigma(float(policy["epsilon"]), float(policy["delta"]),
                                    glb_row_sensitivity(L, S))
    z = float(x @ np.asarray(model["theta_hat"], dtype=float))
    clean = np.concatenate([upper(x), z * x, (1.0 / (1.0 + math.exp(-z)) - r) * x])
    noisy = clean + rng.normal(0.0, sigma, clean.shape)
    version = int(model["version"])
    return ([float(version), *noisy.tolist()],
            struct.pack(f"<I{noisy.shape[0]}d", version, *map(float, noisy)))


def seeded_arms(K: int, d: int, seed: int) -> np.ndarray:
    """§4 ``adar-gope``: x_a = (1/√2)(1, v_a), v_a the rows of default_rng(seed).normal((K, d−1))
    over their norms."""
    v = np.random.default_rng(seed).normal(size=(K, d - 1))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return np.concatenate([np.ones((K, 1)), v], axis=1) / math.sqrt(2)


def choose_phase_arm(model: dict, u: float) -> int:
    """§4: the first support arm a with u·Σw < Σ_{b≤a} w_b (left to right)."""
    total, acc = sum(model["weights"]), 0.0
    for a, w in zip(model["support"], model["weights"], strict=True):
        acc += w
        if u * total < acc:
            return int(a)
    raise ValueError("u·Σw reached no arm")


def gope_row(arm: int, phase: int, r: float) -> bytes:
    """§3.3 ``adar-gope``: arm (uint32), phase (uint32), reward (float64), little-endian."""
    return struct.pack("<IId", arm, phase, r)


# ---------------------------------------------------------------------------------------------
# Prio3 reports (protocol.md §5.5). Prio3SumVec itself is draft-irtf-cfrg-vdaf-20's: any
# implementation of it serves; this client uses the repository's core, which reproduces the
# draft's published test vectors byte for byte (tests/shared/crypto/prio3). Everything around
# it — parameters, context, nonce, encodings, the sealed helper share, the JSON — is built here
# from protocol.md alone.


def prio3_params(c: int, max_measurement: int) -> tuple[int, int, int]:
    """§5.5: (length, max_measurement, chunk_length) of a task's Prio3SumVec."""
    chunk = max(1, round((c * max_measurement.bit_length()) ** 0.5))
    return c, max_measurement, chunk


def honest_ranges(d: int, scale: float, L: float, encoding: str = "upper",
                  u_weight: float = 1.0, intercept: float | None = None
                  ) -> tuple[list[int], list[int]]:
    """§5.5: (lo_i, hi_i) of ddp-linucb's values under ``noise = "aggregators"``, in §3.5's
    order (upper triangle row by row, then the reward part)."""
    b = 1.0 if encoding == "upper" else math.sqrt(2)
    h = 0.5 if encoding == "centered" else 1.0
    w = 1.0 if encoding == "upper" else u_weight
    c = intercept if encoding == "centered" else None
    rho = math.sqrt(L * L - c * c) if c is not None else L
    lows: list[float] = []
    highs: list[float] = []
    for i in range(d):
        for j in range(i, d):
            if i == j:
                lo, hi = (c * c, c * c) if (c is not None and i == 0) else (0.0, rho * rho)
            elif c is not None and i == 0:
                lo, hi = -b * c * rho, b * c * rho
            else:
                lo, hi = -b * rho * rho / 2, b * rho * rho / 2
            lows.append(lo)
            highs.append(hi)
    for i in range(d):
        norm = (c if i == 0 else rho) if c is not None else L
        lows.append(-w * h * norm)
        highs.append(w * h * norm)
    return ([math.floor(scale * v) for v in lows], [math.ceil(scale * v) for v in highs])


def prio3_ranges_report(task: str, hpke_config: dict, maxima: list[int],
                        measurement: list[int] | None = None,
                        encoded: list[int] | None = None) -> dict[str, object]:
    """§5.5's SumVecRanges report (ddp-linucb, noise by the aggregators): ``measurement``
    entries z_i − lo_i in [0, M_i], or an arbitrary ``encoded`` vector (a forgery)."""
    from privbandit.shared.crypto.prio3.prio3 import prio3_sum_vec_ranges

    bits = max(m.bit_length() for m in maxima)
    vdaf = prio3_sum_vec_ranges(maxima, max(1, round((len(maxima) * bits) ** 0.5)))
    return _prio3_report(task, hpke_config, vdaf, measurement, encoded)


def prio3_report(task: str, hpke_config: dict, c: int, max_measurement: int,
                 measurement: list[int] | None = None, encoded: list[int] | None = None
                 ) -> dict[str, object]:
    """One ``Prio3Report`` of a ``measurement`` (entries in [0, M]: the counts, or ddp's v + O),
    or of an arbitrary ``encoded`` field vector (a forgery: what a script could send)."""
    from privbandit.shared.crypto.prio3.prio3 import prio3_sum_vec

    vdaf = prio3_sum_vec(*prio3_params(c, max_measurement))
    return _prio3_report(task, hpke_config, vdaf, measurement, encoded)


def _prio3_report(task: str, hpke_config: dict, vdaf: Any, measurement: list[int] | None,
                  encoded: list[int] | None) -> dict[str, object]:
    import hashlib
    import secrets

    ctx, nonce = task.encode("ascii"), secrets.token_bytes(16)
    meas = vdaf.flp.encode(measurement) if encoded is None else vdaf.field.vec(encoded)
    public, (leader, helper) = vdaf.shard_encoded(ctx, meas, nonce, secrets.token_bytes(128))
    assert public is not None
    public_share = b"".join(public)
    digest = hashlib.sha256(b"privbandit/prio3-public-share|" + public_share).digest()
    sealed = seal(b64d(hpke_config["public_key"]), hpke_config["key_id"], task,
                  nonce + digest + vdaf.encode_input_share(helper), "prio3-helper")
    return {"nonce": b64e(nonce), "public_share": b64e(public_share),
            "leader_share": b64e(vdaf.encode_input_share(leader)), "helper_share": sealed}
