"""The entrypoint of every privbandit container of ``docker-compose.yml``: derives the services'
store and shuffler settings from what the operator exported, then runs the container's command.

Compose v1 (Debian's ``docker-compose`` 1.29) interpolates only ``${VAR}``, ``${VAR:-default}``
and ``${VAR:?error}``, not nested, so the compose file cannot say "if the PostgreSQL password is
set, the store is this URL". It passes the operator's variables through verbatim instead (unset
and empty alike arrive as ``""``) and this script, run before the service, applies the rule:

=============================================  ==================================================
variable                                       derived from (the first non-empty)
=============================================  ==================================================
``PRIVBANDIT_ANALYZER__STORE``,                ``PRIVBANDIT_STORE``;
``PRIVBANDIT_SHUFFLER__STORE``                 ``postgresql://privbandit:<pw>@postgres:5432/
                                               privbandit`` if ``PRIVBANDIT_POSTGRES_PASSWORD``
``PRIVBANDIT_SHUFFLER__URLS``                  ``PRIVBANDIT_SHUFFLER_URLS`` (a JSON list);
                                               both replicas of the ``postgres`` profile
                                               (``shuffler``, ``shuffler-2``) if the password is
=============================================  ==================================================

Nothing derived: the variable is not set, and the service keeps its setting (``"sqlite"``, a
single shuffler). A derived variable already set to a non-empty value in the container (e.g. by
a compose override file) is kept. The password is percent-encoded in the URL (RFC 3986 userinfo;
libpq decodes it), so any password works and ``services.common.pg.redact`` can hide it. The three
operator variables are removed from the service's environment: it reads only the derived ones.

The shuffler token. Compose refuses an unset or empty ``PRIVBANDIT_SHUFFLER_TOKEN`` itself
(``${VAR:?}``), but cannot judge its strength; the analyzer and the shuffler refuse a weak one at
start-up, and compose's ``restart: unless-stopped`` would start them again and again. So when the
variable is in the container's environment this script first applies the services' rule
(``shared/credentials.py``, loaded from beside this script): a token they would refuse is named in
ONE line on stderr and nothing is run; the container then stays up, idle, without the service
(its healthcheck fails and the containers that depend on it wait) until it is stopped — no
restart loop. Set a good token and ``docker-compose up -d`` again.

The topology named here (the ``postgres`` service, user and database ``privbandit``, replica
``shuffler-2`` on port 8704) is ``docker-compose.yml``'s; ``tests/e2e/test_compose.py`` checks the
two agree. Standard library only: it runs as a script (``python /opt/privbandit/docker/
compose_entrypoint.py <command...>``), outside the installed package.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn
from urllib.parse import quote

# What the operator exports (passed through by docker-compose.yml).
PASSWORD = "PRIVBANDIT_POSTGRES_PASSWORD"
STORE = "PRIVBANDIT_STORE"
SHUFFLER_URLS = "PRIVBANDIT_SHUFFLER_URLS"
OPERATOR_VARIABLES = (PASSWORD, STORE, SHUFFLER_URLS)

# The shuffler's credential, checked before the service runs (module docstring).
TOKEN = "PRIVBANDIT_SHUFFLER_TOKEN"
# Where docker-compose.yml mounts it (a compose secret); the services read it from there.
TOKEN_FILE = "PRIVBANDIT_SHUFFLER_TOKEN_FILE"
# The services' rule, beside this script (/opt/privbandit/shared/credentials.py in the image).
CREDENTIALS = Path(__file__).resolve().parents[1] / "shared" / "credentials.py"

# What the services read (shared.settings.Settings).
ANALYZER_STORE_SETTING = "PRIVBANDIT_ANALYZER__STORE"
SHUFFLER_STORE_SETTING = "PRIVBANDIT_SHUFFLER__STORE"
SHUFFLER_URLS_SETTING = "PRIVBANDIT_SHUFFLER__URLS"

# docker-compose.yml's `postgres` profile.
POSTGRES_USER = POSTGRES_DB = "privbandit"
POSTGRES_ADDRESS = "postgres:5432"
PROFILE_REPLICAS = ("http://shuffler:8702", "http://shuffler-2:8704")


def postgres_url(password: str) -> str:
    """The store URL of the profile's database, ``password`` percent-encoded."""
    return (f"postgresql://{POSTGRES_USER}:{quote(password, safe='')}@{POSTGRES_ADDRESS}/"
            f"{POSTGRES_DB}")


def derive(env: Mapping[str, str]) -> dict[str, str]:
    """The service's environment: ``env`` without the operator variables, with the store and
    shuffler URLs they imply (module docstring). Empty values count as unset."""
    password = env.get(PASSWORD, "")
    store = env.get(STORE, "") or (postgres_url(password) if password else "")
    urls = env.get(SHUFFLER_URLS, "") or (json.dumps(list(PROFILE_REPLICAS)) if password else "")
    out = {k: v for k, v in env.items() if k not in OPERATOR_VARIABLES}
    for key, value in ((ANALYZER_STORE_SETTING, store), (SHUFFLER_STORE_SETTING, store),
                       (SHUFFLER_URLS_SETTING, urls)):
        if value and not out.get(key):
            out[key] = value
    return out


def token_rule() -> Callable[[str | None], str | None]:
    """``shuffler_token_problem`` of ``shared/credentials.py``, loaded by path (no package
    import: this script runs before, and outside, the service)."""
    spec = importlib.util.spec_from_file_location("privbandit_credentials", CREDENTIALS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rule: Callable[[str | None], str | None] = module.shuffler_token_problem
    return rule


def token_refusal(env: Mapping[str, str]) -> str | None:
    """The one line refusing the shuffler token of ``env`` (the variable, or the file it names:
    the compose secret), or None (fine, or not given)."""
    if TOKEN_FILE in env:
        try:
            token: str | None = Path(env[TOKEN_FILE]).read_text(encoding="utf-8").rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            return (f"privbandit: refusing to start: cannot read the shuffler token file "
                    f"{env[TOKEN_FILE]} ({type(exc).__name__}); is the secret's file there?")
    elif TOKEN in env:
        token = env[TOKEN]
    else:
        return None
    problem = token_rule()(token)
    return None if problem is None else f"privbandit: refusing to start: {problem}"


def idle() -> NoReturn:
    """Wait, running nothing, until stopped (SIGTERM or SIGINT; exit status 78, EX_CONFIG)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(78))
    while True:
        signal.pause()


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Replace this process by ``argv`` (the container's command) in the derived environment,
    unless the shuffler token is one the services refuse (module docstring)."""
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        sys.exit("usage: compose_entrypoint.py COMMAND [ARG...]  (the service to run)")
    refusal = token_refusal(os.environ)
    if refusal is not None:
        print(refusal, file=sys.stderr, flush=True)
        idle()
    os.execvpe(command[0], command, derive(os.environ))


if __name__ == "__main__":
    main()
