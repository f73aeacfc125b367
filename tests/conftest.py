"""Settings of the whole test session.

BLAS and OpenMP on one thread per test process, unless the environment says otherwise (as the
services pin themselves: ``services/__init__.py``). The tests' linear algebra is small (d ≤ 64,
K ≤ 20: e.g. one triangular solve of every candidate's features per step of a simulation); a
multi-threaded OpenBLAS spends more time waking and spinning its threads than computing, and
with pytest-xdist's workers and the e2e services beside it, those threads fight for the same
cores (measured: a coverage simulation 6.3× faster on one thread on a busy 2-core machine, with
the same result). The variables must be set before numpy is first imported: this conftest is
loaded before any test module, and imports nothing that imports numpy.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
del _var
