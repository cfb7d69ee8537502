"""Secret masking on hostile runs, old code against new: one ``mask`` call over 50 and 100 kB of a
rule's opener repeated (the password rule's lookahead and the token rule's start inside a run were
quadratic; masking runs on every hit's text, title and headings and on memory writes).

    python bench/maskspeed.py TREE [TREE ...]

Each TREE is a checkout (or ``git archive`` export) whose ``sidecar`` package is timed, in a
process of its own.
"""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys, time
from sidecar.notes.redact import mask
for unit in ("secret:", "-eyJ", "password=", "Bearer "):
    for n in (50_000, 100_000):
        s = unit * (n // len(unit))
        t = time.perf_counter()
        mask(s)
        print(f"{unit!r:12} {n:>7,} chars {time.perf_counter() - t:8.3f} s", flush=True)
"""


def main() -> None:
    for tree in sys.argv[1:] or ["."]:
        print(f"== {tree}", flush=True)
        subprocess.run([sys.executable, "-c", _PROBE], cwd=tree, check=True)


if __name__ == "__main__":
    main()
