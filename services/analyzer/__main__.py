"""``python -m services.analyzer [--host H] [--port P] [--access-log] [--init]``: run the analyzer
with uvicorn."""

from __future__ import annotations

import gc


def main(argv: list[str] | None = None) -> None:
    gc.disable()  # until started: ``services.common.app.build_app``'s lifespan says why
    from privbandit.services.analyzer.app import create_app
    from privbandit.services.analyzer.server import build_server
    from privbandit.services.common.cli import (
        build_or_exit,
        service_args,
        single_threaded_blas,
        start_process,
    )
    from privbandit.shared.settings import Settings

    settings = Settings()
    args = service_args("analyzer", __doc__, settings, argv)
    start_process("analyzer", args, settings)
    app = build_or_exit("analyzer", lambda: create_app(settings, init=args.init))
    app.state.freeze_gc = True  # a service process (as ``cli.serve`` flags the others)
    single_threaded_blas()  # as ``cli.serve`` limits the others: whatever the environment says
    server = build_server(app, args.host, args.port, settings.log_level,
                          access_log=args.access_log)
    server.run()


if __name__ == "__main__":
    main()
