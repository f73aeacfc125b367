"""``python -m services.shuffler [--host H] [--port P]``: run the shuffler with uvicorn."""

from __future__ import annotations

import argparse
import logging

import uvicorn

from services.shuffler.app import create_app
from shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    parser = argparse.ArgumentParser(prog="python -m services.shuffler", description=__doc__)
    parser.add_argument("--host", default=settings.shuffler.host)
    parser.add_argument("--port", type=int, default=settings.shuffler.port)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    # httpx logs every request at INFO: one line per batch delivery (or key fetch) is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    uvicorn.run(
        create_app(settings),
        host=args.host,
        port=args.port,
        log_level=settings.log_level.lower(),
        # One line per upload costs more than the upload itself under load.
        access_log=settings.log_level.lower() == "debug",
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    main()
