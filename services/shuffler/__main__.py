"""``python -m services.shuffler [--host H] [--port P] [--access-log] [--init]``: run the shuffler
with uvicorn."""

from __future__ import annotations

import gc


def main(argv: list[str] | None = None) -> None:
    gc.disable()  # until started: ``services.common.app.build_app``'s lifespan says why
    from privbandit.services.common.cli import run_service
    from privbandit.services.shuffler.app import create_app

    run_service("shuffler", __doc__, create_app, argv, graceful_timeout=10)


if __name__ == "__main__":
    main()
