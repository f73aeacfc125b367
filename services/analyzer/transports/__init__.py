"""The analyzer's side of each shuffle transport, by the name tasks give it
(``TaskConfig.transport``; the names are on the wire too):

- ``reports`` (``services.analyzer.transports.reports``): batches of l HPKE reports, each
  decrypted and fed as a row;
- ``paillier`` (``services.analyzer.transports.paillier``; ``secure_sum = "paillier"``): one
  Paillier-encrypted sum per batch, fed as a statistic; a batch failing a check is quarantined
  whole;
- ``prio3`` (``services.analyzer.transports.prio3``): each batch verified jointly with the
  shuffler report by report (invalid ones refused alone), the sum of the valid ones unsharded.

Each is an ``AnalyzerTransport`` (``base``): the route the shuffler posts to, the keys it needs,
and a ``Decoder`` per task, which the one ingest pipeline runs. A new transport is one module
defining its transport object, registered in ``TRANSPORTS`` below.
"""

from __future__ import annotations

from privbandit.services.analyzer.transports.base import AnalyzerTransport
from privbandit.services.analyzer.transports.paillier import PaillierTransport
from privbandit.services.analyzer.transports.prio3 import Prio3Transport
from privbandit.services.analyzer.transports.reports import ReportsTransport
from privbandit.services.common.transports import lookup
from privbandit.shared.settings import Settings, TaskConfig

_REGISTERED: tuple[AnalyzerTransport, ...] = (
    ReportsTransport(), PaillierTransport(), Prio3Transport())
TRANSPORTS: dict[str, AnalyzerTransport] = {t.name: t for t in _REGISTERED}


def transport_for(config: TaskConfig) -> AnalyzerTransport:
    """The transport the task is configured with (``ValueError`` for an unknown name)."""
    return lookup(TRANSPORTS, config, "analyzer")


def used(settings: Settings) -> list[AnalyzerTransport]:
    """The transports the settings' tasks use, in registration order."""
    names = {t.transport for t in settings.tasks}
    return [t for name, t in TRANSPORTS.items() if name in names]
