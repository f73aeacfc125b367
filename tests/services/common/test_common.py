"""What every service gets from the ``services`` package itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import patience

REPO = Path(__file__).resolve().parents[3]
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
PROBE = f"import os, services, numpy; print(' '.join(os.environ[v] for v in {THREAD_VARS!r}))"


def _probe(env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**env, "PYTHONPATH": str(REPO)},
                         cwd=REPO, capture_output=True, text=True, timeout=patience(60), check=True)
    return out.stdout.strip()


def test_services_pin_blas_threads_by_default_but_respect_the_environment() -> None:
    """``python -m services.X`` imports ``services`` before numpy: one BLAS thread unless the
    environment asks for more."""
    bare = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    assert _probe(bare) == "1 1 1"
    assert _probe({**bare, "OMP_NUM_THREADS": "4"}) == "1 4 1"
