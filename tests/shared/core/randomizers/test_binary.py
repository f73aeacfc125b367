"""Garcelon Alg. 2–3: exact ε0-LDP of the 0/1 randomizer and unbiasedness of its estimator."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privbandit.shared.core.randomizers.binary import (
    BinaryRandomizer,
    encode_values,
    flip_probability,
    n_coords,
    output_probability,
    randomized_response,
    unary_bits,
)


@pytest.mark.parametrize("eps0,d,m", [(0.5, 1, 2), (4.0, 1, 2), (2.0, 1, 1), (8.0, 2, 1)])
def test_exact_ldp_ratio_is_e_eps0(eps0: float, d: int, m: int) -> None:
    """max over inputs and outputs of P(out | b)/P(out | b') is exactly e^{ε0} (Prop. 4)."""
    n = n_coords(d) * m
    p = flip_probability(eps0, d, m)
    words = np.array(list(itertools.product([0, 1], repeat=n)), dtype=np.uint8)
    # P[out, input] for every bit input and output.
    probs = output_probability(words[:, None, :], words[None, :, :], p)
    assert np.allclose(probs.sum(axis=0), 1.0)
    worst = (probs.max(axis=1) / probs.min(axis=1)).max()
    assert worst == pytest.approx(math.exp(eps0), rel=1e-9)


def test_randomized_response_matches_exact_law() -> None:
    """The sampler draws from the law ``output_probability`` states (χ² over 16 outcomes)."""
    rng = np.random.default_rng(11)
    p = flip_probability(1.0, 1, 2)
    bits = np.array([1, 0, 1, 1], dtype=np.uint8)
    draws = randomized_response(np.broadcast_to(bits, (200_000, 4)).copy(), p, rng)
    codes = draws @ (1 << np.arange(4))
    freq = np.bincount(codes, minlength=16)
    words = ((np.arange(16)[:, None] >> np.arange(4)) & 1).astype(np.uint8)
    expected = 200_000 * output_probability(words, bits[None, :], p)
    chi2 = ((freq - expected) ** 2 / expected).sum()
    assert chi2 < 37.7  # 99.9% quantile of χ²(15)


def test_unary_encoding_mean() -> None:
    """E[Σ_k b_k] = m v (Alg. 2), within 5 standard errors per value."""
    rng = np.random.default_rng(5)
    v = np.array([[0.0, 0.13, 0.5, 0.77, 1.0]])
    m = 4
    reps = 40_000
    counts = unary_bits(np.repeat(v, reps, axis=0), m, rng).sum(axis=2)
    mean = counts.mean(axis=0)
    se = counts.std(axis=0) / math.sqrt(reps) + 1e-12
    assert (np.abs(mean - m * v[0]) <= 5 * se + 1e-12).all()
    # Unary: ones come first.
    bits = unary_bits(v, m, rng)[0]
    assert (np.diff(bits.astype(int), axis=1) <= 0).all()


@pytest.mark.parametrize("m", [1, 3])
def test_debiased_estimates_are_unbiased(m: int) -> None:
    """Mean of many debiased (G̃, ũ) equals (Σ x xᵀ, Σ r x) within 4.5 standard errors."""
    d, n, reps = 3, 40, 3000
    rng = np.random.default_rng(123)
    x = rng.normal(size=(n, d))
    x *= (rng.random((n, 1)) * 0.9 + 0.1) / np.linalg.norm(x, axis=1, keepdims=True)
    r = rng.random(n)
    rz = BinaryRandomizer(d, eps0=3.0, m=m, L=1.0)
    G_true, u_true = x.T @ x, x.T @ r
    rows = rz.randomize(np.tile(x, (reps, 1)), np.tile(r, reps), rng)
    counts = rz.counts(rows).reshape(reps, n, -1).sum(axis=1)
    Gs = np.empty((reps, d, d))
    us = np.empty((reps, d))
    for i in range(reps):
        est = rz.estimate(counts[i], n)
        Gs[i], us[i] = est.G, est.u
    for est, truth in ((Gs, G_true), (us, u_true)):
        se = est.std(axis=0, ddof=1) / math.sqrt(reps)
        assert (np.abs(est.mean(axis=0) - truth) <= 4.5 * se).all()
    # The sub-Gaussian proxy used by the confidence widths bounds the actual variance. Near p = 1
    # every bit is almost a fair coin and the bound is nearly tight, so allow 4 standard errors of
    # a variance estimate (relative s.e. √(2/(reps−1))).
    tol = 1 + 4 * math.sqrt(2 / (reps - 1))
    assert Gs.var(axis=0).max() <= n * rz.matrix_proxy() * tol
    assert us.var(axis=0).max() <= n * rz.vector_proxy() * tol


def test_encoded_values_in_unit_interval() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 4))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    v = encode_values(x, rng.random(100), 1.0)
    assert v.shape == (100, n_coords(4))
    assert v.min() >= 0 and v.max() <= 1


def test_wire_form_round_trip_and_rejections() -> None:
    rz = BinaryRandomizer(5, eps0=2.0, m=2)
    rng = np.random.default_rng(1)
    rows = rz.randomize(np.full((3, 5), 0.2), np.array([0.0, 0.5, 1.0]), rng)
    for row in rows:
        data = rz.to_bytes(row)
        assert len(data) == math.ceil(rz.width / 8)
        assert np.array_equal(rz.from_bytes(data), row)
    with pytest.raises(ValueError):
        rz.from_bytes(b"\x00" * (len(data) + 1))
    if rz.width % 8:
        bad = bytearray(data)
        bad[-1] |= 1  # a padding bit set
        with pytest.raises(ValueError):
            rz.from_bytes(bytes(bad))
    with pytest.raises(ValueError):
        rz.randomize(np.full((1, 5), 1.0), np.array([0.5]), rng)  # ||x|| > L


def test_flip_probability_formula() -> None:
    """p = 2/(exp(2ε0/(m d(d+3))) + 1), computed stably."""
    for eps0, d, m in [(1.0, 5, 1), (32.0, 5, 1), (1e-4, 10, 3)]:
        direct = 2 / (math.exp(2 * eps0 / (m * d * (d + 3))) + 1)
        assert flip_probability(eps0, d, m) == pytest.approx(direct, rel=1e-12)
