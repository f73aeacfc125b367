"""The analyzer's HPKE public configuration as the shuffler knows it, and the intake checks it
allows on what is sealed to it: HPKE reports, and the tags of Paillier reports.

The shuffler cannot open either, but it can tell garbage from what an honest device sends: the
key id must be the one the analyzer publishes (``GET /v1/hpke-config``, fetched and cached as
``services.shuffler.published`` says), the encapsulated key a well-formed X25519 point that is not
of small order, and the AEAD ciphertext exactly the task's public length (every report of a task
has the same length; a tag is always a report id and a digest). A report failing any check is
refused with 422 before anything of its upload is stored, so it can neither dilute a batch nor
skew the counts.

A key id the shuffler does not know may be the analyzer's new key: intake then re-fetches the
config (at most once every few seconds, ``ConfigFetcher.refresh``) before refusing; if the
analyzer cannot be asked, the upload gets 503 ``not_ready`` (retry later) rather than a refusal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from privbandit.services.shuffler.errors import (
    BadEncapsulatedKey,
    BadReportSize,
    NotReady,
    UnknownHpkeKey,
)
from privbandit.services.shuffler.published import PublishedConfig
from privbandit.shared.crypto.hpke import ENC_BYTES, CryptoError, check_encapsulated_key
from privbandit.shared.crypto.tags import TAG_CIPHERTEXT_BYTES
from privbandit.shared.protocol.messages import EncryptedReport, HpkeConfig, b64decode
from privbandit.shared.protocol.paillier import EncryptedCounts

# Re-fetch the analyzer's config; True iff it answered (``ConfigFetcher.refresh``).
Refresh = Callable[[], Awaitable[bool]]


class HpkeState(PublishedConfig[HpkeConfig]):
    """The analyzer's HPKE key id and public key, needed by every task (reports are sealed to
    it, and so are Paillier tags)."""

    path = "/v1/hpke-config"
    name = "hpke-config"
    model = HpkeConfig

    def describe(self, config: HpkeConfig) -> str:
        return f"HPKE key {config.key_id}"

    async def check_reports(
        self, task: str, reports: Sequence[EncryptedReport], ct_bytes: int, refresh: Refresh
    ) -> None:
        """Intake checks of a task's HPKE reports, whose AEAD ciphertexts are ``ct_bytes`` long;
        raises for the first bad one (then nothing of the upload may be stored)."""
        await self._check(task, [(f"reports[{i}]", r) for i, r in enumerate(reports)],
                          ct_bytes, refresh)

    async def check_tags(
        self, task: str, reports: Sequence[EncryptedCounts], refresh: Refresh
    ) -> None:
        """Intake checks of the tags of a task's Paillier reports."""
        await self._check(task, [(f"reports[{i}].tag", r.tag) for i, r in enumerate(reports)],
                          TAG_CIPHERTEXT_BYTES, refresh)

    async def check_sealed(
        self, task: str, sealed: list[tuple[str, EncryptedReport]], ct_bytes: int,
        refresh: Refresh,
    ) -> None:
        """Intake checks of HPKE-sealed parts of reports (e.g. ``prio3`` helper shares): the
        analyzer's key id, a well-formed encapsulated key and exactly ``ct_bytes``."""
        await self._check(task, sealed, ct_bytes, refresh)

    async def _check(
        self, task: str, sealed: list[tuple[str, EncryptedReport]], ct_bytes: int,
        refresh: Refresh,
    ) -> None:
        config = self._current()
        stranger = next(((w, r.key_id) for w, r in sealed if r.key_id != config.key_id), None)
        if stranger is not None:  # ask the analyzer once, then check everything against that
            config = await self._refreshed(*stranger, refresh)
        for where, report in sealed:
            if report.key_id != config.key_id:
                raise UnknownHpkeKey(
                    f"{where}: sealed to HPKE key {report.key_id}, the analyzer's key is "
                    f"{config.key_id}; no report was stored"
                )
            enc, ct = b64decode(report.enc), b64decode(report.ct)
            if len(enc) != ENC_BYTES or len(ct) != ct_bytes:
                raise BadReportSize(
                    f"{where}: task {task!r} takes enc of {ENC_BYTES} bytes and ct of "
                    f"{ct_bytes} bytes, got {len(enc)} and {len(ct)}; no report was stored"
                )
            try:
                check_encapsulated_key(enc)
            except CryptoError as exc:
                raise BadEncapsulatedKey(f"{where}: {exc}; no report was stored") from exc

    def _current(self) -> HpkeConfig:
        config = self.config
        if config is None:
            raise NotReady("the shuffler has not yet fetched the analyzer's HPKE key; retry "
                           "shortly (no report was stored)")
        return config

    async def _refreshed(self, where: str, key_id: int, refresh: Refresh) -> HpkeConfig:
        """The config after asking the analyzer again, if it publishes ``key_id`` now;
        ``UnknownHpkeKey`` if it does not, ``NotReady`` if it could not be asked."""
        answered = await refresh()
        config = self._current()
        if key_id == config.key_id:
            return config
        if not answered:
            raise NotReady(
                f"{where}: sealed to HPKE key {key_id}, which the shuffler cannot confirm with "
                "the analyzer now; retry shortly (no report was stored)"
            )
        raise UnknownHpkeKey(
            f"{where}: sealed to HPKE key {key_id}, the analyzer's key is {config.key_id}; no "
            "report was stored"
        )
