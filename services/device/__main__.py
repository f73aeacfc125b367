"""``python -m services.device [--host H] [--port P] [--access-log] [--init]``: run the device
service with uvicorn."""

from __future__ import annotations

from privbandit.services.common.cli import run_service
from privbandit.services.device.app import create_app


def main(argv: list[str] | None = None) -> None:
    # Leave open streams after a few seconds on SIGTERM rather than hanging the shutdown.
    run_service("device", __doc__, create_app, argv, graceful_timeout=5)


if __name__ == "__main__":
    main()
