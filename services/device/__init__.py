"""The device service: the on-device agent of the ESA pipeline (spec §2).

It decides locally from the cached broadcast model, and turns each feedback into a locally
randomised report encrypted to the analyzer — sealed with HPKE for a ``reports`` task, or only its
coordinate counts under the analyzer's Paillier key for a ``secure-sum`` task — queued durably and
uploaded to the shuffler.
"""

from privbandit.services.device.app import create_app

__all__ = ["create_app"]
