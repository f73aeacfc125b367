"""The device's side of each shuffle transport, by the name tasks give it
(``TaskConfig.aggregation``; the names are on the wire and in the outbox too):

- ``reports`` (``services.device.transports.reports``): the randomized row sealed with HPKE;
- ``secure-sum`` (``services.device.transports.secure_sum``): the row's counts (or signed
  statistics) encrypted under the analyzer's Paillier key, with a tag sealed with HPKE; the
  keys are fetched and obfuscator pools refilled in the background (``refiller``).

Each is a ``DeviceTransport`` (``base``). ``Transports`` holds one object per registered
transport for a device's runtime. A new transport is one module defining its class, registered
in ``TRANSPORTS`` below.
"""

from __future__ import annotations

from privbandit.services.common.transports import TransportSet
from privbandit.services.device.transports.base import Context, DeviceTransport
from privbandit.services.device.transports.prio3 import Prio3Transport
from privbandit.services.device.transports.reports import ReportsTransport
from privbandit.services.device.transports.secure_sum import SecureSumTransport
from privbandit.shared.settings import Settings

_REGISTERED: tuple[type[DeviceTransport], ...] = (
    ReportsTransport, SecureSumTransport, Prio3Transport)
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
