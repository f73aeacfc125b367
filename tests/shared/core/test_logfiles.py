"""Logs read from files (``shared.core.logfiles``): the Open Bandit Dataset's CSV format (a
small file the test writes, ``obd_format``), the plain CSV layout and obp's dict saved as .npz,
each rebuilt into exactly the features the module docstring defines, and every malformed file
refused with one line naming the file, row or column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from privbandit.shared.core.logfiles import LogFormatError, read_any, read_log, read_obd
from privbandit.shared.core.logged import arm_features, save_feedback
from tests.shared.core.obd_format import USER_LEVELS, write_obd


def one_hot(values: np.ndarray, levels: int) -> np.ndarray:
    out = np.zeros((values.shape[0], levels))
    out[np.arange(values.shape[0]), values] = 1
    return out


def level_order(kind: str, levels: int) -> np.ndarray:
    """The reader sorts a categorical column's levels by their text (the hashes)."""
    from tests.shared.core.obd_format import hashed

    names = [hashed(kind, v) for v in range(levels)]
    return np.argsort(np.argsort(names))  # level v → its one-hot index


def test_obd_shared_features_are_user_times_item_with_affinity(tmp_path: Path) -> None:
    K, n = 8, 600
    drawn = write_obd(tmp_path / "obd", n=n, K=K, seed=1)
    fb = read_obd(tmp_path / "obd", positions="feature")
    assert (fb["n_rounds"], fb["n_actions"], fb["feature_map"]) == (n, K, "shared")
    # Rounds in time order: the writer's own order.
    np.testing.assert_array_equal(fb["action"], drawn["item"])
    np.testing.assert_array_equal(fb["reward"], drawn["click"])
    np.testing.assert_allclose(fb["pscore"], drawn["pscore"])
    np.testing.assert_array_equal(fb["position"], drawn["position"] - 1)
    # c_t: one-hot of each user column (levels sorted by text), then the position's one-hot.
    c = np.concatenate([one_hot(level_order(f"u{j}", m)[drawn["users"][:, j]], m)
                        for j, m in enumerate(USER_LEVELS)]
                       + [one_hot(drawn["position"] - 1, 3)], axis=1)
    np.testing.assert_array_equal(fb["context"], c)
    # z_a = [1, price / max|price|, one-hot of each item category present].
    X = arm_features(fb)
    z = fb["action_context"]
    np.testing.assert_allclose(z[:, 1], drawn["price"] / np.abs(drawn["price"]).max())
    s = fb["feature_scale"]
    expected = np.concatenate([np.einsum("tp,aq->tapq", c, z).reshape(n, K, -1),
                               drawn["affinity"][:, :, None]], axis=2) * s
    np.testing.assert_allclose(X, expected)
    assert np.isclose(np.linalg.norm(X, axis=2).max(), 1.0)
    assert X.shape[2] == c.shape[1] * z.shape[1] + 1


def test_obd_positions_are_explicit(tmp_path: Path) -> None:
    drawn = write_obd(tmp_path, n=300, K=5, seed=2)
    pooled = read_obd(tmp_path, positions="pool")
    featured = read_obd(tmp_path, positions="feature")
    assert pooled["positions"] == "pool" and featured["positions"] == "feature"
    assert featured["context"].shape[1] == pooled["context"].shape[1] + 3
    for k in (1, 2, 3):
        only = read_obd(tmp_path, positions=k)
        assert only["n_rounds"] == int((drawn["position"] == k).sum())
        assert only["positions"] == str(k)
    with pytest.raises(LogFormatError, match="no round at position 4"):
        read_obd(tmp_path, positions=4)


def test_obd_disjoint_is_one_block_per_item(tmp_path: Path) -> None:
    write_obd(tmp_path, n=200, K=4, seed=3)
    fb = read_obd(tmp_path, encoding="disjoint", user_columns=["user_feature_0"],
                  positions="pool")
    X = arm_features(fb)
    p = 3 + 1  # user_feature_0's 3 levels, the affinity
    assert X.shape == (200, 4, 4 * p)
    s = fb["feature_scale"]
    for a in range(4):
        block = X[:, a, a * p:(a + 1) * p] / s
        np.testing.assert_array_equal(block[:, :3], fb["context"])
        np.testing.assert_array_equal(block[:, 3], fb["context_per_arm"][:, a, 0])
        assert not np.delete(X[:, a], np.s_[a * p:(a + 1) * p], axis=1).any()


def test_obd_survives_the_npz_round_trip(tmp_path: Path) -> None:
    write_obd(tmp_path / "obd", n=100, K=4, seed=4)
    fb = read_obd(tmp_path / "obd")
    save_feedback(tmp_path / "f.npz", fb)
    back = read_any(tmp_path / "f.npz")
    assert back["positions"] == "feature" and back["feature_map"] == "shared"
    np.testing.assert_array_equal(arm_features(back), arm_features(fb))


