"""The benchmarks' command line: integer options with defaults, and where the JSON goes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def parse(doc: str | None, options: dict[str, int], json_default: str) -> argparse.Namespace:
    """``--name N`` for each integer option (underscores become dashes), and ``--json PATH``."""
    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    for name, default in options.items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=int, default=default,
                        help=f"(default {default})")
    ap.add_argument("--json", type=Path, default=Path(json_default))
    return ap.parse_args()


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}")
