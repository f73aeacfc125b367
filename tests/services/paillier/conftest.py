"""Every test here runs on both stores (``tests.services.stores``)."""

from tests.services.stores import store

__all__ = ["store"]
