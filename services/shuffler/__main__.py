"""``python -m services.shuffler [--host H] [--port P] [--access-log] [--init]``: run the shuffler
with uvicorn."""

from __future__ import annotations

from privbandit.services.common.cli import run_service
from privbandit.services.shuffler.app import create_app


def main(argv: list[str] | None = None) -> None:
    run_service("shuffler", __doc__, create_app, argv, graceful_timeout=10)


if __name__ == "__main__":
    main()
