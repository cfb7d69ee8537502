"""Hostile and broken input on the socket: the daemon answers or drops, never falls over."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import write
from tests.daemon_process import DaemonProcess, exchange


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    base = tmp_path_factory.mktemp("abuse")
    vault = base / "vault"
    write(vault / "Boat.md", "# Boat\n\nThe outboard engine needs new spark plugs.\n")
    # The protocol is under test here, not the model. A process of its own: 2,000 idle
    # connections (10,000 in bench/chaos.py) would share this process's file limit in-process.
    # Module-scoped: set up before the per-test hermetic environment, so this strips it itself.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    d = DaemonProcess(base / "home", vault, base_env=clean, keyword_only=True)
    d.start()
    yield d
    d.stop()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)
ops = st.sampled_from(
    ["health", "search", "recall", "get", "list", "write", "edit", "delete", "why", "index", "x"]
)
requests = st.fixed_dictionaries(
    {"op": ops | st.text(max_size=10)},
    optional={
        "id": json_values,
        "v": json_values,
        "agent": st.text(max_size=70) | json_values,
        "params": st.dictionaries(
            st.sampled_from(
                [
                    "query",
                    "message",
                    "limit",
                    "minScore",
                    "source",
                    "reference",
                    "slug",
                    "content",
                    "history",
                    "tag",
                    "since",
                    "frontmatter",
                    "rebuild",
                    "zzz",
                ]
            ),
            json_values | st.text(max_size=200),
            max_size=6,
        )
        | json_values,
    },
)


# bench/chaos.py runs these with more examples and connections (RELIABILITY.md).
EXAMPLES = int(os.environ.get("SIDECAR_CHAOS_EXAMPLES", "150"))
IDLE = int(os.environ.get("SIDECAR_CHAOS_IDLE", "2000"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(req=requests)
def test_random_requests_get_an_answer_each(daemon: DaemonProcess, req: dict[str, object]) -> None:
    """Any JSON request gets exactly one well-formed answer; nothing is written outside an inbox."""
    if req.get("op") in ("index",):
        req["op"] = "health"  # sweeps on demand are fine but slow the property run down
    answers = exchange(daemon.socket, json.dumps(req).encode() + b"\n")
    assert len(answers) == 1
    a = answers[0]
    assert a["ok"] is True or (isinstance(a["error"], dict) and a["error"]["code"] and a["error"]["message"])


@settings(
    max_examples=max(100, EXAMPLES * 2 // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(raw=st.binary(max_size=300))
def test_random_bytes_never_break_the_daemon(daemon: DaemonProcess, raw: bytes) -> None:
    """Arbitrary bytes get error frames (or nothing, for a half line) and the daemon stays up."""
    answers = exchange(daemon.socket, raw.replace(b"\n", b" ") + b"\n")
    assert all(a["ok"] is False or a.get("result") is not None for a in answers)


def test_abuse_leaves_the_daemon_healthy_and_the_vault_untouched(daemon: DaemonProcess) -> None:
    """After the property runs: health answers, the vault holds only its note."""
    assert daemon.health()["index"]["state"] == "ready"
    assert daemon.vault is not None
    assert sorted(p.name for p in daemon.vault.rglob("*") if p.is_file()) == ["Boat.md"]


def test_many_idle_connections_and_a_client_that_never_reads(daemon: DaemonProcess) -> None:
    """2,000 idle connections (10,000 in bench/chaos) and a client that floods requests without
    reading do not stop others."""
    idle = []
    for _ in range(IDLE):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(daemon.socket))
        idle.append(s)
    flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    flood.connect(str(daemon.socket))
    flood.setblocking(False)
    frame = b'{"op": "search", "params": {"query": "spark plugs"}}\n'
    sent = 0
    try:
        for _ in range(20_000):
            sent += flood.send(frame)
    except BlockingIOError:
        pass  # our send buffer is full: the daemon stopped reading us, as it should
    try:
        t0 = time.monotonic()
        hits = daemon.call("search", {"query": "spark plugs"})["hits"]
        assert hits[0]["reference"] == "vault/Boat"
        assert time.monotonic() - t0 < 10
        assert sent > 0
    finally:
        flood.close()
        for s in idle:
            s.close()
    assert daemon.health()["index"]["state"] == "ready"


HOSTILE_SLUGS = [
    "../escape",
    "a/b",
    "a\\b",
    "%2e%2e",
    "%2e%2e%2fescape",
    "/etc/passwd",
    "..",
    ".",
    "",
    "x\0y",
    "a\u2215b",  # DIVISION SLASH looks like "/"
    "a\u2044b",  # FRACTION SLASH
    "\uff0e\uff0e",  # FULLWIDTH FULL STOPs look like ".."
    "a" * 300,
    "CON\u200b",  # zero-width space
]
HOSTILE_REFERENCES = [
    "vault/../../etc/passwd",
    "vault/%2e%2e/%2e%2e/etc/passwd",
    "%2e%2e/%2e%2e/etc/passwd",
    "/etc/passwd",
    "vault//etc/passwd",
    "vault/\0",
    "memory/../../x",
    "wiki/../../../etc/shadow",
]


def test_fixed_corpus_of_hostile_names(daemon: DaemonProcess) -> None:
    """Slugs with separators, encoded dots, look-alike slashes and NULs, and references that
    climb out of a root, are each refused with a clear error; nothing lands outside the inbox."""
    assert daemon.vault is not None
    home = daemon.home
    before = {p for p in home.parent.rglob("*") if p.is_file() and "daemon-" not in p.name}
    for slug in HOSTILE_SLUGS:
        for op in ("write", "edit", "delete"):
            answers = exchange(
                daemon.socket,
                json.dumps({"op": op, "agent": "probe", "params": {"slug": slug, "content": "x"}}).encode()
                + b"\n",
            )
            assert answers[0]["ok"] is False, (op, slug)
            assert answers[0]["error"]["code"] in ("bad_memory_write", "bad_request", "not_found"), (op, slug)
    for ref in HOSTILE_REFERENCES:
        answers = exchange(
            daemon.socket, json.dumps({"op": "get", "params": {"reference": ref}}).encode() + b"\n"
        )
        assert answers[0]["ok"] is False and answers[0]["error"]["code"] in ("bad_reference", "not_found"), (
            ref
        )
    for params in ({"query": "x", "limit": 10**12}, {"query": "x", "limit": -5}, {"query": "\0"}):
        answers = exchange(daemon.socket, json.dumps({"op": "search", "params": params}).encode() + b"\n")
        assert answers[0]["ok"] is False and answers[0]["error"]["code"] == "bad_request", params
    after = {p for p in home.parent.rglob("*") if p.is_file() and "daemon-" not in p.name}
    new = {p for p in after - before if "agents" not in p.relative_to(home.parent).parts}
    assert {p for p in new if not p.is_relative_to(home / "index")} == set(), new
    assert sorted(p.name for p in daemon.vault.rglob("*") if p.is_file()) == ["Boat.md"]
