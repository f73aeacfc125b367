"""``python -m privbandit.services.device [--host H] [--port P] [--access-log] [--init]``: run
the device service with uvicorn."""

from __future__ import annotations

import gc


def main(argv: list[str] | None = None) -> None:
    gc.disable()  # until started: ``services.common.app.build_app``'s lifespan says why
    # Imported here, not at the top: a Paillier refill worker (``spawn``) runs this module again
    # as ``__mp_main__`` before its first task, and needs none of the service (``__init__``).
    from privbandit.services.common.cli import run_service
    from privbandit.services.device.app import create_app

    # Leave open streams after a few seconds on SIGTERM rather than hanging the shutdown.
    run_service("device", __doc__, create_app, argv, graceful_timeout=5)


if __name__ == "__main__":
    main()
