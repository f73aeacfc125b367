"""``python -m services.shuffler [--host H] [--port P] [--access-log]``: run the shuffler with
uvicorn."""

from __future__ import annotations

from services.common.cli import serve, service_args, setup_logging
from services.shuffler.app import create_app
from shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    args = service_args("shuffler", __doc__, settings, argv)
    setup_logging(settings)
    serve(create_app(settings), args, settings, graceful_timeout=10)


if __name__ == "__main__":
    main()
