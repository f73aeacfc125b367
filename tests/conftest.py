"""Settings of the whole test session.

BLAS and OpenMP on one thread per test process, unless the environment says otherwise (as the
services pin themselves: ``services/__init__.py``). The tests' linear algebra is small (d ≤ 64,
K ≤ 20: e.g. one triangular solve of every candidate's features per step of a simulation); a
multi-threaded OpenBLAS spends more time waking and spinning its threads than computing, and
with pytest-xdist's workers and the e2e services beside it, those threads fight for the same
cores (measured: a coverage simulation 6.3× faster on one thread on a busy 2-core machine, with
the same result). The variables must be set before numpy is first imported: this conftest is
loaded before any test module, and imports nothing that imports numpy.

Under pytest-xdist (``make test``: a worker per core, ``--dist loadgroup``) the tests are spread
one by one over the workers, slow ones first, except the modules on the e2e package's shared
``cluster``, which go to one worker together (it starts that cluster once), and each module of
``MODULE_DEPLOYMENTS`` (one module-scoped deployment each). xdist's own
``xdist_group`` marks are read from a suffix it adds to node ids, which pytest ≥ 9.2 no longer lets
it add (pytest-xdist issue 1386: the tests are then spread as if unmarked), so the scheduler below
groups by module path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import pytest

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
del _var

# The e2e modules whose tests run on the e2e package's shared ``cluster`` fixture: every test
# of these modules uses it and no test elsewhere does (checked at collection, below), so that
# the tests pinned to its worker are exactly those that need it; a test with services of its own
# belongs in another module, free to run on any worker.
SHARED_CLUSTER_MODULES = frozenset(f"tests/e2e/{name}.py" for name in (
    "test_bco", "test_demo", "test_glb_gope", "test_mab"))
# Modules whose tests share a module-scoped deployment of service processes: scheduled as one
# unit, so that it starts once (spread over the workers, or interleaved there with other
# modules' tests, pytest would start it once per stretch of consecutive tests).
MODULE_DEPLOYMENTS = frozenset({"tests/interop/test_services.py", "tests/e2e/test_connections.py",
                                "tests/e2e/test_canary_audit.py"})


def work_unit(nodeid: str) -> str:
    """The unit of scheduling of a test: its xdist group (an ``@group`` suffix, should xdist
    add it again), the shared cluster's for its modules, its module for a module of
    ``MODULE_DEPLOYMENTS``, else the test itself."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[-1]
    module = nodeid.split("::", 1)[0]
    if module in SHARED_CLUSTER_MODULES:
        return "e2e-shared-cluster"
    if module in MODULE_DEPLOYMENTS:
        return module
    return nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups of ``work_unit``."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return Scheduling(config, log)


def on_shared_cluster(item: pytest.Item) -> bool:
    """Whether the test uses the e2e package's shared ``cluster`` (package-scoped; a module may
    define a ``cluster`` of its own, e.g. ``tests/e2e/test_lost_state.py``)."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get("cluster") if info is not None else None
    return bool(defs) and defs[-1].scope == "package"


def pytest_configure(config: pytest.Config) -> None:
    """One accountant memo for the run (``accounting.memo``), made by the controller before its
    xdist workers start, so that they and every process they start share it: a scheduled sblb
    task's ε0 searches and ledgers are the same pure figures in each test's analyzer, devices
    and demo, computed once per run rather than in every process. It starts empty (a run never
    reads another run's figures) and is removed at the end; a run that sets
    ``PRIVBANDIT_ACCOUNTING_CACHE`` itself keeps its own."""
    from privbandit.shared.core.accounting.memo import ENV

    if hasattr(config, "workerinput") or os.environ.get(ENV):
        return
    root = tempfile.mkdtemp(prefix="privbandit-accounting-memo-")
    os.environ[ENV] = root
    config.add_cleanup(lambda: (os.environ.pop(ENV, None), shutil.rmtree(root, True)))


def pytest_sessionstart(session: pytest.Session) -> None:
    """The test database's catalog vacuumed once per run, by the controller (not each xdist
    worker): ``tests.pg_server.vacuum_catalog`` says why."""
    if hasattr(session.config, "workerinput"):
        return
    from tests.pg_server import vacuum_catalog

    why = vacuum_catalog()
    if why is not None:
        session.config.issue_config_time_warning(
            pytest.PytestWarning(f"PostgreSQL catalog not vacuumed: {why}"), stacklevel=2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``slow`` tests first, each group in its collected order: the workers take work in
    this order, so the long e2e and statistical tests start at once and the short ones fill the
    gaps, instead of one long test starting last and running alone at the end.

    Refuses a test on the shared cluster outside ``SHARED_CLUSTER_MODULES`` (a second worker
    would start a second cluster) and a test of those modules with services of its own (pinned
    to the cluster's worker for nothing)."""
    wrong = [item.nodeid for item in items
             if on_shared_cluster(item) != (item.nodeid.split("::", 1)[0]
                                            in SHARED_CLUSTER_MODULES)]
    if wrong:
        raise pytest.UsageError(
            "tests on the shared e2e cluster must be exactly those of SHARED_CLUSTER_MODULES "
            f"(tests/conftest.py); these are not: {wrong}")
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
