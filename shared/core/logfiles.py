"""Logged bandit data read from files into a ``bandit_feedback`` (``logged``): the Open Bandit
Dataset's published CSV files, and a plain CSV (or Parquet) layout for one's own logs.

**Open Bandit Dataset** (Saito et al., NeurIPS 2021 D&B; the sample obp ships under
``obp/dataset/obd/{random,bts}/{all,men,women}/``): one CSV of rounds with the columns

    (an unnamed index), timestamp, item_id, position, click, propensity_score,
    user_feature_0..3 (hashed categories), user-item_affinity_0..K−1 (numbers)

and ``item_context.csv``: (an unnamed index), item_id, item_feature_0 (a number),
item_feature_1..3 (hashed categories). Rounds are sorted by timestamp (as obp does); action =
item_id, reward = click, pscore = propensity_score (OBD's is the item's probability *at its
position*: 1/80 for the random policy). A round is one (user, position) recommendation.

**Positions**, stated in the feedback's ``positions`` and by the command line:
``feature`` (the default) keeps every round and appends the one-hot of the position to the user's
features (so the shared encoding learns a position × item effect); ``pool`` keeps every round and
ignores the position (each round is still a valid draw of the logging policy at its own
position, so IPS over them estimates the value averaged over positions); an integer keeps only
the rounds at that position (the CSV's label: 1, 2 or 3), a bandit of its own.

**Features** (``logged``'s feature maps): the user's features c_t are the one-hot of each
categorical user column (its levels as they occur in the file, sorted) and the number of each
numeric one, plus the position's one-hot under ``feature``; an item's z_a is [1, its numeric
features (each divided by its largest magnitude), the one-hot of its categorical ones];
g_{t,a} = the user-item affinity of item a (OBD), or nothing. ``shared`` is
x_{t,a} = s·[vec(c_t ⊗ z_a), g_{t,a}], ``disjoint`` x_{t,a} = s·e_a ⊗ [c_t, g_{t,a}], with s
the one constant that makes max ‖x_{t,a}‖ = 1.

**Your own logs** (``read_log``): a CSV (or Parquet) with one row per logged round and the
columns

    action      the logged action, an integer 0..K−1
    reward      the observed reward, a number
    pscore      the logging policy's probability of that action, in (0, 1]
    position    optional: an integer slot (handled as above)
    timestamp   optional: rounds are sorted by it (as text: ISO 8601 sorts correctly)
    anything else: the user's features, numbers

and, optionally, an action-context CSV (``action`` and the action's numeric features) that
enables the ``shared`` encoding; without it the encoding is ``disjoint``.

Every error is a ``LogFormatError`` (a ``ValueError``) of one line naming the file, the row
(its line in the file, the header being line 1) or the column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np

from privbandit.shared.core.logged import check_feedback

Encoding = Literal["shared", "disjoint"]
ENCODINGS: tuple[Encoding, ...] = ("shared", "disjoint")
OBD_COLUMNS = ("item_id", "position", "click", "propensity_score")
AFFINITY = "user-item_affinity_"
PLAIN_COLUMNS = ("action", "reward", "pscore")
PSCORE_COLUMN = {"item_id": "propensity_score"}  # the pscore column by the action column
OPTIONAL_COLUMNS = ("position", "timestamp")


class LogFormatError(ValueError):
    """A log file that cannot be read as its layout says: one line naming file, row or
    column."""


# --- reading a table --------------------------------------------------------------------------


class Table:
    """A file's columns as text, with each value's line in the file for the error messages."""

    def __init__(self, path: Path, header: list[str], rows: list[list[str]],
                 lines: list[int]) -> None:
        self.path, self.header, self.rows, self.lines = path, header, rows, lines
        self.index = {name: i for i, name in enumerate(header)}

    def __len__(self) -> int:
        return len(self.rows)

    def has(self, name: str) -> bool:
        return name in self.index

    def text(self, name: str) -> list[str]:
        i = self._col(name)
        return [row[i] for row in self.rows]

    def require(self, name: str) -> None:
        self._col(name)

    def _col(self, name: str) -> int:
        if name not in self.index:
            raise LogFormatError(f"{self.path}: no column {name!r} (columns: "
                                 f"{', '.join(h for h in self.header if h)[:200]})")
        return self.index[name]

    def numbers(self, name: str, what: str = "a number") -> np.ndarray:
        i = self._col(name)
        out = np.empty(len(self.rows))
        for j, row in enumerate(self.rows):
            try:
                out[j] = float(row[i])
            except ValueError:
                self.fail(j, name, f"{row[i]!r} is not {what}")
            if not math.isfinite(out[j]):
                self.fail(j, name, f"{row[i]!r} is not finite")
        return out

    def integers(self, name: str) -> np.ndarray:
        values = self.numbers(name, "an integer")
        bad = np.flatnonzero(values != np.round(values))
        if bad.size:
            self.fail(int(bad[0]), name, f"{self.rows[bad[0]][self.index[name]]!r} is not an "
                      "integer")
        return values.astype(np.int64)

    def is_numeric(self, name: str) -> bool:
        i = self._col(name)
        try:
            return all(math.isfinite(float(row[i])) for row in self.rows)
        except ValueError:
            return False

    def fail(self, j: int, name: str, why: str) -> NoReturn:
        raise LogFormatError(f"{self.path}, line {self.lines[j]}, column {name}: {why}")


def read_csv(path: Path) -> Table:
    """A CSV file as a ``Table`` (every row as many fields as the header)."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise LogFormatError(f"{path}: the file is empty")
            header = [h.strip() for h in header]
            rows, lines = [], []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise LogFormatError(f"{path}, line {reader.line_num}: {len(row)} fields "
                                         f"where the header has {len(header)}")
                rows.append(row)
                lines.append(reader.line_num)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise LogFormatError(f"{path}: cannot read it as CSV ({exc})") from None
    if not rows:
        raise LogFormatError(f"{path}: no rows after the header")
    return Table(path, header, rows, lines)


