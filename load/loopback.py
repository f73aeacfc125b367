"""The one rule every load script obeys: it talks to loopback addresses only."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def loopback_only(url: str) -> str:
    """``url`` without a trailing slash if its host is a loopback address; exits otherwise."""
    host = urlsplit(url).hostname or ""
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise SystemExit(f"refusing {url}: the load scripts only talk to loopback addresses")
    return url.rstrip("/")
