"""``python -m services.device [--host H] [--port P] [--access-log]``: run the device service
with uvicorn."""

from __future__ import annotations

from services.common.cli import serve, service_args, setup_logging
from services.device.app import create_app
from shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    args = service_args("device", __doc__, settings, argv)
    setup_logging(settings)
    # Leave open streams after a few seconds on SIGTERM rather than hanging the shutdown.
    serve(create_app(settings), args, settings, graceful_timeout=5)


if __name__ == "__main__":
    main()
