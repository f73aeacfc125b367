"""The environments of issue 9: fixed-linear, logistic, and letter loaded with no network."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from privbandit.shared.core.environments import make_environment
from privbandit.shared.core.environments.letter import load_letter
from privbandit.shared.core.environments.logistic import LOGIT_SCALE
from tests.helpers import patience

ROOT = Path(__file__).resolve().parents[3]


def test_fixed_linear_gives_every_user_the_same_arms_without_copies() -> None:
    env = make_environment("fixed-linear", 5, 10_000, np.random.default_rng(0))
    X, mu = env.contexts(4096)
    assert X.shape == (4096, 10_000, 5) and X.strides[0] == 0 and mu.strides[0] == 0
    assert np.array_equal(X[0], env.fixed_arms) and np.array_equal(X[-1], env.fixed_arms)
    assert np.allclose(np.linalg.norm(env.fixed_arms, axis=1), 1.0)
    assert np.allclose(mu[0], env.fixed_arms @ env.theta)
    assert (mu[0] >= 0).all() and (mu[0] <= 1).all()
    env.unread(X[10:], mu[10:])  # nothing to push back: users are indistinguishable
    assert np.array_equal(env.contexts(3)[0][0], env.fixed_arms)


def test_fixed_linear_arms_are_drawn_once_per_run() -> None:
    a = make_environment("fixed-linear", 5, 100, np.random.default_rng(1)).fixed_arms
    b = make_environment("fixed-linear", 5, 100, np.random.default_rng(1)).fixed_arms
    c = make_environment("fixed-linear", 5, 100, np.random.default_rng(2)).fixed_arms
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(ValueError, match="at most"):
        make_environment("fixed-linear", 5, 10_001, np.random.default_rng(0))


def test_logistic_means_are_the_logistic_of_the_logit_and_cover_its_range() -> None:
    env = make_environment("logistic", 5, 20, np.random.default_rng(3))
    X, mu = env.contexts(20_000)
    assert np.allclose(mu, expit(X @ env.theta))
    assert np.linalg.norm(env.theta) == pytest.approx(np.sqrt(2) * LOGIT_SCALE)
    lo, hi = expit(-LOGIT_SCALE), expit(LOGIT_SCALE)
    assert mu.min() >= lo - 1e-12 and mu.max() <= hi + 1e-12
    # Means reach within 0.02 of both ends of their range (400,000 arms).
    assert mu.min() < lo + 0.02 and mu.max() > hi - 0.02


def test_letter_is_the_uci_data() -> None:
    data, labels = load_letter()
    assert data.shape == (20_000, 16) and data.min() == 0 and data.max() == 15
    counts = np.bincount(labels, minlength=26)
    assert counts.sum() == 20_000 and counts[0] == 789 and counts[25] == 734  # UCI: A 789, Z 734
    env = make_environment("letter", 52, 26, np.random.default_rng(0))
    X, mu = env.contexts(100)
    assert X.shape == (100, 26, 52) and np.allclose(np.linalg.norm(X, axis=2), 1.0)
    assert np.array_equal(mu.sum(axis=1), np.ones(100))


def test_letter_loads_with_the_network_disabled() -> None:
    """A child process whose sockets cannot be created and whose proxies point at a dead port
    builds the letter environment: nothing is downloaded."""
    code = textwrap.dedent("""
        import socket
        def refuse(*a, **k):
            raise OSError("network disabled in this test")
        socket.socket = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        import numpy as np
        from privbandit.shared.core.environments import make_environment
        env = make_environment("letter", 52, 26, np.random.default_rng(0))
        print(env.labels.shape[0], env.K, env.d)
    """)
    dead = "http://127.0.0.1:9"
    env = {"PATH": "/usr/bin:/bin", "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "ALL_PROXY": dead,
           "http_proxy": dead, "https_proxy": dead, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=patience(120))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["20000", "26", "52"]
