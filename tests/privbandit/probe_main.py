"""A stand-in service for ``test_forkstart``: run as ``python -m tests.privbandit.probe_main OUT
MODE [CODE]`` or forked as if, it writes what it sees (argv, environment, session, stdin, working
directory, ``__name__``) as JSON to the file OUT, one line to stdout and one to stderr, then
``exit CODE``s, ``raise``s or ``wait``s for a signal."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

if __name__ == "__main__":
    out, mode, *rest = sys.argv[1:]
    seen = {"argv": sys.argv[1:], "env": dict(os.environ), "sid": os.getsid(0),
            "pid": os.getpid(), "stdin": sys.stdin.read(), "cwd": os.getcwd(), "name": __name__}
    print("a line to stdout")
    print("a line to stderr", file=sys.stderr)
    Path(f"{out}.part").write_text(json.dumps(seen))
    os.replace(f"{out}.part", out)
    if mode == "exit":
        sys.exit(int(rest[0]))
    if mode == "raise":
        raise RuntimeError("the probe fails")
    while True:
        signal.pause()
