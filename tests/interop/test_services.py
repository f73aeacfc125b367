"""Service-level interop: reports built by the independent client (tests/interop/client.py, from
docs/protocol.md alone: pyhpke, numpy randomizers, plain-integer Paillier) are POSTed over real
HTTP to real shuffler and analyzer processes, and counted exactly as the project's own client's.

The deployment holds every task kind of the default configuration
(``shared/defaults/privbandit.toml``) twice: ``<id>`` for the project's client and
``<id>-interop`` for the independent one, with the same parameters. The independent client
draws each user's (x, r) and randomizes it itself; the project's client sends the very same
randomized rows (or counts) with its own encoding, sealing and Paillier code. Reports go in
chunks of one batch (l reports), each chunk to both tasks, and the next chunk only once both
analyzers counted the last one: so each batch has the same members in both tasks and the
analyzer does the same arithmetic in the same order, and the comparison is exact — equal
counts, equal published models, equal stored statistics, bit for bit. The exceptions are what
the analyzer draws from its own OS CSPRNG, different per task by design (``NOISY``): AdaR-OFUL's
θ̃ (central linear tasks; V, the exact sums and β are compared) and AdaR-UCB's released noisy
episode means, hence the arm of the episode that follows the last one released.

Multi-armed tasks are played adaptively, one user at a time: the independent client reads the
``-interop`` twin's published ``ArmModelMessage`` (after the previous user's report was counted),
chooses the arm by §4's rule with the user's own uniform (every third user holds the model one
report older: a stale device), draws her reward (and, for HeLDP, her own ε_t from the task's
``epsilon_dist``), randomizes per §3.3's table, and both clients send that same row. AdaR-UCB is
run through its initial phase only (each arm's one-report episode, in order, with stale reports
between them): that phase is deterministic, while every later episode's arm is the argmax of
noisy indices, so the twins would — correctly — start to disagree on which reports are stale.

Bandit-convex-optimisation tasks (``ldp-bco``, ``ldp-bco2``) are played the same way: the
independent client reads the twin's ``BCOModelMessage`` (every third user the one a report older:
§3.3 says the analyzer keeps a version while its reports arrive, and rebuilds a stale report's
gradient from that version), draws u on the unit sphere, plays y + δAu or y ± ρu, evaluates the
user's own quadratic loss there, randomizes it (Zheng et al. Alg. 1 / Alg. 2 line 5) and packs
[version, u, value]. The analyzer draws nothing for these tasks (its gradient step is
deterministic in the rows), so models and stored state are compared whole.

``ldp-glb`` is played the same way, publishing after every report at test size: the independent
client reads the twin's ``GLBModelMessage`` (every third user the one a report older), chooses
from (θ̃, V, β) among her own features, and builds §3.3's row anchored at that model's θ̂ and
naming its version; the analyzer's steps are deterministic in the rows, so everything is
compared. ``adar-gope`` users all hold the latest ``PhaseModelMessage`` (it changes once per
phase) and draw their arm from its design by §4's rule; the run covers phase 1 and the first
``GOPE_PHASE_2`` reports of phase 2. The analyzer's phase-end noise differs per twin (only the
play-order seed it draws is excluded from the comparison): at the test's ε = 10⁶ it is far too
small to change which arms are eliminated, so the phase-2 designs are compared exactly too.

``ddp-linucb`` (distributed DP): the independent client computes each user's rounded statistics
in the task's encoding (``demo-ddp``: ``frobenius``, its default; the derived ``demo-ddp-upper``:
the original ``upper``) and adds a Skellam share of the variance the task's ledger states (§3.5),
packs the signed values as digits v + O under the published layout (§5.3) and encrypts them; the
project's client encrypts the same values. The analyzer draws nothing for this task, so models and
stored state are compared whole, the plain-integer decryption gives the signed values and their
sum, and the analyzer's (G̃, ũ) is the client's own §3.5 reading of that sum (weights divided out).

Test-size changes to the default tasks (so a run takes seconds): shuffle batch size l = 10
instead of 1000 (also for ``ddp-linucb``) and LDP updates every 10 reports instead of 100; and
the shuffle task also runs with the ``reports`` transport at m = 2, so that the multi-bit unary
rounding and bit packing of §3.4 are exercised too (the default is secure-sum at m = 1).
"""

