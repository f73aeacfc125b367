"""Restart on the same data directory: keys, models, counters, replayed batch ids and counted
report ids survive; a changed task configuration refuses to start."""

from __future__ import annotations

import re
import sqlite3
import time

import numpy as np
import pytest

from privbandit.services.analyzer.app import create_app
from privbandit.services.analyzer.runtime import DB_FILE
from privbandit.services.analyzer.store.sqlite import MIGRATIONS
from privbandit.services.common.sqlite import schema_version
from privbandit.shared.protocol.messages import BatchAck
from privbandit.shared.settings import Settings
from tests.helpers import (
    auth,
    central_task,
    encrypt_rows,
    ldp_task,
    make_rows,
    make_settings,
    privacy,
    report_maker,
    running,
    shuffle_task,
)
from tests.services.analyzer.support import CEN, SHUF, batch, hpke_of, resealed


async def test_state_survives_restart(settings: Settings) -> None:
    async with running(create_app(settings)) as client:
        hpke = await hpke_of(client)
        rng = np.random.default_rng(5)
        first = encrypt_rows(SHUF, hpke, make_rows(SHUF, 5, rng))
        body = batch([rep for _, rep in first])
        await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())
        make = report_maker(hpke, seed=9)
        await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
        for _ in range(3):
            await client.post("/v1/tasks/cen/batches", json=batch(make(CEN, 1)), headers=auth())
        model_before = (await client.get("/v1/tasks/shuf/model")).json()
        cen_before = (await client.get("/v1/tasks/cen/model")).json()

    async with running(create_app(settings)) as client:
        assert await hpke_of(client) == hpke  # same key, same key id
        assert (await client.get("/v1/tasks/shuf/model")).json() == model_before
        assert (await client.get("/v1/tasks/cen/model")).json() == cen_before
        p = await privacy(client, "shuf")
        assert (p.reports_counted, p.batches, p.model_version) == (10, 2, 2)
        assert (await privacy(client, "cen")).reports_counted == 3
        # Replayed batch id and already-counted report ids are still recognised.
        ack = BatchAck.model_validate_json(
            (await client.post("/v1/tasks/shuf/batches", json=body, headers=auth())).content
        )
        assert ack.replayed
        resent = resealed(hpke, SHUF, [rid for rid, _ in first], make_rows(SHUF, 5, rng))
        r = await client.post("/v1/tasks/shuf/batches", json=batch(resent), headers=auth())
        ack = BatchAck.model_validate_json(r.content)
        assert (ack.counted, ack.duplicates, ack.replayed) == (0, 5, False)
        assert (await privacy(client, "shuf")).reports_counted == 10


async def test_changed_task_config_refuses_to_start(settings: Settings) -> None:
    async with running(create_app(settings)):
        pass
    changed = make_settings(
        settings.data_dir, tasks=[shuffle_task(eps0=2.0), ldp_task(), central_task()]
    )
    app = create_app(changed)
    with pytest.raises(RuntimeError, match="configuration changed"):
        async with app.router.lifespan_context(app):
            pass
    # A new task next to the old ones is fine.
    grown = make_settings(settings.data_dir, tasks=[*settings.tasks, shuffle_task("shuf2")])
    async with running(create_app(grown)) as client:
        assert (await client.get("/v1/tasks/shuf2")).status_code == 200


@pytest.mark.sqlite_only(
    reason="an SQLite file written before schema versions; a PostgreSQL store always had them"
)
async def test_a_database_from_before_schema_versions_is_kept(settings: Settings) -> None:
    """Stores written before migrations existed have the tables but no ``schema_version``:
    they open at version 1 with their data, and migrate on."""
    async with running(create_app(settings)) as client:
        make = report_maker(await hpke_of(client))
        await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
    path = settings.data_dir / "analyzer" / DB_FILE
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE schema_version")
    conn.commit()
    conn.close()
    async with running(create_app(settings)) as client:
        assert (await privacy(client, "shuf")).reports_counted == 5
    conn = sqlite3.connect(path)
    assert schema_version(conn) == len(MIGRATIONS) == 3
    conn.close()


def last_batch(page: str, task: str) -> str:
    """The status page's "last batch" cell of ``task``'s row."""
    row = re.search(rf'<tr id="task-{task}">(.*?)</tr>', page, re.S)
    assert row is not None, task
    cell = re.search(r'<td data-field="last_batch">(.*?)</td>', row.group(1))
    assert cell is not None, task
    return cell.group(1)


async def test_the_status_pages_last_batch_survives_a_restart(settings: Settings) -> None:
    """The time of a task's last batch is stored with the batch (issue 45 item 9): an analyzer
    restarted on the same store shows the same time on its status page, not a blank until the
    next batch; a task without a batch shows none."""
    app = create_app(settings)
    async with running(app) as client:
        assert last_batch((await client.get("/status")).text, "shuf") == "— (none yet)"
        make = report_maker(await hpke_of(client))
        r = await client.post("/v1/tasks/shuf/batches", json=batch(make(SHUF, 5)), headers=auth())
        assert r.status_code == 200
        at = app.state.runtime.tasks["shuf"].last_batch_at
        assert at is not None
        shown = last_batch((await client.get("/status")).text, "shuf")
        assert shown.startswith(time.strftime("%H:%M:%S UTC", time.gmtime(at)))

    app = create_app(settings)
    async with running(app) as client:
        assert app.state.runtime.tasks["shuf"].last_batch_at == at  # as stored, to the bit
        page = (await client.get("/status")).text
        # The same clock time; only the "(n s ago)" after it moves on.
        assert last_batch(page, "shuf").split(" (")[0] == shown.split(" (")[0]
        assert last_batch(page, "cen") == "— (none yet)"
