"""The command line runs its commands with the BLAS on one thread, unless the user chose."""

from __future__ import annotations

import contextlib

from threadpoolctl import threadpool_info

from privbandit.cli import BLAS_THREAD_VARIABLES, blas_threads


def test_one_blas_thread_unless_the_user_chose() -> None:
    limiter = blas_threads({})
    assert not isinstance(limiter, contextlib.nullcontext)
    with limiter:
        assert all(pool["num_threads"] == 1 for pool in threadpool_info()
                   if pool["user_api"] == "blas")
    for name in BLAS_THREAD_VARIABLES:
        assert isinstance(blas_threads({name: "4"}), contextlib.nullcontext)
    # An empty value is no choice.
    assert not isinstance(blas_threads({"OPENBLAS_NUM_THREADS": ""}), contextlib.nullcontext)
