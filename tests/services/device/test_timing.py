"""The device's timings are settings: defaults as before they were (except that undecided
decisions now expire in minutes, issue 13), overridable from the config file and the environment
like any setting, and checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from privbandit.services.common.retry import Jittered
from privbandit.shared.settings import DeviceTiming, Retry, Settings


def test_defaults_are_the_former_module_constants() -> None:
    t = DeviceTiming()
    assert (t.fetch_retry, t.poll_interval, t.stream_retry, t.stream_read_timeout) == (
        Retry(initial=0.1, maximum=2.0), 1.0, Retry(initial=2.0, maximum=30.0), 60.0)
    assert (t.hpke_refresh, t.paillier_refresh, t.paillier_pool) == (60.0, 60.0, 256)
    assert (t.upload_batch, t.upload_retry) == (100, Retry(initial=0.1, maximum=5.0))
    assert (t.used_decision_ttl, t.unused_decision_ttl, t.prune_interval) == (3600, 600, 60)
    assert t.http_timeout == 10.0


def test_timings_come_from_the_config_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "privbandit.toml"
    config.write_text("[device_timing]\npoll_interval = 0.5\n"
                      "[device_timing.upload_retry]\ninitial = 1.0\nmaximum = 8.0\n")
    for var in ("PRIVBANDIT_DEVICE_TIMING__POLL_INTERVAL", "PRIVBANDIT_DEVICE_TIMING"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PRIVBANDIT_CONFIG", str(config))
    t = Settings().device_timing
    assert (t.poll_interval, t.upload_retry, t.paillier_pool) == (
        0.5, Retry(initial=1.0, maximum=8.0), 256)
    monkeypatch.setenv("PRIVBANDIT_DEVICE_TIMING__POLL_INTERVAL", "0.25")
    assert Settings().device_timing.poll_interval == 0.25
    backoff = Jittered.of(Settings().device_timing.upload_retry)
    assert (backoff.initial, backoff.maximum) == (1.0, 8.0)


@pytest.mark.parametrize("bad", [
    {"poll_interval": 0},
    {"paillier_pool": 0},
    {"upload_batch": 1001},
    {"fetch_retry": {"initial": 3.0, "maximum": 2.0}},
])
def test_nonsense_timings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        DeviceTiming.model_validate(bad)


def test_the_shuffler_retry_bounds_are_checked_too(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="retry_initial must not exceed retry_max"):
        Settings(data_dir=tmp_path, retry_initial=5.0, retry_max=1.0)