def read_parquet(path: Path) -> Table:
    """A Parquet file as a ``Table`` (through pyarrow, where it is installed)."""
    import importlib

    try:
        pq = importlib.import_module("pyarrow.parquet")  # optional: not a dependency
    except ImportError:
        raise LogFormatError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow); "
                             "or write the log as CSV with the same columns") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise LogFormatError(f"{path}: cannot read it as Parquet ({exc})") from None
    header = [str(c) for c in table.column_names]
    cols = [[("" if v is None else str(v)) for v in table.column(c).to_pylist()]
            for c in header]
    rows = [list(r) for r in zip(*cols, strict=True)]
    if not rows:
        raise LogFormatError(f"{path}: no rows")
    # A Parquet file has no lines: its row i is reported as "line" i + 2, as if in a CSV.
    return Table(path, header, rows, list(range(2, len(rows) + 2)))


def read_table(path: Path) -> Table:
    return read_parquet(path) if path.suffix.lower() in (".parquet", ".pq") else read_csv(path)


# --- features ---------------------------------------------------------------------------------


def one_hot_or_number(table: Table, name: str, scale: bool = False) -> np.ndarray:
    """A column's features: its number (divided by its largest magnitude if ``scale``), or the
    one-hot of its text values (levels sorted) where some value is not a number."""
    if table.is_numeric(name):
        x = table.numbers(name)
        top = float(np.abs(x).max())
        return (x / top if scale and top > 0 else x)[:, None]
    values = table.text(name)
    levels = sorted(set(values))
    where = {v: i for i, v in enumerate(levels)}
    out = np.zeros((len(values), len(levels)))
    out[np.arange(len(values)), [where[v] for v in values]] = 1.0
    return out


def position_labels(table: Table, name: str = "position") -> np.ndarray:
    return table.integers(name)


