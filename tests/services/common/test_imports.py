"""What a service loads when it starts (issue 26 item 6): a restart is only as fast as the
service's imports, and dp-accounting (with the scipy.signal and scipy.stats it pulls in) cost
seconds of CPU per start. A service app imports none of them; they load when an accountant or a
quantile is first computed. Nor does any of them load scipy or numba (compiled BCO loops) at all:
those load with the first computation that uses them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("dp_accounting", "scipy", "numba")


@pytest.mark.parametrize("app", ["privbandit.services.shuffler.app",
                                 "privbandit.services.analyzer.app",
                                 "privbandit.services.device.app", "privbandit.cli"])
def test_a_service_app_imports_no_accountant_library(app: str) -> None:
    code = (f"import json, sys, {app}\n"
            f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == [], out.stdout
