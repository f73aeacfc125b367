"""``python -m services.analyzer [--host H] [--port P]``: run the analyzer with uvicorn."""

from __future__ import annotations

import argparse
import logging
from types import FrameType

import uvicorn
from fastapi import FastAPI

from services.analyzer.app import create_app, request_shutdown
from shared.settings import Settings


class Server(uvicorn.Server):
    """uvicorn server that ends the model streams as soon as a stop is requested: uvicorn waits
    for open responses before it runs the lifespan shutdown, and a stream never ends by itself."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        request_shutdown(self._app)
        super().handle_exit(sig, frame)

    def stop(self) -> None:
        """Graceful stop without a signal (tests, embedding)."""
        request_shutdown(self._app)
        self.should_exit = True


def build_server(app: FastAPI, host: str, port: int, log_level: str = "info") -> Server:
    """A uvicorn server for an analyzer app (port 0 picks a free port)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        # One line per request costs more than a batch ingest of l = 1 under load.
        access_log=log_level.lower() == "debug",
        timeout_graceful_shutdown=10,
    )
    return Server(config, app)


def main(argv: list[str] | None = None) -> None:
    settings = Settings()
    parser = argparse.ArgumentParser(prog="python -m services.analyzer", description=__doc__)
    parser.add_argument("--host", default=settings.analyzer.host)
    parser.add_argument("--port", type=int, default=settings.analyzer.port)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    # httpx logs every request at INFO: one line per batch delivery (or key fetch) is noise.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    build_server(create_app(settings), args.host, args.port, settings.log_level).run()


if __name__ == "__main__":
    main()