from __future__ import annotations

import copy
import json
import math
import sqlite3
import time
import tomllib
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tomli_w

from privbandit.launcher import SERVICES, Cluster, free_ports
from privbandit.shared.core.policies import build_policy
from privbandit.shared.protocol.messages import HpkeConfig
from privbandit.shared.protocol.paillier import PaillierConfig
from privbandit.shared.settings import TaskConfig
from tests.helpers import E2E_TOKEN, deadline, encrypt_counts, encrypt_rows, patience
from tests.interop import client

pytestmark = pytest.mark.slow

SUFFIX = "-interop"
SHUFFLE_L = 10
# Task kind → (task id in the deployment, reports per client). Linear kinds are named by threat
# model or transport, multi-armed ones (MAB_KINDS) by their algo. A new kind is one entry here
# (and, if its rows are new, one case in client.py).
KINDS = {
    "ldp": ("demo-ldp", 30),
    "central": ("demo-central", 30),
    "reports": ("demo-shuffle-reports", 3 * SHUFFLE_L),
    "secure-sum": ("demo-shuffle", 2 * SHUFFLE_L),
    "ddp": ("demo-ddp", 2 * SHUFFLE_L),
    "ucb": ("demo-ucb", 20),
    "heldp-ucb-l": ("demo-heldp-l", 20),
    "heldp-ucb-b": ("demo-heldp", 30),
    "ldp-mab": ("demo-ldp-mab", 20),
    "adar-ucb": ("demo-adar-ucb", 14),  # K = 10 fresh users and 4 stale: the initial phase only
    "ldp-bco": ("demo-ldp-bco", 15),
    "ldp-bco2": ("demo-ldp-bco2", 15),
    "ldp-glb": ("demo-ldp-glb", 30),
    "adar-gope": ("demo-adar-gope", 0),  # phase 1 and GOPE_PHASE_2 users of phase 2 (below)
    # demo-ddp runs the centered encoding (its default, "auto" with the linear contexts'
    # intercept); this derived twin the original upper.
    "ddp-upper": ("demo-ddp-upper", 2 * SHUFFLE_L),
}
DDP_KINDS = {"ddp", "ddp-upper"}
SUM_KINDS = {"secure-sum", *DDP_KINDS}  # the paillier transport: Paillier-encrypted reports
MAB_KINDS = {"ucb", "heldp-ucb-l", "heldp-ucb-b", "ldp-mab", "adar-ucb"}
BCO_KINDS = {"ldp-bco", "ldp-bco2"}
STALE_EVERY = 3  # every third multi-armed, BCO or GLB user holds the model one report older
# AdaR-GOPE publishes once per phase: its users all hold the latest model (module docstring).
FRESH_ONLY = {"adar-gope"}
GOPE_PHASE_2 = 8
# Fields the analyzer computes from its own CSPRNG noise (module docstring): not compared.
NOISY = {"central": ("theta", "noise"), "adar-ucb": ("released", "arm"),
         "adar-gope": ("order_seed",)}
WAIT = 60.0  # seconds before a wait for the analyzer fails the test (it never gates a pass)


# AdaR-GOPE at test size: short phases, and noise so small (ε = 10⁶: σ_N ≈ 10⁻³) that both twins
# eliminate the same arms at the end of phase 1 (their noise draws differ, by design).
GOPE_TEST = {"epsilon": 1e6, "confidence_scale": 0.1}


def reports_of(kind: str) -> int:
    """Users per client for a kind: ``KINDS``, or for AdaR-GOPE its phase-1 length (from the
    published model) plus ``GOPE_PHASE_2``."""
    n = KINDS[kind][1]
    if kind != "adar-gope":
        return n
    task = next(t for t in interop_tasks() if t["id"] == KINDS[kind][0])
    return int(build_policy(TaskConfig.model_validate(task).policy).model.length) + GOPE_PHASE_2


