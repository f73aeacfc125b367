"""Only the shuffler may post batches: ``Authorization: Bearer <token>``, the scheme matched
case-insensitively (RFC 7235 §2.1), the token exactly (constant-time comparison)."""

from __future__ import annotations

from pathlib import Path

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


async def test_no_unauthenticated_get_writes_to_the_data_directory(settings: Settings) -> None:
    """Every GET route of the analyzer, each task's routes for every task, answered without
    credentials, leaves the data directory exactly as start-up left it: no request creates a
    key (``GET /v1/paillier-config`` once created the Paillier key of an analyzer none of whose
    tasks used it: issue 45 item 9)."""
    from fastapi.routing import APIRoute

    data = Path(settings.data_dir)

    def files() -> dict[str, bytes]:
        return {str(p.relative_to(data)): p.read_bytes() for p in sorted(data.rglob("*"))
                if p.is_file() and not p.name.endswith(("-wal", "-shm", ".sqlite3"))}

    app = create_app(settings)
    gets = [r.path for r in app.routes if isinstance(r, APIRoute) and "GET" in r.methods
            # An endless stream: an in-process transport would wait for its end.
            and not r.path.endswith("/stream")]
    assert "/v1/paillier-config" in gets and "/v1/tasks/{task}/secure-sum" in gets
    async with running(app) as client:
        before = files()
        assert "analyzer/hpke_x25519.pem" in before  # made at start-up
        for path in gets:
            for task in [t.id for t in settings.tasks] or ["none"]:
                resp = await client.get(path.replace("{task}", task))
                assert resp.status_code < 500, (path, resp.text)
        assert files() == before
