"""``python -m services.device [--host H] [--port P]``: run the device service with uvicorn.

``--host`` is only the bind address (``0.0.0.0`` in a container); the peers' addresses come from
the settings (config file and ``PRIVBANDIT_*`` environment variables).
"""

from __future__ import annotations

import argparse
import logging

import uvicorn

from services.device.app import create_app
from shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.device", description=__doc__)
    parser.add_argument("--host", help="bind address (default: the device host in the settings)")
    parser.add_argument("--port", type=int, help="port (default: the device port in the settings)")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s device %(levelname)s %(message)s"
    )
    # httpx logs every request at INFO: one line per upload and poll is noise, and costs time.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    uvicorn.run(
        create_app(settings),
        host=args.host or settings.device.host,
        port=args.port or settings.device.port,
        log_level=settings.log_level,
        access_log=args.access_log,
        # Leave open streams after a few seconds on SIGTERM rather than hanging the shutdown.
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    main()
