"""The device service: the on-device agent of the ESA pipeline (spec §2).

It decides locally from the cached broadcast model, and turns each feedback into a locally
randomised report encrypted to the analyzer — sealed with HPKE for a ``reports`` task, or only its
coordinate counts under the analyzer's Paillier key for a ``paillier`` task — queued durably and
uploaded to the shuffler.

The package imports nothing itself; ``create_app`` is imported on first use (PEP 562). A process
that needs one small module of it must not pay for the whole service: above all the Paillier
refill workers (``services.device.transports.refiller``), which ``spawn`` starts by running the
parent's main module again — ``services.device.__main__`` under ``python -m services.device`` —
before anything else (about a second of CPU per worker, and per device start, otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from privbandit.services.device.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from privbandit.services.device.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
