"""The browser library (clients/web, issue 41) against the Python implementation, both ways: a
node process runs the built bundle (clients/web/test/interop-tool.mjs) and the Python side

- counts its prio3 reports in the real shuffler and analyzer apps (in process): sblb's 0/1
  counts (the analyzer's state equal to the policy fed their sum) and ddp-linucb's rounded
  statistics (SumVecRanges over the honest ranges, issue 40), verified by the aggregators'
  Prio3 exchange; and verifies ddp-linucb's reports with the Prio3 code directly, under every
  encoding, unsharding to the values' exact sum;
- opens its sealed rows with the analyzer's code and reads them with the randomizers'
  ``from_bytes`` (ldp-linucb under every encoding, sblb's packed bits);
- finds its decisions equal to ``Model.decide_one`` on the same models and contexts, and its
  numerics (log Φ, the analytic Gaussian σ, the flip probability, ddp's clean statistics) equal
  to the Python functions' within stated tolerances.

Skipped only where ``node`` is not installed; ``make test`` builds the bundle first
(``npm ci`` and ``npm run build`` in clients/web)."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from scipy.special import log_ndtr

from privbandit.shared.core.accounting.gaussian import gaussian_sigma
from privbandit.shared.core.policies import build_policy, randomizer_for
from privbandit.shared.core.policies.model import Model
from privbandit.shared.core.randomizers.binary import BinaryRandomizer, flip_probability
from privbandit.shared.core.randomizers.gaussian import GaussianRandomizer
from privbandit.shared.core.randomizers.privunit import PrivUnitRandomizer
from privbandit.shared.core.randomizers.skellam import SkellamRandomizer
from privbandit.shared.crypto.hpke import open_report, unpack_report
from privbandit.shared.crypto.prio3_task import open_helper, task_vdaf
from privbandit.shared.protocol.messages import EncryptedReport, b64decode
from privbandit.shared.protocol.prio3 import Prio3Report
from tests.helpers import assert_same_state, eventually
from tests.services.prio3.support import acked, ddp_prio3_task, prio3_task, settings_for, stack

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "clients" / "web"
NODE = shutil.which("node") or "node"
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def node(*jobs: dict[str, Any]) -> list[Any]:
    """Run ``jobs`` in one node process with the built library; its results, in order."""
    bundle = WEB / "dist" / "privbandit.js"
    if not bundle.exists():
        assert (WEB / "node_modules").exists(), "run `npm ci` in clients/web (make test does)"
        subprocess.run([NODE, "build.mjs"], cwd=WEB, check=True)
    done = subprocess.run([NODE, "test/interop-tool.mjs"], cwd=WEB, check=True,
                          input=json.dumps({"jobs": list(jobs)}), capture_output=True, text=True)
    results: list[Any] = json.loads(done.stdout)["results"]
    return results


def key_pair() -> tuple[X25519PrivateKey, dict[str, Any]]:
    sk = X25519PrivateKey.generate()
    public = sk.public_key().public_bytes_raw()
    return sk, {"key_id": hashlib.sha256(public).digest()[0], "public_key": public.hex()}


def unit_rows(rng: np.random.Generator, n: int, d: int, radius: float = 1.0) -> np.ndarray:
    x = rng.normal(size=(n, d))
    return radius * x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True))


L = 10
SBLB = prio3_task("sum", l=L, eps0=4.0, m=2)
DDP = ddp_prio3_task("ddp", l=L, honest_fraction=0.8)


async def test_prio3_reports_made_in_node_are_verified_and_counted(tmp_path: Path) -> None:
    async with stack(settings_for(tmp_path, [SBLB, DDP])) as s:
        hconf = (await s.analyzer.get("/v1/hpke-config")).json()
        key = {"key_id": hconf["key_id"], "public_key": b64decode(hconf["public_key"]).hex()}
        pol = (await s.analyzer.get("/v1/tasks/sum")).json()["policy"]
        rng = np.random.default_rng(41)
        x, r = unit_rows(rng, L, 3), rng.uniform(size=L)
        sblb = node(*({"op": "sblb_prio3", "task": "sum", "d": 3, "eps0": pol["eps0"],
                       "m": pol["m"], "L": pol["L"], "x": xi.tolist(), "r": float(ri), **key}
                      for xi, ri in zip(x, r, strict=True)))
        rz = randomizer_for(DDP.policy)
        assert isinstance(rz, SkellamRandomizer) and rz.aggregated_noise
        ddp = node(*(ddp_job("ddp", rz, xi, float(ri), key) for xi, ri in zip(x, r, strict=True)))
        for task, made in (("sum", sblb), ("ddp", ddp)):
            body = {"reports": [m["report"] for m in made]}
            got = await s.shuffler.post(f"/v1/tasks/{task}/prio3-reports", json=body)
            assert got.status_code == 202, got.text
            await eventually(lambda task=task: acked(s.shuffler, 1, task))
            p = await s.privacy(task)
            assert (p.reports_counted, p.reports_refused) == (L, 0)
        # sblb's sum is released as it is; ddp-linucb's carries the aggregators' noise (its exact
        # sum: test_ddp_reports_verify_and_unshard_to_their_sum)
        policy = build_policy(SBLB.policy, np.random.default_rng(0))
        policy.ingest_statistic(np.asarray([m["counts"] for m in sblb]).sum(axis=0), L)
        assert_same_state(s.analyzer_app.state.runtime.tasks["sum"].policy.get_state(),
                          policy.get_state())


def ddp_job(task: str, rz: SkellamRandomizer, x: np.ndarray, r: float,
            key: dict[str, Any]) -> dict[str, Any]:
    params = {"d": rz.d, "scale": rz.scale, "L": rz.L, "encoding": rz.encoding,
              "u_weight": rz.u_weight}
    if rz.intercept is not None:
        params["intercept"] = rz.intercept
        params["intercept_coords"] = list(rz.intercept_coords)
    return {"op": "ddp_prio3", "task": task, "params": params, "x": x.tolist(), "r": r, **key}


DDP_ENCODINGS: list[dict[str, Any]] = [
    {}, {"encoding": "frobenius", "u_weight": 1.5},
    {"encoding": "centered", "u_weight": 1.5, "intercept": 0.6},
    # per-arm (disjoint) features: K = 2 blocks of 3, each starting with the intercept
    {"encoding": "centered", "u_weight": 1.5, "intercept": 0.7071067811865476, "d": 6,
     "intercept_coords": [0, 3]},
]


def ddp_contexts(enc: dict[str, Any], rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """n unit contexts of the encoding: c = (c₀, rest) with c₀ the intercept and ‖c‖ = 1, placed
    in block a = i mod K of e_a ⊗ c (0 elsewhere) under per-arm intercept coordinates; on the
    sphere without an intercept (the ranges' edges)."""
    if "intercept" not in enc:
        x = unit_rows(rng, n, d)
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    c0 = enc["intercept"]
    coords = enc.get("intercept_coords", [0])
    p = d // len(coords)
    block = unit_rows(rng, n, p)
    block[:, 1:] *= math.sqrt(1 - c0 * c0) / np.linalg.norm(block[:, 1:], axis=1, keepdims=True)
    block[:, 0] = c0
    x = np.zeros((n, d))
    for i in range(n):
        a = i % len(coords)
        x[i, a * p:(a + 1) * p] = block[i]
    return x


@pytest.mark.parametrize("enc", DDP_ENCODINGS,
                         ids=["upper", "frobenius", "centered", "centered-per-arm"])
def test_ddp_reports_verify_and_unshard_to_their_sum(enc: dict[str, Any]) -> None:
    """ddp-linucb (issue 40): the library's honest ranges are ``entry_ranges``'s, its statistics
    the Python device's, its values their randomized rounding; its SumVecRanges reports pass both
    aggregators' verification under the task's ``task_vdaf``, and unshard to the values' sum —
    per-arm features with an intercept in every block (``intercept_coords``) included."""
    sk, key = key_pair()
    cfg = ddp_prio3_task("ddp", l=L, scale=64.0, **enc)
    rz = randomizer_for(cfg.policy)
    assert isinstance(rz, SkellamRandomizer) and rz.aggregated_noise
    vd = task_vdaf(cfg)
    rng = np.random.default_rng(12)
    x, r = ddp_contexts(enc, rng, 6, rz.d), rng.uniform(size=6)
    r[:2] = (0.0, 1.0)
    assert tuple(rz.intercept_coords) == tuple(enc.get("intercept_coords", (0,)))
    made = node(*(ddp_job("ddp", rz, xi, float(ri), key) for xi, ri in zip(x, r, strict=True)))
    assert made[0]["lo"] == rz.range_lo.tolist() and made[0]["hi"] == rz.range_hi.tolist()
    want = rz.statistics(x, r)
    v, verify_key = vd.vdaf, bytes(32)
    outs = []
    for m, w in zip(made, want, strict=True):
        np.testing.assert_allclose(m["statistics"], w, rtol=1e-12, atol=1e-15)
        y = np.clip(rz.scale * w, rz.range_lo, rz.range_hi)
        assert all(z in (math.floor(a), math.ceil(a)) for z, a in zip(m["z"], y, strict=True))
        assert m["norm_bound"] == pytest.approx(rz.norm_bound, rel=1e-12)
        rep = Prio3Report.model_validate(m["report"])
        nonce, public_share = b64decode(rep.nonce), b64decode(rep.public_share)
        helper = open_helper(sk, key["key_id"], "ddp", nonce, public_share, rep.helper_share)
        leader = v.decode_input_share(0, b64decode(rep.leader_share))
        public = v.decode_public_share(public_share)
        states, shares = zip(*(v.verify_init(verify_key, vd.ctx, j, nonce, public, share)
                               for j, share in enumerate((leader, helper))), strict=True)
        message = v.verifier_shares_to_message(vd.ctx, shares)
        outs.append(v.merge([v.verify_next(s, message) for s in states]))
    total = v.unshard([v.aggregate(outs)], len(made))
    assert vd.statistic(total, len(made)).tolist() == np.sum([m["z"] for m in made],
                                                               axis=0).tolist()


ENCODINGS: list[dict[str, Any]] = [
    {"encoding": "plain"},
    {"encoding": "frobenius", "u_weight": 1.5},
    {"encoding": "centered", "u_weight": 1.5, "intercept": 0.6},
    {"encoding": "centered-upper", "u_weight": 0.8, "intercept": 0.6},
]


def contexts_for(enc: dict[str, Any], rng: np.random.Generator, n: int, d: int, L: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """n contexts (x₀ = c under an intercept, the rest within √(L² − c²)) and rewards."""
    x = unit_rows(rng, n, d, L)
    if "intercept" in enc:
        c = enc["intercept"]
        x[:, 1:] *= math.sqrt(L * L - c * c) / np.maximum(np.linalg.norm(x[:, 1:], axis=1,
                                                                         keepdims=True), 1.0)
        x[:, 0] = c
    return x, rng.uniform(size=n)


@pytest.mark.parametrize("mechanism", ["gaussian", "privunit"])
@pytest.mark.parametrize("enc", ENCODINGS, ids=[e["encoding"] for e in ENCODINGS])
def test_ldp_rows_sealed_in_node_open_and_are_admissible(enc: dict[str, Any],
                                                         mechanism: str) -> None:
    """Both ldp-linucb reports: the Gaussian row (σ as the Python device's) and PrivUnit's
    (``mechanism = "privunit"``, issue 44 item 5: on the Python analyzer's sphere r/m, its
    constant entry exact) pass the Python analyzer's admissibility check."""
    sk, key = key_pair()
    d, L = 4, 1.2
    params = {"d": d, "epsilon": 2.0, "delta": 1e-6, "L": L, **enc}
    rng = np.random.default_rng(7)
    x, r = contexts_for(enc, rng, 5, d, L)
    pu = mechanism == "privunit"
    made = node(*({"op": "privunit_sealed" if pu else "ldp_sealed", "task": "ldp",
                   "params": params, "x": xi.tolist(), "r": float(ri), **key}
                  for xi, ri in zip(x, r, strict=True)))
    args = (d, 2.0, L, enc["encoding"], enc.get("u_weight", 1.0), enc.get("intercept"))
    py = PrivUnitRandomizer(*args) if pu else GaussianRandomizer(d, 2.0, 1e-6, *args[2:])
    for m in made:
        if pu:
            assert m["norm"] == pytest.approx(py.norm, rel=1e-12)
        else:
            assert m["sigma"] == pytest.approx(py.sigma, rel=1e-9)
        plaintext = open_report(sk, key["key_id"], "ldp", EncryptedReport(**m["report"]))
        _, row = unpack_report(plaintext, 8 * py.width)
        np.testing.assert_array_equal(py.from_bytes(row), m["row"])


def test_sblb_bits_sealed_in_node_open_and_read_back() -> None:
    sk, key = key_pair()
    rng = np.random.default_rng(8)
    x, r = unit_rows(rng, 3, 3), rng.uniform(size=3)
    made = node(*({"op": "sblb_sealed", "task": "bits", "d": 3, "eps0": 2.0, "m": 3, "L": 1.0,
                   "x": xi.tolist(), "r": float(ri), **key} for xi, ri in zip(x, r, strict=True)))
    py = BinaryRandomizer(3, 2.0, 3, 1.0)
    for m in made:
        plaintext = open_report(sk, key["key_id"], "bits", EncryptedReport(**m["report"]))
        _, row = unpack_report(plaintext, (py.width + 7) // 8)
        assert py.from_bytes(row).tolist() == m["bits"]


def test_decisions_equal_the_python_devices() -> None:
    rng = np.random.default_rng(9)
    cases, want = [], []
    for i in range(200):
        d, K = int(rng.integers(1, 8)), int(rng.integers(2, 12))
        A = rng.normal(size=(d + 3, d))
        V = float(rng.uniform(0.1, 2)) * np.eye(d) + A.T @ A
        V = (V + V.T) / 2
        theta = rng.normal(size=d)
        beta = 0.0 if i % 5 == 0 else float(rng.uniform(0, 3))
        X = unit_rows(rng, K, d)
        if i % 3 == 0:  # an exact tie: the best arm twice (the lowest index wins)
            X[K - 1] = X[int(np.argmax(X @ theta))]
        model = Model(version=i, theta=theta, V=V, beta=beta, reports=0)
        cases.append({"model": {"version": i, "theta": theta.tolist(), "V": V.tolist(),
                                "beta": beta}, "X": X.tolist()})
        want.append(model.decide_one(X))
    (got,) = node({"op": "decide", "cases": cases})
    assert got == want


def test_numerics_equal_the_python_functions() -> None:
    xs = [float(v) for v in np.concatenate([np.linspace(-60, 10, 141), [-1e-300, 0.0, 0.3]])]
    sigma_cases = [(1.0, 1e-6, math.sqrt(4.5)), (0.1, 1e-9, 2.0), (8.0, 1e-5, 1.0),
                   (0.5, 1e-3, 3.7)]
    flips = [(4.0, 3, 1), (1.0, 5, 4), (0.01, 10, 2)]
    ndtr, sigmas, flip = node({"op": "log_ndtr", "xs": xs},
                              {"op": "sigma", "cases": sigma_cases},
                              {"op": "flip", "cases": flips})
    np.testing.assert_allclose(ndtr, log_ndtr(np.asarray(xs)), rtol=1e-13, atol=1e-300)
    for got, case in zip(sigmas, sigma_cases, strict=True):
        assert got == pytest.approx(gaussian_sigma(*case), rel=1e-12)
    for got, case in zip(flip, flips, strict=True):
        assert got == pytest.approx(flip_probability(*case), rel=1e-15)