def build_feedback(table: Table, *, action: np.ndarray, reward: np.ndarray, pscore: np.ndarray,
                   context: np.ndarray, n_actions: int, action_context: np.ndarray | None,
                   per_arm: np.ndarray | None, positions: str | int, encoding: Encoding,
                   action_column: str) -> dict[str, Any]:
    """The feedback of parsed columns: rounds ordered by timestamp, positions handled, the
    encoding chosen and scaled (module docstring)."""
    n = action.shape[0]
    bad = np.flatnonzero((action < 0) | (action >= n_actions))
    if bad.size:
        table.fail(int(bad[0]), action_column, f"{action[bad[0]]} is not an action in "
                   f"0..{n_actions - 1}")
    bad = np.flatnonzero(~((pscore > 0) & (pscore <= 1)))
    if bad.size:
        table.fail(int(bad[0]), PSCORE_COLUMN.get(action_column, "pscore"),
                   f"{pscore[bad[0]]} is not a probability in (0, 1]")
    order = np.argsort(np.array(table.text("timestamp")), kind="stable") \
        if table.has("timestamp") else np.arange(n)
    if table.has("position"):
        labels = position_labels(table)
    else:
        labels = np.zeros(n, dtype=np.int64)
    keep = order
    if isinstance(positions, int) or (isinstance(positions, str) and positions.isdigit()):
        wanted = int(positions)
        if not table.has("position"):
            raise LogFormatError(f"{table.path}: no column 'position' to keep position "
                                 f"{wanted} of")
        keep = order[labels[order] == wanted]
        if keep.size == 0:
            raise LogFormatError(f"{table.path}, column position: no round at position "
                                 f"{wanted} (positions: {sorted(set(labels.tolist()))})")
        how = f"{wanted}"
    elif positions == "feature":
        levels = sorted(set(labels.tolist()))
        if len(levels) > 1:
            pos_hot = (labels[:, None] == np.array(levels)[None, :]).astype(float)
            context = np.concatenate([context, pos_hot], axis=1)
        how = "feature"
    elif positions == "pool":
        how = "pool"
    else:
        raise LogFormatError(f"positions must be 'feature', 'pool' or a position number; got "
                             f"{positions!r}")
    dense = np.unique(labels, return_inverse=True)[1].astype(np.int64)
    out: dict[str, Any] = {
        "n_rounds": int(keep.size), "n_actions": int(n_actions),
        "context": context[keep], "action": action[keep], "reward": reward[keep],
        "pscore": pscore[keep], "position": dense[keep], "positions": how,
    }
    if per_arm is not None:
        out["context_per_arm"] = per_arm[keep]
    if encoding == "shared":
        if action_context is None:
            raise LogFormatError(f"{table.path}: the shared encoding needs the actions' "
                                 "features (an action-context file); or use the disjoint one")
        out["action_context"] = action_context
    elif encoding != "disjoint":
        raise LogFormatError(f"encoding must be one of {', '.join(ENCODINGS)}; got "
                             f"{encoding!r}")
    out["feature_map"] = encoding
    out["feature_scale"] = feature_scale(out)
    check_feedback(out)
    return out


def feature_scale(feedback: dict[str, Any]) -> float:
    """s = 1 / max_{t,a} ‖x_{t,a}‖ of the unscaled features (1 if every one is 0)."""
    c2 = (np.asarray(feedback["context"], dtype=float) ** 2).sum(axis=1)  # (n,)
    g = feedback.get("context_per_arm")
    g2 = 0.0 if g is None else (np.asarray(g, dtype=float) ** 2).sum(axis=2)  # (n, K)
    if feedback["feature_map"] == "shared":
        z2 = (np.asarray(feedback["action_context"], dtype=float) ** 2).sum(axis=1)  # (K,)
        norms2 = c2[:, None] * z2[None, :] + g2
    else:
        norms2 = c2[:, None] + g2
    top = math.sqrt(float(np.max(norms2)))
    return 1.0 / top if top > 0 else 1.0


