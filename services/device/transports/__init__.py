"""The device's side of each shuffle transport, by the name tasks give it
(``TaskConfig.transport``; the names are on the wire and in the outbox too):

- ``reports`` (``services.device.transports.reports``): the randomized row sealed with HPKE;
- ``paillier`` (``services.device.transports.paillier``; ``secure_sum = "paillier"``): the
  row's counts (or signed statistics) encrypted under the analyzer's Paillier key, with a tag
  sealed with HPKE; the keys are fetched and obfuscator pools refilled in the background
  (``refiller``);
- ``prio3`` (``services.device.transports.prio3``; ``secure_sum = "prio3"``): the row's values
  as a Prio3 measurement, secret-shared between the shuffler and the analyzer.

Each is a ``DeviceTransport`` (``base``). ``Transports`` holds one object per registered
transport for a device's runtime. A new transport is one module defining its class, registered
in ``TRANSPORTS`` below.
"""

from __future__ import annotations

from privbandit.services.common.transports import TransportSet
from privbandit.services.device.transports.base import Context, DeviceTransport
from privbandit.services.device.transports.paillier import PaillierTransport
from privbandit.services.device.transports.prio3 import Prio3Transport
from privbandit.services.device.transports.reports import ReportsTransport
from privbandit.shared.settings import Settings

_REGISTERED: tuple[type[DeviceTransport], ...] = (
    ReportsTransport, PaillierTransport, Prio3Transport)
TRANSPORTS: dict[str, type[DeviceTransport]] = {t.name: t for t in _REGISTERED}


class Transports(TransportSet[DeviceTransport]):
    """One object per registered transport, each with the tasks configured with it, for one
    device runtime."""

    def __init__(self, settings: Settings, context: Context) -> None:
        super().__init__(TRANSPORTS, settings, context, "device")

    def start(self) -> None:
        for transport in self:
            transport.start()

    async def stop(self) -> None:
        for transport in self:
            await transport.stop()
