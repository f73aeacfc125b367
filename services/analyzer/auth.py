"""Who may post to the analyzer's shuffler routes (the batch routes of every transport, and the
``prio3`` verification exchange): the shuffler, by its bearer token. Kept apart from
``routes`` so a transport module can declare a route of its own with the same check."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Header

from privbandit.services.analyzer.errors import NotShuffler
from privbandit.services.common.deps import get_runtime


async def require_shuffler(
    runtime: Annotated[Any, Depends(get_runtime)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Only the shuffler may post batches: ``Authorization: Bearer <settings.shuffler_token>``.

    The scheme is matched case-insensitively (RFC 7235 §2.1: ``Bearer``, ``bearer`` and
    ``BEARER`` are the same scheme); the token exactly, in constant time. An analyzer without a
    token (never started so: ``build_app`` refuses) accepts nothing."""
    scheme, _, token = (authorization or "").partition(" ")
    expected = (runtime.settings.shuffler_token or "").encode()
    # compare_digest: the comparison time does not reveal how much of the token matched.
    given = token.strip().encode()
    if scheme.lower() != "bearer" or not expected or not hmac.compare_digest(given, expected):
        raise NotShuffler(
            "batches are accepted from the shuffler only (missing or wrong bearer token)"
        )