def interop_tasks() -> list[dict[str, Any]]:
    """The default configuration's tasks at test size, plus the ``reports`` variant (module
    docstring), each with its ``-interop`` twin."""
    defaults = resources.files("privbandit.shared") / "defaults"
    text = (defaults / "privbandit.toml").read_text("utf-8")
    base = {t["id"]: t for t in tomllib.loads(text)["tasks"]}
    # sblb-fixed sends exactly sblb's reports over the same transport (it differs only in when
    # the analyzer publishes): demo-shuffle's case covers its wire format.
    assert base["demo-shuffle-fixed"]["policy"]["algo"] == "sblb-fixed"
    assert {k: v for k, v in base["demo-shuffle-fixed"].items() if k not in ("id", "policy")} \
        == {k: v for k, v in base["demo-shuffle"].items() if k not in ("id", "policy")}
    del base["demo-shuffle-fixed"]
    # ddp-glb (issue 44) sends ddp-linucb's rows over the same transport, with other statistics
    # in them (randomizers.glm_skellam); the independent client does not compute them yet, so
    # its wire format is covered by ddp-linucb's case and its statistics by the services test
    # (tests/services/paillier/test_ddp_glb.py), not here.
    assert base["demo-ddp-glb"]["aggregation"] == base["demo-ddp"]["aggregation"]
    del base["demo-ddp-glb"]
    covered = {task for task, _ in KINDS.values()}
    uncovered = {i: f"{t['threat_model']}/{t['policy']['algo']}" for i, t in base.items()
                 if i not in covered}
    assert not uncovered, f"default tasks of kinds with no interop case (add them): {uncovered}"
    shuffle, ldp = base["demo-shuffle"], base["demo-ldp"]
    assert shuffle["aggregation"] == base["demo-ddp"]["aggregation"] == "secure-sum"
    # Fixed batches of SHUFFLE_L (the growing schedules of demo-ddp and demo-shuffle are the
    # services' own tests'), and demo-shuffle at a fixed ε0 the client reads from the task (its
    # default ε0 per batch length comes from the accountant, which the client does not run).
    base["demo-ddp"]["policy"].pop("batch_schedule", None)
    # The twins compare the Paillier transport (the prio3 one: tests/interop/test_prio3.py).
    shuffle["secure_sum"] = base["demo-ddp"]["secure_sum"] = "paillier"
    # Paillier takes ddp-linucb's device-share design (the aggregators' noise needs prio3).
    base["demo-ddp"]["policy"]["noise"] = "devices"
    for key in ("batch_schedule", "epsilon", "accountant"):
        shuffle["policy"].pop(key, None)
    shuffle["policy"].update(eps0=30.0, m=1)
    shuffle["policy"]["batch_size"] = base["demo-ddp"]["policy"]["batch_size"] = SHUFFLE_L
    ldp["policy"]["update_every"] = 10
    # The twins' models are compared exactly: no analyzer-drawn perturbation of θ̃ (issue 22).
    ldp["policy"]["perturb"] = 0.0
    base["demo-ldp-glb"]["policy"]["update_every"] = 1
    base["demo-adar-gope"]["policy"].update(GOPE_TEST)
    # AdaR-OFUL's first release after 10 reports, not the demo's 250: a model within 30 users.
    base["demo-central"]["policy"]["first_episode"] = 10
    reports = copy.deepcopy(shuffle)
    reports.update(id="demo-shuffle-reports", aggregation="reports")
    reports["policy"]["m"] = 2
    # §3.5's encodings: demo-ddp's own (auto = centered with its intercept, its practical
    # default) and the original.
    assert base["demo-ddp"]["policy"]["encoding"] == "auto"
    assert base["demo-ddp"]["policy"]["intercept"] > 0
    # §3.3's centered report: demo-ldp's own (auto with its intercept, its practical default).
    assert ldp["policy"]["encoding"] == "auto"
    assert ldp["policy"]["intercept"] == pytest.approx(2**-0.5, rel=1e-15)
    upper = copy.deepcopy(base["demo-ddp"])
    upper["id"] = "demo-ddp-upper"
    upper["policy"]["encoding"] = "upper"
    tasks = [*base.values(), reports, upper]
    return tasks + [{**copy.deepcopy(t), "id": t["id"] + SUFFIX} for t in tasks]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Analyzer and shuffler processes (no device service: both clients here are devices)."""
    root = tmp_path_factory.mktemp("interop")
    config = root / "interop.toml"
    config.write_text(tomli_w.dumps({
        "shuffler_token": E2E_TOKEN, "retry_initial": 0.05, "retry_max": 0.5,
        "log_level": "warning", "tasks": interop_tasks(),
    }))
    ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
    with Cluster(root / "data", ports, config=config, log_dir=root / "logs") as cluster:
        cluster.start(["analyzer", "shuffler"], timeout=patience(60))
        yield cluster


@pytest.fixture(scope="module")
def http(deployment: Cluster) -> Iterator[httpx.Client]:
    with httpx.Client(timeout=patience(30)) as c:
        until = deadline(WAIT)
        while not c.get(f"{deployment.urls['shuffler']}/healthz").json().get("paillier_ready"):
            assert time.monotonic() < until, "shuffler never got the Paillier key"
            time.sleep(0.05)
        yield c


def get(http: httpx.Client, url: str) -> dict[str, Any]:
    r = http.get(url)
    assert r.status_code == 200, r.text
    return r.json()


def user_inputs(d: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n users' (x, r): ‖x‖ uniform in [0.2, 1] (L = 1), r uniform in [0, 1]."""
    x = rng.normal(size=(n, d))
    x *= rng.uniform(0.2, 1.0, (n, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
    return x, rng.uniform(size=n)


def build(kind: str, http: httpx.Client, analyzer: str, seed: int) -> tuple[
    dict[str, list[dict]], list[list[int]] | None
]:
    """The reports of both clients for one task kind, {task id: upload bodies' reports}, and
    for secure-sum the counts (ddp: the signed values) they encrypt."""
    task, n = KINDS[kind]
    twin = task + SUFFIX
    # The independent client reads everything from the analyzer's published JSON.
    hconf = get(http, f"{analyzer}/v1/hpke-config")
    info = get(http, f"{analyzer}/v1/tasks/{twin}")
    pol, pk = info["policy"], client.b64d(hconf["public_key"])
    rng = np.random.default_rng(seed)
    x, r = user_inputs(info["d"], n, rng)
    # The project's client: its own task configuration, encoders, HPKE and Paillier.
    config = next(TaskConfig.model_validate(t) for t in interop_tasks() if t["id"] == task)
    hpke = HpkeConfig.model_validate(hconf)
    if kind == "secure-sum":
        pconf = get(http, f"{analyzer}/v1/tasks/{twin}/secure-sum")
        client.task_layout(info, pconf)
        counts = [client.counts(client.binary_bits(xi, ri, pol["eps0"], pol["m"], pol["L"], rng),
                                pol["m"]) for xi, ri in zip(x, r, strict=True)]
        theirs = [client.encrypted_counts(pconf, hconf, twin, c) for c in counts]
        paillier = PaillierConfig.model_validate(
            get(http, f"{analyzer}/v1/tasks/{task}/secure-sum"))
        ours = [c.model_dump() for c in encrypt_counts(config, paillier, hpke, np.array(counts))]
        return {task: ours, twin: theirs}, counts
    if kind in DDP_KINDS:
        # §3.5: rounded statistics (in the task's encoding) plus a Skellam share of the
        # variance the ledger states.
        pconf = get(http, f"{analyzer}/v1/tasks/{twin}/secure-sum")
        lay = client.task_layout(info, pconf)
        sigma2 = privacy(http, analyzer, twin)["ledger"]["share_variance"]
        encoding = pol.get("encoding", "upper")
        intercept = pol.get("intercept") if encoding == "centered" else None
        values = [client.ddp_values(xi, ri, pol["scale"], pol["L"], sigma2, rng,
                                    encoding, pol.get("u_weight", 1.0), intercept)
                  for xi, ri in zip(x, r, strict=True)]
        theirs = [client.encrypted_counts(pconf, hconf, twin, client.signed_digits(v, lay))
                  for v in values]
        paillier = PaillierConfig.model_validate(
            get(http, f"{analyzer}/v1/tasks/{task}/secure-sum"))
        ours = [c.model_dump() for c in encrypt_counts(config, paillier, hpke, np.array(values))]
        return {task: ours, twin: theirs}, values
    if kind == "ldp":
        # §3.3 in the task's encoding (demo-ldp: auto = centered with the intercept).
        encoding = pol.get("encoding", "plain")
        assert encoding == "centered"  # the analyzer publishes the resolved encoding
        intercept = pol.get("intercept") if encoding.startswith("centered") else None
        # demo-ldp's report: PrivUnit2 (its practical default, §3.3 "mechanism").
        assert pol.get("mechanism") == "privunit"
        rows = [client.privunit_row(xi, ri, pol["epsilon"], pol["L"], rng, encoding,
                                    pol.get("u_weight", 1.0), intercept)
                for xi, ri in zip(x, r, strict=True)]
        arrays = [np.frombuffer(b, "<f8") for b in rows]
    elif kind == "central":
        rows = [client.identity_row(xi, ri) for xi, ri in zip(x, r, strict=True)]
        arrays = [np.frombuffer(b, "<f8") for b in rows]
    else:
        bits = [client.binary_bits(xi, ri, pol["eps0"], pol["m"], pol["L"], rng)
                for xi, ri in zip(x, r, strict=True)]
        rows, arrays = [client.pack_bits(b) for b in bits], bits
    theirs = [client.report(pk, hconf["key_id"], twin, row)[1] for row in rows]
    ours = [rep.model_dump() for _, rep in encrypt_rows(config, hpke, np.array(arrays))]
    return {task: ours, twin: theirs}, None


def endpoint(kind: str) -> str:
    return "encrypted-counts" if kind in SUM_KINDS else "reports"


def in_chunks(reports: dict[str, list[dict]], l: int) -> Iterator[dict[str, list[dict]]]:
    """Batches of l reports, each task's in turn."""
    n = len(next(iter(reports.values())))
    for start in range(0, n, l):
        yield {task: reps[start:start + l] for task, reps in reports.items()}


def user_epsilon(policy: dict[str, Any], rng: np.random.Generator) -> float:
    """A HeLDP user's own ε_t: uniform over ``choice:`` levels, else the task's ε."""
    spec = policy.get("epsilon_dist")
    if spec is None:
        return float(policy["epsilon"])
    kind, _, values = spec.partition(":")
    assert kind == "choice", f"no user model for epsilon_dist {spec!r}: add one"
    return float(rng.choice([float(v) for v in values.split(",")]))


Play = Callable[[dict[str, Any], dict[str, Any], np.random.Generator], tuple[list[float], bytes]]


def adaptive_chunks(kind: str, http: httpx.Client, analyzer: str, seed: int, play: Play
                    ) -> Iterator[dict[str, list[dict]]]:
    """Users one at a time (module docstring), each from the twin's published model — every
    STALE_EVERY-th from the model one report older — through ``play(policy, model, rng)`` →
    (row fields, the independent client's wire row): the same row to both tasks."""
    task, n = KINDS[kind][0], reports_of(kind)
    twin = task + SUFFIX
    hconf = get(http, f"{analyzer}/v1/hpke-config")
    policy = get(http, f"{analyzer}/v1/tasks/{twin}")["policy"]
    pk = client.b64d(hconf["public_key"])
    config = next(TaskConfig.model_validate(t) for t in interop_tasks() if t["id"] == task)
    hpke = HpkeConfig.model_validate(hconf)
    rng = np.random.default_rng(seed)
    held = get(http, f"{analyzer}/v1/tasks/{twin}/model")
    for i in range(n):
        latest = get(http, f"{analyzer}/v1/tasks/{twin}/model")
        stale = kind not in FRESH_ONLY and i % STALE_EVERY == STALE_EVERY - 1
        model = held if stale else latest
        assert not stale or model["version"] < latest["version"], "a stale user is not stale"
        held = latest
        fields, row = play(policy, model, rng)
        theirs = client.report(pk, hconf["key_id"], twin, row)[1]
        ((_, ours),) = encrypt_rows(config, hpke, np.array([fields], dtype=float))
        yield {task: [ours.model_dump()], twin: [theirs]}


def play_arm(policy: dict[str, Any], model: dict[str, Any], rng: np.random.Generator
             ) -> tuple[list[float], bytes]:
    """A multi-armed user: §4's arm from her own uniform, her reward (and, for HeLDP, her own ε_t
    from the task's ``epsilon_dist``), randomized per §3.3's table."""
    arm, p = client.choose_arm(model, float(rng.random()))
    eps_t = user_epsilon(policy, rng) if policy["algo"].startswith("heldp") else 0.0
    fields = client.mab_fields(policy, arm, p, float(rng.uniform()), eps_t, rng)
    return fields, client.mab_row(policy, fields)


def user_loss(x: np.ndarray, centre: np.ndarray) -> float:
    """A BCO user's loss 0.35‖x − c‖² with her own minimiser c (‖c‖ ≤ 0.3): on the unit ball it
    lies in [0, 0.6] ⊂ [0, B] and is 0.91-Lipschitz (< the default tasks' G = 1.1)."""
    return 0.35 * float(np.sum((x - centre) ** 2))


def play_bco(policy: dict[str, Any], model: dict[str, Any], rng: np.random.Generator
             ) -> tuple[list[float], bytes]:
    """A BCO user: her own u on the unit sphere, the point(s) §4 says to play, her loss(es)
    there, the value of §3.3's table, the row [version, u, value]."""
    u = client.unit_direction(len(model["y"]), rng)
    points = client.bco_points(model, u)
    centre = rng.uniform(-0.2, 0.2, u.shape[0])
    value = client.bco_value(policy, [user_loss(x, centre) for x in points], points, rng)
    return [model["version"], *u, value], client.bco_row(model["version"], u, value)


def play_glb(policy: dict[str, Any], model: dict[str, Any], rng: np.random.Generator
             ) -> tuple[list[float], bytes]:
    """An ``ldp-glb`` user: K arms' features, §4's choice from (θ̃, V, β), her reward, the row of
    §3.3 anchored at the model's θ̂ and naming its version."""
    X, _ = user_inputs(len(model["theta"]), 5, rng)
    x = X[client.choose_linear(model, X)]
    return client.glb_row(x, float(rng.uniform()), model, policy, rng)


def play_gope(policy: dict[str, Any], model: dict[str, Any], rng: np.random.Generator
              ) -> tuple[list[float], bytes]:
    """An ``adar-gope`` user: §4's arm from the phase's design with her own uniform, her reward
    (Bernoulli of the arm's mean under a fixed θ* = (1/√2)(1, 1, 0, …)/‖·‖)."""
    arm = client.choose_phase_arm(model, float(rng.random()))
    x = client.seeded_arms(policy["K"], policy["d"], policy["arm_seed"])[arm]
    theta = np.zeros(policy["d"])
    theta[:2] = 1.0 / math.sqrt(2)
    r = float(rng.random() < float(np.clip(x @ theta, 0.0, 1.0)))
    return [arm, model["phase"], r], client.gope_row(arm, model["phase"], r)


PLAYERS: dict[str, Play] = {**dict.fromkeys(MAB_KINDS, play_arm),
                            **dict.fromkeys(BCO_KINDS, play_bco),
                            "ldp-glb": play_glb, "adar-gope": play_gope}


def privacy(http: httpx.Client, analyzer: str, task: str) -> dict[str, Any]:
    return get(http, f"{analyzer}/v1/tasks/{task}/privacy")


def deliver(http: httpx.Client, urls: dict[str, str], kind: str,
            chunks: Iterator[dict[str, list[dict]]]) -> dict[str, list[dict]]:
    """Upload each chunk (one batch per task) and, before the next, wait until both analyzers
    counted it (or refused something: the asserts after ``deliver`` then fail). Returns every
    task's reports as sent."""
    sent: dict[str, list[dict]] = {}
    for chunk in chunks:
        for task, reps in chunk.items():
            resp = http.post(f"{urls['shuffler']}/v1/tasks/{task}/{endpoint(kind)}",
                             json={"reports": reps})
            assert resp.status_code == 202, (task, resp.text)
            assert resp.json() == {"accepted": len(reps), "duplicates": 0, "refused": 0}
            sent.setdefault(task, []).extend(reps)
        until = deadline(WAIT)
        for task, reps in sent.items():
            while True:
                p = privacy(http, urls["analyzer"], task)
                if p["reports_counted"] + p["reports_refused"] >= len(reps):
                    break
                assert time.monotonic() < until, f"{task}: report {len(reps)} never counted"
                time.sleep(0.01)
    return sent


def stored_state(data_dir: Path, task: str) -> dict[str, Any]:
    """The analyzer's durable policy state of a task (read-only)."""
    db = data_dir / "analyzer" / "analyzer.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (state,) = conn.execute("SELECT state FROM tasks WHERE task = ?", (task,)).fetchone()
    return json.loads(state)


def without_noise(kind: str, model: dict[str, Any]) -> dict[str, Any]:
    """The model or state without the fields in ``NOISY[kind]`` (also in a nested ``model``)."""
    out = {k: v for k, v in model.items() if k not in NOISY.get(kind, ())}
    if isinstance(out.get("model"), dict):
        out["model"] = without_noise(kind, out["model"])
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_independent_client_reports_count_exactly_as_the_projects(
    deployment: Cluster, http: httpx.Client, kind: str
) -> None:
    urls = deployment.urls
    task, n = KINDS[kind][0], reports_of(kind)
    twin = task + SUFFIX
    seed = list(KINDS).index(kind)
    l = get(http, f"{urls['analyzer']}/v1/tasks/{task}")["batch_size"]
    if kind in PLAYERS:
        chunks, counts = adaptive_chunks(kind, http, urls["analyzer"], seed, PLAYERS[kind]), None
    else:
        built, counts = build(kind, http, urls["analyzer"], seed)
        chunks = in_chunks(built, l)
    reports = deliver(http, urls, kind, chunks)

    ours, theirs = (privacy(http, urls["analyzer"], t) for t in (task, twin))
    assert ours["reports_counted"] == theirs["reports_counted"] == n, (ours, theirs)
    assert ours["reports_refused"] == theirs["reports_refused"] == 0
    assert ours["batches"] == theirs["batches"] == n // l
    for t in (task, twin):
        assert queue(http, urls, t) == (n, 0), t

    model_ours = get(http, f"{urls['analyzer']}/v1/tasks/{task}/model")
    model_theirs = get(http, f"{urls['analyzer']}/v1/tasks/{twin}/model")
    assert model_ours["version"] >= 1 and model_ours["reports"] > 0, model_ours
    assert without_noise(kind, {**model_ours, "task": twin}) == without_noise(kind, model_theirs)
    state_ours = stored_state(deployment.data_dir, task)
    state_theirs = stored_state(deployment.data_dir, twin)
    assert state_ours["reports"] == n
    assert without_noise(kind, state_ours) == without_noise(kind, state_theirs)

    check_paths_taken(kind, state_theirs, n)
    if kind in DDP_KINDS:
        assert counts is not None
        check_ddp_estimate(http, urls["analyzer"], twin, state_theirs, counts)
    check_retries_are_duplicates(http, urls, kind, reports[twin])
    if counts is not None:
        check_plain_integer_decryption(deployment, http, kind, reports[task], counts)


def check_paths_taken(kind: str, state: dict[str, Any], n: int) -> None:
    """The special reports the module docstring says the users send were sent and counted as
    such: HeLDP-B users who declined (ε_t = 0) and users below ε_min (ε_t = 0.2); AdaR-UCB's stale
    reports (every third user) and its K one-report episodes; BCO reports none skipped, and every
    version published (n + 1 of them) still kept."""
    if kind == "heldp-ucb-b":
        assert state["declined"] > 0 and state["used"] < n - state["declined"], state
    if kind == "adar-ucb":
        stale = n // STALE_EVERY
        assert state["stale"] == stale and state["episodes"] == n - stale, state
        assert state["pulls"] == [1] * (n - stale), state
    if kind in BCO_KINDS:  # every report, stale ones too, made a gradient step from its version
        assert state["skipped"] == 0 and len(state["history"]) == n + 1, state
    if kind == "ldp-glb":  # stale reports named their older version and were counted
        assert state["stale"] == n // STALE_EVERY and state["model"]["version"] == n, state
    if kind == "adar-gope":  # phase 1 ended on schedule; phase 2 holds the last reports
        assert state["model"]["phase"] == 2 and state["pos"] == GOPE_PHASE_2, state
        assert state["late"] == state["dropped"] == 0, state


def check_ddp_estimate(http: httpx.Client, analyzer: str, task: str, state: dict[str, Any],
                       values: list[list[int]]) -> None:
    """§3.5's reading of the sums: the analyzer's (G̃, ũ) is the independent client's estimate
    from the values it sent (all counted here: whole batches), the encoding's weights divided
    out as the task states them."""
    pol = get(http, f"{analyzer}/v1/tasks/{task}")["policy"]
    sums = np.sum(values, axis=0).tolist()
    intercept = pol.get("intercept") if pol["encoding"] == "centered" else None
    G, u = client.ddp_estimate(sums, pol["d"], pol["scale"], pol["encoding"], pol["u_weight"],
                               intercept, count=len(values))
    np.testing.assert_allclose(state["G"], G, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state["u"], u, rtol=1e-12, atol=1e-12)


def check_retries_are_duplicates(http: httpx.Client, urls: dict[str, str], kind: str,
                                 reports: list[dict]) -> None:
    """§5.1–5.2: an upload whose answer was lost may be retried byte for byte (a duplicate, not
    stored again); for secure-sum, so is a re-randomised copy c·rⁿ under the same tag."""
    twin = KINDS[kind][0] + SUFFIX
    before = queue(http, urls, twin)
    retries = [reports[0]]
    if kind in SUM_KINDS:
        retries.append(rerandomized(reports[1], http, urls["analyzer"], twin))
    for body in retries:
        resp = http.post(f"{urls['shuffler']}/v1/tasks/{twin}/{endpoint(kind)}",
                         json={"reports": [body]})
        assert resp.status_code == 202, resp
        assert resp.json() == {"accepted": 0, "duplicates": 1, "refused": 0}
    assert queue(http, urls, twin) == before


def check_plain_integer_decryption(deployment: Cluster, http: httpx.Client, kind: str,
                                   reports: list[dict], counts: list[list[int]]) -> None:
    """The converse (in process): the project's secure-sum ciphertexts, one report and the
    product of a batch, decrypt under the analyzer's 2048-bit key (p, q from its key file) with
    the plain integer implementation, to the counts (ddp: signed values) they encrypt and to
    their sum."""
    key = json.loads((deployment.data_dir / "analyzer" / "paillier.json").read_text())
    p, q = int(key["p"], 16), int(key["q"], 16)
    lay = get(http, f"{deployment.urls['analyzer']}/v1/tasks/{KINDS[kind][0]}"
              "/secure-sum")["layout"]

    def values(plaintexts: list[int], count: int) -> list[int]:
        if lay["offset"]:
            return client.signed_sums(plaintexts, lay, count)
        return client.unpack_slots(plaintexts, lay)

    cts = [client.split_ciphertexts(r["ct"], lay) for r in reports[:SHUFFLE_L]]
    first = [client.paillier_decrypt(p, q, c) for c in cts[0]]
    assert values(first, 1) == counts[0]
    n2 = (p * q) ** 2
    product = [math.prod(col) % n2 for col in zip(*cts, strict=True)]
    total = [client.paillier_decrypt(p, q, c) for c in product]
    assert values(total, SHUFFLE_L) == np.sum(counts[:SHUFFLE_L], axis=0).tolist()


def rerandomized(report: dict, http: httpx.Client, analyzer: str, task: str) -> dict:
    """The same EncryptedCounts with every ciphertext multiplied by a fresh rⁿ mod n² (another
    encryption of the same counts) and the original tag."""
    pconf = get(http, f"{analyzer}/v1/tasks/{task}/secure-sum")
    n, lay = int.from_bytes(client.b64d(pconf["n"]), "big"), pconf["layout"]
    width = lay["ciphertext_bytes"] // lay["plaintexts"]
    copy_ = b"".join((c * client.paillier_encrypt(n, 0) % (n * n)).to_bytes(width, "big")
                     for c in client.split_ciphertexts(report["ct"], lay))
    assert copy_ != client.b64d(report["ct"])
    return {**report, "ct": client.b64e(copy_)}


def queue(http: httpx.Client, urls: dict[str, str], task: str) -> tuple[int, int]:
    """(accepted, pending) of a task at the shuffler."""
    status = get(http, f"{urls['shuffler']}/v1/status")
    q = next(q for q in status["tasks"] if q["task"] == task)
    return q["accepted"], q["pending"]