def item_features(table: Table, id_column: str, n_actions: int | None,
                  columns: Sequence[str] | None) -> np.ndarray:
    """z_a = [1, numbers scaled, one-hot of categories] for each action, ordered by id."""
    ids = table.integers(id_column)
    K = n_actions if n_actions is not None else int(ids.max()) + 1
    if sorted(ids.tolist()) != list(range(K)):
        raise LogFormatError(f"{table.path}, column {id_column}: the actions must be 0..{K - 1}"
                             f", each once (found {len(ids)} rows)")
    names = [h for h in table.header if h and h != id_column] if columns is None else columns
    parts = [np.ones((len(table), 1))] + [one_hot_or_number(table, c, scale=True)
                                          for c in names]
    z = np.concatenate(parts, axis=1)
    out = np.empty_like(z)
    out[ids] = z
    return out


def user_features(table: Table, columns: Sequence[str]) -> np.ndarray:
    if not columns:
        return np.ones((len(table), 1))  # no user features: one constant (an intercept)
    return np.concatenate([one_hot_or_number(table, c) for c in columns], axis=1)


# --- the two layouts --------------------------------------------------------------------------


def obd_files(path: Path, item_context: Path | None) -> tuple[Path, Path]:
    """(rounds CSV, item-context CSV) of an OBD directory or CSV path."""
    if path.is_dir():
        found = sorted(p for p in path.glob("*.csv") if p.name != "item_context.csv")
        if len(found) != 1:
            raise LogFormatError(f"{path}: expected one rounds CSV beside item_context.csv "
                                 f"(found {[p.name for p in found]})")
        rounds = found[0]
    else:
        rounds = path
    ctx = item_context if item_context is not None else rounds.parent / "item_context.csv"
    if not rounds.is_file():
        raise LogFormatError(f"{rounds}: no such file")
    if not ctx.is_file():
        raise LogFormatError(f"{ctx}: no such file (OBD's item_context.csv; give its path)")
    return rounds, ctx


def is_obd(path: Path) -> bool:
    """Whether a path is an OBD directory or a CSV whose header has OBD's columns."""
    if path.is_dir():
        return (path / "item_context.csv").is_file()
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return False
    return all(c in header for c in OBD_COLUMNS)


def read_obd(path: Path | str, *, item_context: Path | str | None = None,
             positions: str | int = "feature", encoding: Encoding = "shared",
             user_columns: Sequence[str] | None = None,
             item_columns: Sequence[str] | None = None,
             affinity: bool = True) -> dict[str, Any]:
    """An Open Bandit Dataset CSV (or the directory holding it and ``item_context.csv``) as a
    ``bandit_feedback`` (module docstring). ``user_columns`` / ``item_columns``: the user and
    item feature columns to use (default all); ``affinity``: append the user-item affinity of
    each item to its features."""
    rounds, ctx_path = obd_files(Path(path), None if item_context is None
                                 else Path(item_context))
    table = read_csv(rounds)
    for name in OBD_COLUMNS:
        table.require(name)
    items = read_csv(ctx_path)
    z = item_features(items, "item_id", None, item_columns)
    K = z.shape[0]
    users = [h for h in table.header if h.startswith("user_feature_")] \
        if user_columns is None else list(user_columns)
    per_arm = None
    if affinity:
        per_arm = np.stack([table.numbers(f"{AFFINITY}{a}") for a in range(K)], axis=1)[:, :,
                                                                                      None]
    reward = table.numbers("click")
    return build_feedback(
        table, action=table.integers("item_id"), reward=reward,
        pscore=table.numbers("propensity_score"), context=user_features(table, users),
        n_actions=K, action_context=z, per_arm=per_arm, positions=positions,
        encoding=encoding, action_column="item_id")


