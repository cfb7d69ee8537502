"""Which sidecar this process runs: its release (the package version) and a build id that changes
with the code, and which releases wrote an index (its manifest's meta).

The build id is a digest of the package's own source files, read once per process: an install
from a checkout (`pip install -e .`) changes it with every edit of the code without git at run
time, and two installations of one version that run other code (a checkout a few commits apart,
an upgrade that kept the version) tell apart. The manifest keeps the release that last wrote the
index, the newest release that ever did, and the builds that wrote it in the order they first did
(``WRITERS_META``): a daemon older than the newest release says so (a downgrade, or a daemon still
running the code from before an upgrade), and so does a build of one version first seen before
the build that wrote the index last (a downgrade between two checkouts); a build never seen is
an upgrade, said nowhere (no clock orders builds: a clock can be set back). The order keeps the
last 64 builds; the older ones are kept as short digests of builds seen before all of them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import re
import secrets
from pathlib import Path
from typing import Any

from sidecar import __version__

# The manifest's meta row: {"last": {"version", "build", "run"}, "newest": {"version", "build"},
# "builds": [build, ...], "dropped": base64 of the digests of builds dropped from "builds",
# "before": {"version", "build"}, "unrecorded": true} (``record_writer``).
WRITERS_META = "written_by_release"

# The first release that records its writers: an index holding notes without a record was
# written by an earlier one (spelled short: the release itself is spelled in one place only).
FIRST_RECORDING = "0.3"

# This process's run of its build, in ``last``: ``before`` is kept by the process that wrote it
# only. A pid is no such mark (a container's entrypoint daemon is pid 1 at every start).
_RUN = secrets.token_hex(8)

# The builds kept in the order they first wrote the index: a checkout's dozens of builds a year,
# the oldest dropped first. A dropped one is remembered as seen before every build kept, by an
# 8-byte digest in a capped list (``"dropped"``, oldest out first): taken for never seen, one run
# again was called an upgrade and recorded as the latest, and the real latest run after it was
# called a downgrade. Exact (a never-seen build matches one by chance about once in 2^52 with the
# list full), unlike a filter of fixed size, which took ever more new builds for dropped ones and
# called them downgrades. A build dropped from the list too counts as never seen (an upgrade).
_BUILDS_KEPT = 64
_DROPPED_KEPT = 4096  # 32 KiB of digests: thousands of builds, decades of a checkout's edits
_DIGEST = 8


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
    data = _record(value)
    return {
        k: {"version": str(v.get("version", "")), "build": str(v.get("build", ""))}
        for k, v in data.items()
        if k in ("last", "newest", "before") and isinstance(v, dict)
    }


def _record(value: str | None) -> dict[str, Any]:
    try:
        data: Any = json.loads(value) if value else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _builds(value: str | None) -> list[str]:
    """The builds that wrote the index, in the order they first did (the last writer's alone for
    a record kept before the order was)."""
    data = _record(value)
    builds = data.get("builds")
    if isinstance(builds, list):
        return [str(b) for b in builds if b]
    last = read_writers(value).get("last")
    return [last["build"]] if last is not None and last["build"] else []


def _digest(build: str) -> bytes:
    return hashlib.sha256(build.encode()).digest()[:_DIGEST]


def _dropped(value: str | None) -> list[bytes]:
    """The digests of the builds dropped from the kept order, oldest first ([] for none, or
    another form)."""
    raw = _record(value).get("dropped")
    try:
        data = base64.b64decode(raw, validate=True) if isinstance(raw, str) else b""
    except (binascii.Error, ValueError):
        data = b""
    if len(data) % _DIGEST:
        return []
    return [data[i : i + _DIGEST] for i in range(0, len(data), _DIGEST)][-_DROPPED_KEPT:]


def _was_dropped(dropped: list[bytes], build: str) -> bool:
    return _digest(build) in dropped


def _place(value: str | None, build: str) -> int | None:
    """Where ``build`` first wrote the index among its writers: its place in the kept order, -1
    when it was dropped from it (before every build kept), None when never seen."""
    seen = _builds(value)
    if build in seen:
        return seen.index(build)
    return -1 if _was_dropped(_dropped(value), build) else None


def downgraded_from(value: str | None, build: str) -> dict[str, str] | None:
    """The last writer when ``build`` is a build of its version that first wrote the index before
    it did (a downgrade between two builds of one version, e.g. a checkout a few commits back, or
    many), else None: a build never seen is an upgrade (a pull, an install of a newer checkout),
    and of two builds dropped from the kept order neither is known to be the older."""
    last = read_writers(value).get("last")
    if last is None or last["version"] != __version__ or last["build"] in ("", build):
        return None
    mine, theirs = _place(value, build), _place(value, last["build"])
    if mine is None or theirs is None:
        return None
    return last if mine < theirs else None


def record_writer(value: str | None, rebuilt: bool = False, unrecorded: bool = False) -> str:
    """The meta row's value once this release writes the index: it is the last writer, the newest
    unless a newer one wrote it before (or ``rebuilt``: the notes read anew by this one), and its
    build is kept in the order builds first wrote it. ``before``: the last writer when this build
    is a downgrade from it (``downgraded_from``), kept for this process's life (its stores are
    opened anew by a switch to writable) and dropped by a rebuild and at this build's next start.
    ``unrecorded``: the index holds notes and no record (``value`` None): a release before
    FIRST_RECORDING wrote it; kept (``"unrecorded"``) until a rebuild reads every note anew."""
    me = this_release()
    writers = read_writers(value)
    newest = writers.get("newest")
    if rebuilt or newest is None or not is_newer(newest["version"], me["version"]):
        newest = me
    seen, dropped = _builds(value), _dropped(value)
    # A build dropped from the order stays before every build kept (appended, it became the latest).
    if me["build"] not in seen and not _was_dropped(dropped, me["build"]):
        seen = [*seen, me["build"]]
        dropped = [*dropped, *(_digest(old) for old in seen[:-_BUILDS_KEPT])][-_DROPPED_KEPT:]
        seen = seen[-_BUILDS_KEPT:]
    record: dict[str, Any] = {"last": {**me, "run": _RUN}, "newest": newest, "builds": seen}
    if not rebuilt and ((unrecorded and value is None) or written_unrecorded(value)):
        record["unrecorded"] = True
    if dropped:
        record["dropped"] = base64.b64encode(b"".join(dropped)).decode()
    last, before = writers.get("last"), writers.get("before")
    earlier = None if rebuilt else downgraded_from(value, me["build"])
    if earlier is not None:
        record["before"] = earlier
    elif not rebuilt and before is not None and last == me and _last_run(value) == _RUN:
        record["before"] = before
    return json.dumps(record, sort_keys=True)


def written_unrecorded(value: str | None) -> bool:
    """Whether a release before FIRST_RECORDING (which records no writer) wrote the index too: a
    downgrade to one is said by nothing, then or later."""
    return _record(value).get("unrecorded") is True


def _last_run(value: str | None) -> str | None:
    last = _record(value).get("last")
    run = last.get("run") if isinstance(last, dict) else None
    return run if isinstance(run, str) else None


def other_build(writers: dict[str, dict[str, str]], build: str) -> dict[str, str] | None:
    """The build of this version that wrote the index last before the daemon of ``build``
    started, when that daemon is a downgrade from it (its ``before``), else None."""
    before = writers.get("before")
    if not before or before.get("version") != __version__ or before.get("build") in (None, "", build):
        return None
    return before


def newer_writer(value: str | None) -> dict[str, str] | None:
    """The newest release that wrote the index when it is newer than this one, else None."""
    newest = read_writers(value).get("newest")
    return newest if newest is not None and is_newer(newest["version"], __version__) else None
