"""The rule a shuffler token must meet (``shuffler_token_problem``), standard library only: the
analyzer and the shuffler refuse to start without a usable token (``services.common.app``), and
docker-compose's entrypoint (``docker/compose_entrypoint.py``, which runs outside the installed
package) applies the same rule before it starts a container's service."""

from __future__ import annotations

import re

# The shuffler's credential: at least this many characters, the syntax of an RFC 6750 bearer token
# (b64token), and none of the well-known placeholders (a public "secret" authenticates anyone).
MIN_TOKEN_LENGTH = 32
PLACEHOLDER_TOKENS = frozenset({
    "change-me-shuffler-token",  # the default of earlier releases
    "changeme", "change-me", "change_me", "secret", "password", "token", "shuffler-token",
})
PLACEHOLDER_PREFIXES = ("change-me", "changeme", "change_me", "replace-me", "your-", "example")
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
HOW_TO_SET_TOKEN = (
    "set PRIVBANDIT_SHUFFLER_TOKEN (e.g. to the output of `openssl rand -base64 32`), "
    "PRIVBANDIT_SHUFFLER_TOKEN_FILE to a file holding it, or shuffler_token in the config file "
    "(PRIVBANDIT_CONFIG), the same on the analyzer and the "
    "shuffler; `privbandit up` generates one per data directory"
)


def shuffler_token_problem(token: str | None) -> str | None:
    """Why ``token`` must not be used as the shuffler's credential, or None if it may."""
    if not token:
        return f"no shuffler token is configured (shuffler_token): {HOW_TO_SET_TOKEN}"
    lowered = token.lower()
    if lowered in PLACEHOLDER_TOKENS or lowered.startswith(PLACEHOLDER_PREFIXES):
        return (f"the configured shuffler_token is a well-known placeholder, which would let "
                f"anyone post batches: {HOW_TO_SET_TOKEN}")
    if len(token) < MIN_TOKEN_LENGTH:
        return (f"the configured shuffler_token has {len(token)} characters; at least "
                f"{MIN_TOKEN_LENGTH} are required: {HOW_TO_SET_TOKEN}")
    if _B64TOKEN.fullmatch(token) is None:
        return ("the configured shuffler_token must be a bearer token (letters, digits and "
                f"-._~+/, optionally ending in =): {HOW_TO_SET_TOKEN}")
    return None
