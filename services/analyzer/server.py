"""The analyzer's uvicorn server: it ends the model streams as soon as a stop is requested."""

from __future__ import annotations

from types import FrameType

import uvicorn
from fastapi import FastAPI

from privbandit.services.analyzer.app import request_shutdown
from privbandit.services.common.server import server_config
from privbandit.shared.settings import Connections


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


def build_server(
    app: FastAPI, host: str, port: int, log_level: str = "info", access_log: bool | None = None,
    connections: Connections | None = None,
) -> Server:
    """A uvicorn server for an analyzer app (port 0 picks a free port). ``access_log`` defaults
    to on only at log level debug; ``connections``: header and idle timeouts and the connection
    limit (default: the app's settings')."""
    config = server_config(
        app, host, port,
        connections if connections is not None else app.state.settings.connections,
        log_level=log_level,
        # One line per request costs more than a batch ingest of l = 1 under load.
        access_log=log_level.lower() == "debug" if access_log is None else access_log,
        graceful_timeout=10,
    )
    return Server(config, app)
