"""The three services of privbandit: analyzer, shuffler and device (one package each).

Importing this package first (as ``python -m privbandit.services.<name>`` does) pins the
BLAS/OpenMP thread pools to one thread unless the environment says otherwise. The services do small
linear algebra (d <= 64) per request; a multi-threaded BLAS spends more time waking its threads
than computing, and on a small machine its spinning threads steal the CPU from the other services.
The variables must be set before numpy is first imported, which is why this lives here and not in a
module that imports numpy. ``privbandit up`` and the Dockerfile set the same defaults.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
del _var
