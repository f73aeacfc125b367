"""Small logs in the Open Bandit Dataset's published format, written by the tests themselves
(the real sample is never fetched): the rounds CSV (an unnamed index, timestamp, item_id,
position, click, propensity_score, user_feature_0..3 as hashed categories,
user-item_affinity_0..K−1) and item_context.csv (an unnamed index, item_id, item_feature_0 a
number, item_feature_1..3 hashed categories), as obp ships them under obp/dataset/obd/."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np

USER_LEVELS = (3, 5, 8, 8)  # OBD's: levels of user_feature_0..3
ITEM_LEVELS = (4, 5, 3)  # item_feature_1..3 (OBD's: 12, 21, 7)


def hashed(kind: str, level: int) -> str:
    return hashlib.md5(f"{kind}-{level}".encode()).hexdigest()


def write_obd(folder: Path, n: int = 600, K: int = 8, seed: int = 0, *,
              uniform: bool = True, ctr: float = 0.3, best_price: float | None = None
              ) -> dict[str, np.ndarray]:
    """Write ``folder``/all.csv and item_context.csv: n rounds over K items at positions 1..3,
    the item uniform (propensity 1/K) or from a fixed non-uniform distribution, a click with
    probability ctr·(1 + item's user-level bonus)/2 — or, with ``best_price``, with that
    probability for the item of the highest item_feature_0 and ctr for the others (a signal a
    linear policy on item_feature_0 finds); rows written in shuffled time order.
    Returns the drawn arrays in time order (item, position, click, pscore, users, items)."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    users = np.stack([rng.integers(0, m, n) for m in USER_LEVELS], axis=1)
    items = np.stack([rng.integers(0, m, K) for m in ITEM_LEVELS], axis=1)
    price = rng.normal(size=K)
    probs = np.full(K, 1 / K) if uniform else np.arange(1, K + 1) / (K * (K + 1) / 2)
    item = rng.choice(K, size=n, p=probs)
    position = rng.integers(1, 4, n)
    bonus = (users[:, 0] == items[item, 0] % USER_LEVELS[0]).astype(float)
    p_click = ctr * (1 + bonus) / 2
    if best_price is not None:
        p_click = np.where(item == int(np.argmax(price)), best_price, ctr)
    click = (rng.random(n) < p_click).astype(int)
    affinity = rng.integers(0, 3, (n, K)) * (rng.random((n, K)) < 0.1)
    order = rng.permutation(n)  # written out of time order: the reader sorts by timestamp
    with (folder / "all.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["", "timestamp", "item_id", "position", "click", "propensity_score",
                    *[f"user_feature_{j}" for j in range(4)],
                    *[f"user-item_affinity_{a}" for a in range(K)]])
        for i in order:
            stamp = f"2019-11-24 {i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000000+00:00"
            w.writerow([int(i), stamp, int(item[i]), int(position[i]), int(click[i]),
                        repr(float(probs[item[i]])),
                        *[hashed(f"u{j}", int(users[i, j])) for j in range(4)],
                        *[f"{float(v):.1f}" for v in affinity[i]]])
    with (folder / "item_context.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["", "item_id", "item_feature_0", "item_feature_1", "item_feature_2",
                    "item_feature_3"])
        for a in range(K):
            w.writerow([a, a, repr(float(price[a])),
                        *[hashed(f"i{j}", int(items[a, j])) for j in range(3)]])
    return {"item": item, "position": position, "click": click, "pscore": probs[item],
            "users": users, "items": items, "price": price, "affinity": affinity}
