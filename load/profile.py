"""Where a service spends its time under load: ``py-spy record`` of the service process while
Locust drives it (``load/run.py --profile``), summarised from py-spy's collapsed ("raw") stacks.

A collapsed stack is one line ``frame;frame;…;frame count`` (outermost first), each frame
``function (file:line)`` — with ``--nonblocking`` sampling the process is never paused, so the
profile costs the service (almost) nothing. ``summary`` gives, per function, the share of samples
in which it is on the stack (inclusive) and at the top (self), over every sampled thread (the
event loop and the worker threads that run commits and CPU work).

    python load/profile.py out/load/profile/decide.txt        # print the top functions
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# "function (path/to/file.py:123)" → "function (file.py)": lines split one function in many.
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^():]*?)(?::\d+)?\)$")


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter, or on PATH (None if neither)."""
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


def record(pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` (100 Hz, non-blocking, all threads, idle samples
    excluded), collapsed stacks to ``out``."""
    exe = py_spy()
    if exe is None:
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "100",
         "--nonblocking", "--threads", "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _frame(raw: str) -> str:
    m = _FRAME.match(raw.strip())
    if m is None:
        return raw.strip()
    return f"{m['fn']} ({Path(m['file']).name})"


@dataclass(frozen=True)
class Profile:
    samples: int
    inclusive: Counter[str]  # samples with the function anywhere on the stack
    self_time: Counter[str]  # samples with the function on top


def parse(text: str) -> Profile:
    """A ``Profile`` of py-spy's collapsed stacks (thread frames such as ``thread (0x…)`` are
    stack roots and are counted like any frame)."""
    inclusive: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        total += n
        for f in set(frames):
            inclusive[f] += n
        self_time[frames[-1]] += n
    return Profile(total, inclusive, self_time)


def summary(profile: Profile, top: int = 25) -> str:
    """The ``top`` functions by inclusive and by self share, as text."""
    if not profile.samples:
        return "no samples"
    lines = [f"{profile.samples} samples (100 Hz, all threads, idle excluded)",
             "inclusive:"]
    lines += [f"  {100 * n / profile.samples:5.1f}%  {f}"
              for f, n in profile.inclusive.most_common(top)]
    lines.append("self:")
    lines += [f"  {100 * n / profile.samples:5.1f}%  {f}"
              for f, n in profile.self_time.most_common(top)]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path, help="py-spy collapsed stacks (--format raw)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    print(summary(parse(args.raw.read_text()), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
