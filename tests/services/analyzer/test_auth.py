"""Only the shuffler may post batches: ``Authorization: Bearer <token>``, the scheme matched
case-insensitively (RFC 7235 §2.1), the token exactly (constant-time comparison)."""

from __future__ import annotations

import pytest

from privbandit.services.analyzer.app import create_app
from privbandit.shared.settings import Settings
from tests.helpers import TOKEN, error, privacy, report_maker, running
from tests.services.analyzer.support import SHUF, batch, hpke_of


@pytest.mark.parametrize("header", [
    f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}", f"bEaReR {TOKEN}",
    f"Bearer  {TOKEN}",  # RFC 7235: 1*SP between scheme and credentials
])
async def test_bearer_scheme_is_case_insensitive(settings: Settings, header: str) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        r = await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)),
                              headers={"Authorization": header})
        assert r.status_code == 200, r.text
        assert (await privacy(client, "shuf")).reports_counted == 5


WRONG = {
    "old default": "Bearer change-me-shuffler-token",
    "one character off": f"Bearer {TOKEN[:-1]}{'x' if TOKEN[-1] != 'x' else 'y'}",
    "prefix": f"Bearer {TOKEN[:-1]}",
    "longer": f"Bearer {TOKEN}x",
    "no token": "Bearer",
    "empty token": "Bearer ",
    "other scheme": f"Basic {TOKEN}",
    "no scheme": TOKEN,
    "scheme glued on": f"Bearer{TOKEN}",
}


@pytest.mark.parametrize("case", sorted(WRONG))
async def test_a_wrong_token_is_refused_and_nothing_is_counted(
    settings: Settings, case: str
) -> None:
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        r = await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)),
                              headers={"Authorization": WRONG[case]})
        error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches) == (0, 0)