@pytest.mark.parametrize(("edit", "pattern"), [
    (lambda rows: rows[3].__setitem__(2, "x7"), r"all\.csv, line 4, column item_id: 'x7'"),
    (lambda rows: rows[5].__setitem__(2, "99"), r"line 6, column item_id: 99 is not an action"),
    (lambda rows: rows[2].__setitem__(5, "0"),
     r"line 3, column propensity_score: 0.0 is not a probability"),
    (lambda rows: rows[2].__setitem__(4, "nan"), r"line 3, column click: 'nan' is not finite"),
    (lambda rows: rows[1].pop(), r"line 2: \d+ fields where the header has"),
    (lambda rows: [r.pop(4) for r in rows], r"no column 'click'"),
])
def test_a_malformed_obd_file_is_refused_in_one_line(tmp_path: Path, edit, pattern: str
                                                     ) -> None:
    write_obd(tmp_path, n=20, K=4, seed=5)
    path = tmp_path / "all.csv"
    rows = [line.split(",") for line in path.read_text().splitlines()]
    edit(rows)
    path.write_text("\n".join(",".join(r) for r in rows) + "\n")
    with pytest.raises(LogFormatError, match=pattern) as info:
        read_obd(tmp_path)
    assert "\n" not in str(info.value)


def test_obd_needs_its_item_context(tmp_path: Path) -> None:
    write_obd(tmp_path, n=20, K=4, seed=6)
    (tmp_path / "item_context.csv").unlink()
    with pytest.raises(LogFormatError, match="item_context.csv: no such file"):
        read_obd(tmp_path / "all.csv")


def test_the_plain_layout(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n, K = 50, 3
    action = rng.integers(0, K, n)
    x = rng.normal(size=(n, 2))
    lines = ["timestamp,action,reward,pscore,age,score"]
    order = rng.permutation(n)
    for i in order:
        lines.append(f"t{i:04d},{action[i]},{i % 2},0.25,{float(x[i, 0])!r},{float(x[i, 1])!r}")
    (tmp_path / "log.csv").write_text("\n".join(lines) + "\n")
    fb = read_log(tmp_path / "log.csv", n_actions=4)
    assert (fb["n_rounds"], fb["n_actions"], fb["feature_map"]) == (n, 4, "disjoint")
    np.testing.assert_array_equal(fb["action"], action)
    np.testing.assert_allclose(fb["context"], x)
    X = arm_features(fb)
    assert X.shape == (n, 4, 8) and np.isclose(np.linalg.norm(X, axis=2).max(), 1)
    # With the actions' features: the shared encoding.
    (tmp_path / "arms.csv").write_text("action,colour\n0,0.5\n1,1\n2,-1\n3,0\n")
    shared = read_log(tmp_path / "log.csv", action_context=tmp_path / "arms.csv")
    assert shared["feature_map"] == "shared" and arm_features(shared).shape == (n, 4, 4)
    # One line naming the row and column of a bad value.
    (tmp_path / "bad.csv").write_text("action,reward,pscore,age\n0,1,0.5,3\n1,1,0.5,old\n")
    with pytest.raises(LogFormatError, match=r"bad\.csv, line 3, column age: 'old' is not a "
                                             r"number \(a user feature"):
        read_log(tmp_path / "bad.csv")
    (tmp_path / "nopscore.csv").write_text("action,reward\n0,1\n")
    with pytest.raises(LogFormatError, match="no column 'pscore'"):
        read_log(tmp_path / "nopscore.csv")


def test_parquet_without_pyarrow_says_so(tmp_path: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        (tmp_path / "log.parquet").write_bytes(b"PAR1")
        with pytest.raises(LogFormatError, match="reading Parquet needs pyarrow"):
            read_any(tmp_path / "log.parquet")
    else:
        pytest.skip("checks the one-line message a user without pyarrow gets; pyarrow is "
                    "installed here, so Parquet is read instead (not tested: pyarrow is no "
                    "dependency of the project)")


def test_obp_feedback_saved_by_numpy_with_a_named_encoding(tmp_path: Path) -> None:
    """obp's real-data dict: a per-user context and the items' action_context, no feature_map:
    as a flat context it is refused in one line; named shared, it is read."""
    rng = np.random.default_rng(8)
    n, K = 40, 5
    fb = {"n_rounds": n, "n_actions": K, "action": rng.integers(0, K, n),
          "reward": rng.integers(0, 2, n).astype(float), "pscore": np.full(n, 1 / K),
          "position": np.zeros(n, dtype=int), "context": rng.normal(size=(n, 3)),
          "action_context": rng.normal(size=(K, 2)),
          "pi_b": np.full((n, K, 1), 1 / K)}
    with (tmp_path / "obp.npz").open("wb") as fh:
        np.savez(fh, **fb)
    with pytest.raises(ValueError, match="not a multiple of K = 5"):
        arm_features(read_any(tmp_path / "obp.npz"), 1)
    shared = read_any(tmp_path / "obp.npz", encoding="shared")
    X = arm_features(shared)
    np.testing.assert_allclose(X / shared["feature_scale"],
                               np.einsum("tp,aq->tapq", fb["context"],
                                         fb["action_context"]).reshape(n, K, 6))


def test_d_is_uncapped_for_the_library_but_not_for_a_service_task() -> None:
    """A log's d (OBD disjoint: 2,240) is a valid config; a task the services would serve keeps
    the wire's 64 (``protocol.messages.MAX_DIM``), refused at configuration."""
    from pydantic import ValidationError

    from privbandit.shared.core.policies import make_config
    from privbandit.shared.settings import TaskConfig

    assert make_config("ldp-linucb", d=2240, epsilon=1.0).d == 2240
    with pytest.raises(ValidationError):
        make_config("linucb", d=4097)
    TaskConfig(id="t", threat_model="none", policy={"algo": "linucb", "d": 64})
    with pytest.raises(ValidationError, match="the services serve d <= 64"):
        TaskConfig(id="t", threat_model="none", policy={"algo": "linucb", "d": 65})