def read_log(path: Path | str, *, action_context: Path | str | None = None,
             n_actions: int | None = None, positions: str | int = "feature",
             encoding: Encoding | None = None) -> dict[str, Any]:
    """One's own log in the plain layout (module docstring; CSV, or Parquet by its suffix) as
    a ``bandit_feedback``; ``encoding`` defaults to shared with an action-context file, else
    disjoint."""
    table = read_table(Path(path))
    for name in PLAIN_COLUMNS:
        table.require(name)
    z = None
    if action_context is not None:
        z = item_features(read_table(Path(action_context)), "action", n_actions, None)
        n_actions = z.shape[0]
    action = table.integers("action")
    K = n_actions if n_actions is not None else int(action.max()) + 1
    if K < 2:
        raise LogFormatError(f"{path}: fewer than 2 actions (give n_actions)")
    users = [h for h in table.header if h not in (*PLAIN_COLUMNS, *OPTIONAL_COLUMNS)]
    what = "a number (a user feature: encode categories as numbers or one-hot columns)"
    context = np.stack([table.numbers(name, what) for name in users], axis=1) if users \
        else np.ones((len(table), 1))
    return build_feedback(
        table, action=action, reward=table.numbers("reward"),
        pscore=table.numbers("pscore"), context=context, n_actions=K,
        action_context=z, per_arm=None, positions=positions,
        encoding=encoding or ("shared" if z is not None else "disjoint"),
        action_column="action")


# --- any of them ------------------------------------------------------------------------------

FORMATS = ("auto", "npz", "obd", "csv", "parquet")


def detect_format(path: Path) -> str:
    """npz by suffix, OBD by its directory or header, Parquet by suffix, else the plain CSV."""
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return "npz"
    if is_obd(path):
        return "obd"
    return "parquet" if suffix in (".parquet", ".pq") else "csv"


def read_any(path: Path | str, *, fmt: str = "auto", action_context: Path | str | None = None,
             positions: str | int = "feature", encoding: Encoding | None = None,
             user_columns: Sequence[str] | None = None,
             item_columns: Sequence[str] | None = None, affinity: bool = True,
             n_actions: int | None = None) -> dict[str, Any]:
    """A log in any supported format (``fmt``: one of FORMATS) as a ``bandit_feedback``.

    An ``.npz`` is a saved ``bandit_feedback`` (``simulate --log``, or obp's dict saved with
    ``numpy.savez``); where it names no ``feature_map``, ``encoding`` says how its per-user
    ``context`` and ``action_context`` make per-arm features (else the context must hold K·d
    numbers per round, ``flat``)."""
    from privbandit.shared.core.logged import load_feedback

    path = Path(path)
    if fmt not in FORMATS:
        raise LogFormatError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if not path.exists():
        raise LogFormatError(f"{path}: no such file or directory")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "obd":
        return read_obd(path, item_context=action_context, positions=positions,
                        encoding=encoding or "shared", user_columns=user_columns,
                        item_columns=item_columns, affinity=affinity)
    if fmt in ("csv", "parquet"):
        return read_log(path, action_context=action_context, n_actions=n_actions,
                        positions=positions, encoding=encoding)
    try:
        with np.load(path, allow_pickle=False) as data:
            named = "feature_map" in data.files
        feedback = load_feedback(path)
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise LogFormatError(f"{path}: not a saved bandit_feedback ({exc})") from None
    if encoding is not None and not named:
        if encoding not in ENCODINGS:
            raise LogFormatError(f"encoding must be one of {', '.join(ENCODINGS)}")
        feedback["feature_map"] = encoding
        if encoding == "shared" and feedback.get("action_context") is None:
            raise LogFormatError(f"{path}: the shared encoding needs action_context")
        feedback["feature_scale"] = feature_scale(feedback)
        try:
            check_feedback(feedback)
        except ValueError as exc:
            raise LogFormatError(f"{path}: {exc}") from None
    return feedback
