"""Which sidecar this process runs: its release (the package version) and a build id that changes
with the code, and which releases wrote an index (its manifest's meta).

The build id is a digest of the package's own source files, read once per process: an install
from a checkout (`pip install -e .`) changes it with every edit of the code without git at run
time, and two installations of one version that run other code (a checkout a few commits apart,
an upgrade that kept the version) tell apart. The manifest keeps the release that last wrote the
index and the newest release that ever did (``WRITERS_META``), so a daemon older than that one
says so (a downgrade, or a daemon still running the code from before an upgrade).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from sidecar import __version__

# The manifest's meta row: {"last": {"version", "build", "pid"}, "newest": {"version", "build"},
# "before": {"version", "build"}} (``record_writer``).
WRITERS_META = "written_by_release"


@functools.cache
def build_id() -> str:
    """12 hex digits of the package's source files (paths and bytes): the same code, the same id."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:  # a file gone under a running process: its name still counts
            data = b""
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:12]


def this_release() -> dict[str, str]:
    return {"version": __version__, "build": build_id()}


def said(release: dict[str, str]) -> str:
    """``sidecar 0.3.0 (build 0123456789ab)``."""
    build = release.get("build")
    return f"sidecar {release.get('version', '?')}" + (f" (build {build})" if build else "")


def _version_key(version: str) -> tuple[int, ...] | None:
    """The release's numbers (``0.3.0`` -> (0, 3, 0)); None for a version not so spelled."""
    numbers = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else None


def is_newer(version: str, than: str) -> bool:
    """Whether release ``version`` is newer than ``than`` (False when either cannot be told)."""
    a, b = _version_key(version), _version_key(than)
    return a is not None and b is not None and a > b


def read_writers(value: str | None) -> dict[str, dict[str, str]]:
    """The meta row's value as written by ``record_writer``; {} for none or another form."""
    try:
        data: Any = json.loads(value) if value else {}
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        k: {"version": str(v.get("version", "")), "build": str(v.get("build", ""))}
        for k, v in data.items()
        if k in ("last", "newest", "before") and isinstance(v, dict)
    }


def record_writer(value: str | None) -> str:
    """The meta row's value once this release writes the index: it is the last writer, and the
    newest unless a newer one wrote it before. ``before``: another build of this version that
    wrote it last before this process (versions order releases, nothing orders two builds of one:
    a downgrade between them is said, as a possible one), kept for this process's life (its
    stores are opened anew by a switch to writable) and dropped at the next start of this build."""
    me = this_release()
    writers = read_writers(value)
    newest = writers.get("newest")
    if newest is None or not is_newer(newest["version"], me["version"]):
        newest = me
    record: dict[str, Any] = {"last": {**me, "pid": os.getpid()}, "newest": newest}
    last, before = writers.get("last"), writers.get("before")
    if last is not None and last["version"] == me["version"] and last["build"] != me["build"]:
        record["before"] = last
    elif before is not None and last == me and _last_pid(value) == os.getpid():
        record["before"] = before
    return json.dumps(record, sort_keys=True)


def _last_pid(value: str | None) -> int | None:
    try:
        pid = json.loads(value or "{}")["last"]["pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) else None


def other_build(writers: dict[str, dict[str, str]], build: str) -> dict[str, str] | None:
    """Another build of this version that wrote the index before the daemon of ``build`` (its
    ``before``), else None."""
    before = writers.get("before")
    if not before or before.get("version") != __version__ or before.get("build") in (None, "", build):
        return None
    return before


def newer_writer(value: str | None) -> dict[str, str] | None:
    """The newest release that wrote the index when it is newer than this one, else None."""
    newest = read_writers(value).get("newest")
    return newest if newest is not None and is_newer(newest["version"], __version__) else None
