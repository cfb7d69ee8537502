"""The socket loop with the real handlers, in this process: frames in, frames out, errors as data,
many clients at once, and the bounds on connections, input and time."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import KEYWORD_ONLY, write
from tests.daemon_process import exchange
from tests.in_process import InProcessServer


def _refs(answer: dict[str, Any]) -> list[str]:
    return [h["reference"] for h in answer["result"]["hits"]]


def _connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(path))
    return s


def _recv_all(s: socket.socket, timeout: float = 10) -> bytes:
    s.settimeout(timeout)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except OSError:
        pass
    return data


def test_each_bad_frame_gets_an_error_and_the_connection_goes_on(in_process: InProcessServer) -> None:
    """Malformed JSON, wrong shapes, bad bytes, unknown ops, bad parameters: one error frame each,
    with the request's id where it has one, and the requests after them on the same connection
    are answered in order."""
    frames = [
        b"{not json",
        b"[1,2,3]",
        b'{"op": 5}',
        b"\xff\xfe garbage",
        b'{"id": "u", "op": "launch_missiles"}',
        b'{"id": 1, "op": "search", "params": {"query": 42}}',
        b'{"id": 2, "op": "search", "params": {"query": "x", "limit": -1}}',
        b'{"id": 3, "op": "search", "params": {"query": "x", "bogus": 1}}',
        b'{"id": 4, "op": "get", "params": {"reference": "vault/../../etc/passwd"}}',
        b'{"id": 5, "op": "health", "agent": "../../evil"}',
        b'{"id": 6, "v": 99, "op": "health"}',
        # nested past what json parses (recursion) and past the protocol's depth; a lone surrogate
        b'{"id": 8, "op": "search", "params": {"query": "x", "tag": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
        b'{"id": 9, "op": "search", "params": {"query": "x", "tag": ' + b"[" * 40 + b"]" * 40 + b"}}",
        b'{"id": 10, "op": "search", "params": {"query": "a\\ud800"}}',
        b"",  # an empty line is skipped, not answered
        b'{"id": 7, "op": "search", "params": {"query": "spark plugs"}}',
    ]
    answers = exchange(in_process.socket, b"\n".join(frames) + b"\n")
    assert len(answers) == len(frames) - 1
    *bad, good = answers
    assert [a["ok"] for a in bad] == [False] * len(bad)
    assert [a["id"] for a in bad[4:]] == ["u", 1, 2, 3, 4, 5, 6, None, 9, 10]
    assert all("nests deeper than 32" in a["error"]["message"] for a in bad[-3:-1])
    assert "surrogate" in bad[-1]["error"]["message"]
    assert "unknown op" in bad[4]["error"]["message"] and "launch_missiles" in bad[4]["error"]["message"]
    assert {a["error"]["code"] for a in bad} <= {"bad_request", "bad_reference"}
    assert all(a["error"]["message"] for a in bad)
    assert good["id"] == 7 and _refs(good)[0] == "vault/Projects/Boat"


def test_long_names_in_a_request_are_cut_in_its_error(in_process: InProcessServer) -> None:
    """An op, slug, agent name or version of 8 KB was echoed whole in the one-line error (as a
    reference was): now its start and its length, each error a few hundred characters."""
    long = "x" * 8192
    frames = [
        json.dumps({"id": 1, "op": long}),
        json.dumps({"id": 2, "op": "write", "agent": "a1", "params": {"slug": long, "content": "x"}}),
        json.dumps({"id": 3, "op": "health", "agent": long}),
        json.dumps({"id": 4, "v": [long], "op": "health"}),
        json.dumps({"id": 5, "op": "index", "params": {"confirmDeletions": "y" * 190}}),
        json.dumps({"id": 6, "op": "search", "params": {"query": "x", long + "\x1b[2J": 1}}),
        json.dumps({"id": 7, "op": "search", "params": {"query": "x", **{f"k{i}": 1 for i in range(5000)}}}),
        json.dumps({"id": 8, "op": "outline", "params": {"source": "vault", "pathPrefix": "z" * 900}}),
    ]
    answers = exchange(in_process.socket, "\n".join(frames).encode() + b"\n")
    *refused, outline = answers
    assert [a["ok"] for a in refused] == [False] * len(refused) and outline["ok"]
    for message in [a["error"]["message"] for a in refused] + [outline["result"]["outline"]]:
        assert ("characters)" in message or "more" in message) and len(message) < 600, message
        assert "\x1b" not in message
    assert "and 4,995 more" in refused[6]["error"]["message"]


def test_typed_errors_travel_as_data(in_process: InProcessServer) -> None:
    """A handler's typed error becomes that error's code and message; the connection stays open."""
    with _connect(in_process.socket) as s, s.makefile("rb") as answers:
        s.sendall(b'{"id": 1, "op": "get", "params": {"reference": "vault/Nowhere"}}\n')
        s.sendall(b'{"id": 2, "op": "write", "agent": "a1", "params": {"slug": "../up", "content": "x"}}\n')
        s.sendall(b'{"id": 3, "op": "health"}\n')
        missing, refused, health = (json.loads(answers.readline()) for _ in range(3))
    assert missing["error"]["code"] == "not_found" and "vault/Nowhere" in missing["error"]["message"]
    assert refused["id"] == 2 and refused["error"]["code"] == "bad_memory_write"
    assert health["ok"] is True and health["result"]["index"]["files"] == 4


class PanicException(BaseException):
    """What pyo3 raises when a native library panics (Tantivy on a damaged segment)."""


@pytest.mark.parametrize("failure", [RuntimeError("a bug"), PanicException("a bug")])
def test_an_unexpected_failure_is_an_internal_error_not_a_dropped_connection(
    in_process: InProcessServer, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    """A bug in a handler, or a native library's panic (not an Exception), is answered `internal`
    (the traceback goes to the log) and the next request on the same connection is served."""

    def broken() -> dict[str, Any]:
        raise failure

    monkeypatch.setattr(in_process.handlers.manifest, "counts", broken)
    answers = exchange(
        in_process.socket,
        b'{"id": 1, "op": "health"}\n{"id": 2, "op": "search", "params": {"query": "bread"}}\n',
    )
    assert answers[0]["id"] == 1 and answers[0]["error"]["code"] == "internal"
    assert "health" in answers[0]["error"]["message"] and "a bug" not in answers[0]["error"]["message"]
    assert _refs(answers[1])[0] == "vault/Recipes/Bread"


def test_oversized_and_half_frames(serve_in_process: Any) -> None:
    """A frame over the limit is refused and its connection closed; a half frame and a hang-up
    are no error; the server answers the next client."""
    server: InProcessServer = serve_in_process(**{"server.maxFrameBytes": 4096})
    big = b'{"op": "search", "params": {"query": "' + b"a" * 10_000 + b'"}}\n'
    answers = exchange(server.socket, big)
    assert [a["error"]["code"] for a in answers] == ["frame_too_large"]
    assert "memory.maxNoteBytes" in answers[0]["error"]["message"]  # a note's own, smaller limit
    assert exchange(server.socket, b'{"op": "hea') == []
    assert server.call("health")["index"]["files"] == 4


def test_concurrent_clients_each_get_their_own_answers(in_process: InProcessServer) -> None:
    """Eight readers pipelining searches and two agents writing memory at the same time: every
    answer carries its own request's id and result, and every write is searchable after."""
    errors: list[str] = []
    queries = {"tomatoes": "vault/Garden", "sourdough": "vault/Recipes/Bread", "restic": "wiki/Backups"}

    def reader(k: int) -> None:
        batch = [
            json.dumps({"id": f"{k}-{i}", "op": "search", "params": {"query": q}}).encode()
            for i, q in enumerate(list(queries) * 5)
        ]
        answers = exchange(in_process.socket, b"\n".join(batch) + b"\n")
        want = [(f"{k}-{i}", queries[q]) for i, q in enumerate(list(queries) * 5)]
        got = [(a["id"], _refs(a)[0] if a["ok"] else a["error"]) for a in answers]
        if got != want:
            errors.append(f"reader {k}: {got}")

    def writer(agent: str) -> None:
        with in_process.client(agent) as c:
            for i in range(5):
                c.call("write", {"slug": f"w{i}", "content": f"# W {i}\n\nzq{agent}{i}x\n"})

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
    threads += [threading.Thread(target=writer, args=(agent,)) for agent in ("ann", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    for agent in ("ann", "bob"):
        for i in range(5):
            hits = in_process.call("search", {"query": f"zq{agent}{i}x", "source": "memory"}, agent=agent)
            assert [h["reference"] for h in hits["hits"]][:1] == [f"memory/w{i}"]


def test_connection_cap_closes_the_longest_idle_and_unfinished_input_is_bounded(
    serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """At the cap the longest-idle connection is closed with a `busy` frame to make room;
    unfinished frames beyond the total budget are refused with `busy`; searches keep working."""
    caplog.set_level(logging.INFO, logger="sidecar.daemon.server")
    server: InProcessServer = serve_in_process(
        model=KEYWORD_ONLY, **{"server.maxConnections": 20, "server.maxBufferedBytes": 1 << 20}
    )
    idle = []
    for _ in range(25):
        idle.append(_connect(server.socket))
        # The server must have taken this one before the next arrives, so "the longest idle" is
        # the earliest: a request on a fresh connection is answered only after that.
        assert server.call("health")["socket"]
    try:
        assert server.call("search", {"query": "tomatoes"})["hits"][0]["reference"] == "vault/Garden"
        # 25 idle ones and one at a time for the health calls, against a cap of 20: at least the
        # first six were closed to make room (more if a finished call was not yet counted out).
        assert all(b'"busy"' in _recv_all(s, 5) for s in idle[:6])
        idle[-1].setblocking(False)
        with pytest.raises(BlockingIOError):  # still open, nothing sent to it
            idle[-1].recv(1)
    finally:
        for s in idle:
            s.close()
    partial = []
    try:
        for _ in range(3):  # 3 x 400 KB without a newline against a 1 MiB budget
            s = _connect(server.socket)
            s.sendall(b'{"op": "search", "params": {"query": "' + b"x" * 400_000)
            partial.append(s)
        assert b'"busy"' in _recv_all(partial[2], 5)
        assert server.call("search", {"query": "sourdough"})["hits"][0]["reference"] == "vault/Recipes/Bread"
    finally:
        for s in partial:
            s.close()
    assert "connection_refused reason=unfinished input" in caplog.text
    # Six or more evictions within the minute: one line (a reconnect loop wrote a line each).
    evicted = [
        r for r in caplog.records if r.getMessage().startswith("connection_closed reason=connection limit")
    ]
    assert len(evicted) == 1 and evicted[0].getMessage().endswith("times=1")


def test_a_flood_of_one_log_line_is_one_line_a_minute_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from sidecar.daemon.server import Throttled

    now = [0.0]
    line = Throttled(logging.INFO, "connection_closed reason=test", every=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="sidecar.daemon.server"):
        for _ in range(500):
            line()
            now[0] += 0.01
        line.flush()  # the server asks now and then: within the minute, nothing yet
        now[0] += 60
        line.flush()  # the flood ended: its count is told without a new line to carry it
        line.flush()
        now[0] += 60
        line()
    assert [r.getMessage() for r in caplog.records] == [
        "connection_closed reason=test times=1",
        "connection_closed reason=test times=499",
        "connection_closed reason=test times=1",
    ]


def test_a_request_that_hangs_is_answered_timeout_and_the_server_goes_on(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that never finishes is answered `timeout` after the bound; with its only worker
    stuck, a fresh pool serves the next request."""
    server: InProcessServer = serve_in_process(**{"server.workers": 1, "server.requestTimeoutSeconds": 1})
    release = threading.Event()
    counts = server.handlers.manifest.counts

    def stuck() -> dict[str, Any]:
        release.wait(30)
        return counts()

    monkeypatch.setattr(server.handlers.manifest, "counts", stuck)
    try:
        t0 = time.monotonic()
        first = exchange(server.socket, b'{"id": 1, "op": "health"}\n')
        assert first[0]["error"]["code"] == "timeout" and time.monotonic() - t0 < 5
        monkeypatch.setattr(server.handlers.manifest, "counts", counts)
        second = exchange(server.socket, b'{"id": 2, "op": "search", "params": {"query": "restic"}}\n')
        assert second[0]["id"] == 2 and _refs(second[0])[0] == "wiki/Backups"
    finally:
        release.set()


def test_a_timeout_answer_says_the_request_timeout_as_set(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """server.requestTimeoutSeconds 1.5 is said as 1.5 s in the `timeout` answer (it said 2 s)."""
    server: InProcessServer = serve_in_process(**{"server.workers": 1, "server.requestTimeoutSeconds": 1.5})
    release = threading.Event()
    counts = server.handlers.manifest.counts

    def stuck() -> dict[str, Any]:
        release.wait(30)
        return counts()

    monkeypatch.setattr(server.handlers.manifest, "counts", stuck)
    try:
        answer = exchange(server.socket, b'{"id": 1, "op": "health"}\n')
        assert answer[0]["error"]["code"] == "timeout"
        assert "within 1.5 s (server.requestTimeoutSeconds)" in answer[0]["error"]["message"]
    finally:
        release.set()


def test_health_answers_while_searches_hold_every_read_worker(serve_in_process: Any) -> None:
    """health ran on the read lane: with its workers held by searches (held up to 15 s each while
    a read-only daemon switches to writable), `sidecar status` and the MCP memory_status gave up
    after 10 s. It has a lane of its own."""
    server: InProcessServer = serve_in_process(**{"server.workers": 1})
    entered, release = threading.Event(), threading.Event()
    real = server.server.dispatch

    def dispatch(req: Any) -> dict[str, Any]:
        if req.op == "search":
            entered.set()
            release.wait(60)  # past the 30 s the health exchange waits
        return real(req)

    server.server.dispatch = dispatch
    held = _connect(server.socket)
    try:
        held.sendall(b'{"id": 1, "op": "search", "params": {"query": "restic"}}\n')
        assert entered.wait(10)
        answer = exchange(server.socket, b'{"id": 2, "op": "health"}\n')
        assert answer[0]["id"] == 2 and "result" in answer[0]
    finally:
        release.set()
        held.close()


def test_a_hung_request_whose_client_hung_up_still_counts_as_stuck(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that hangs in its worker and whose client gives up first (every client's limit
    is below the server's bound) is still timed: its worker counts as stuck, the pool is replaced
    and the next search is answered."""
    server: InProcessServer = serve_in_process(**{"server.workers": 1, "server.requestTimeoutSeconds": 1})
    release, started = threading.Event(), threading.Event()
    real_call = server.server.call

    def call(req: Any) -> bytes:
        if req.op == "search" and req.params["query"] == "hang":  # a native call that hangs
            started.set()
            release.wait(60)
        return real_call(req)

    monkeypatch.setattr(server.server, "call", call)
    lane = server.server.lanes["read"]
    old_pool = lane.pool
    try:
        with _connect(server.socket) as gone:
            gone.sendall(b'{"id": 1, "op": "search", "params": {"query": "hang"}}\n')
            assert started.wait(10)
        deadline = time.monotonic() + 20
        while lane.pool is old_pool and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lane.pool is not old_pool  # the stuck worker was counted and its pool replaced
        answer = exchange(server.socket, b'{"id": 2, "op": "search", "params": {"query": "restic"}}\n')
        assert answer[0]["id"] == 2 and _refs(answer[0])[0] == "wiki/Backups"
    finally:
        release.set()


def test_health_answers_while_inbox_counts_hang(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """health with an agent counts that agent's inbox: two such calls on inboxes that hang (an
    unmounted share) took both health threads, and `sidecar status` gave up after 10 s while
    searches were answered. A count is waited for a bounded time (the inbox is then null, or the
    last count marked ``stale``); while an inbox's count hangs no other count of it is started
    and health with that agent answers at once; other agents' inboxes are still counted."""
    from sidecar.memory import ops

    monkeypatch.setattr(ops, "USAGE_WAIT_S", 0.5, raising=False)
    server: InProcessServer = serve_in_process()
    release, counted = threading.Event(), []
    inboxes = server.handlers.memory.inboxes
    real = inboxes.usage

    def usage(agent: str) -> dict[str, int]:
        counted.append(agent)
        if agent.startswith("hung"):
            release.wait(60)  # past the 10 s a status waits
        return real(agent)

    monkeypatch.setattr(inboxes, "usage", usage)
    assert server.call("health", agent="ops")["inbox"]["notes"] == 0  # counted: kept as the last
    held = [_connect(server.socket) for _ in range(2)]
    try:
        for i, s in enumerate(held):
            s.sendall(b'{"id": %d, "op": "health", "agent": "hung%d"}\n' % (i, i))
        plain = _connect(server.socket)  # 10 s, as `sidecar status`
        plain.sendall(b'{"id": 9, "op": "health"}\n')
        answer = json.loads(plain.makefile("rb").readline())
        assert answer["id"] == 9 and "inbox" not in answer["result"]
        for s in held:
            agent_health = json.loads(s.makefile("rb").readline())
            assert agent_health["result"]["inbox"] is None
        monkeypatch.setattr(inboxes, "usage", lambda agent: counted.append(agent) or real(agent))
        fresh = server.call("health", agent="ops")["inbox"]  # another agent's inbox: counted anew
        assert fresh["notes"] == 0 and "stale" not in fresh
        assert server.call("health", agent="hung0")["inbox"] is None  # at once: its count hangs
        assert sorted(counted) == ["hung0", "hung1", "ops", "ops"]
    finally:
        release.set()
        for s in held:
            s.close()
    plain.close()


def test_index_op_sweeps_new_notes(in_process: InProcessServer, vault: Path) -> None:
    """The in-process server's index op sweeps at once: a note written before it is found after."""
    write(vault / "Kayak.md", "# Kayak\n\nThe kayak paddle is in the shed.\n")
    assert in_process.call("index")["queued"] is True
    assert in_process.sweeps == [(False, None, frozenset())]
    assert in_process.call("search", {"query": "kayak paddle"})["hits"][0]["reference"] == "vault/Kayak"


def test_preview_analysis_carries_the_querys_language(in_process: InProcessServer) -> None:
    """docs/protocol.md: `preview` returns `analysis` with the language (`de`, `en` or null), and
    the typed reply the CLI and the shim parse keeps it."""
    from sidecar.contracts import wire_json

    english = in_process.call("search", {"query": "how do the tomatoes get their water", "preview": True})
    german = in_process.call("search", {"query": "wie bekommen die Tomaten ihr Wasser", "preview": True})
    neither = in_process.call("search", {"query": "tomatoes", "preview": True})
    assert english["analysis"]["language"] == "en"
    assert german["analysis"]["language"] == "de"
    assert "language" in neither["analysis"] and neither["analysis"]["language"] is None
    parsed = wire_json.parse_search(german).analysis
    assert parsed is not None and parsed.language == "de"
    again = wire_json.search_json(wire_json.parse_search(german), preview=True)
    assert again["analysis"] == german["analysis"]


def test_inline_filters_combine_with_the_parameters_as_documented(in_process: InProcessServer) -> None:
    """docs/protocol.md: inline `tag:` and `source:` may repeat and add up, `path:`/`since:`/`until:`
    once; an inline filter replaces its parameter (tags add to it); and a window the two leave
    empty between them is a `bad_request`, not a silent empty result."""
    from sidecar.clients.client import RemoteError

    def refs(params: dict[str, Any]) -> list[str]:
        return [h["reference"] for h in in_process.call("search", {"minScore": 0, **params})["hits"]]

    tags = in_process.call("search", {"query": "water tag:garden tag:x", "tag": "y", "preview": True})
    assert tags["analysis"]["filters"]["tags"] == ["y", "garden", "x"]
    assert refs({"query": "water source:wiki source:vault"}) != []
    assert refs({"query": "restic source:wiki", "source": "vault"}) == ["wiki/Backups"]
    assert refs({"query": "water path:Recipes", "pathPrefix": "Projects"}) == ["vault/Recipes/Bread"]
    for query, params in [
        ("water path:a path:b", {}),
        ("water since:2026-01-01 since:2026-02-01", {}),
        ("water until:2026-01-01", {"since": "2026-06-01"}),
    ]:
        with pytest.raises(RemoteError) as err:
            in_process.call("search", {"query": query, **params})
        assert err.value.code == "bad_request", query
    assert "since 2026-06-01 is after until 2026-01-01" in str(err.value)


def test_why_calls_a_hit_what_search_returns_and_names_chunks_below_min_score(
    in_process: InProcessServer,
) -> None:
    """`why` says `hit #N` for exactly the hits `search` returns, at their place; a chunk `search`
    drops for its relevance is `below minScore (0.1)`, not a hit."""
    outcomes: dict[str, list[str]] = {}
    for query in ("sourdough flour", "tomatoes water sun", "water"):
        hits = [(h["reference"], h["lines"]) for h in in_process.call("search", {"query": query})["hits"]]
        for ref in ("vault/Garden", "vault/Recipes/Bread", "wiki/Backups", "vault/Projects/Boat"):
            for c in in_process.call("why", {"reference": ref, "query": query})["chunks"]:
                outcomes.setdefault(query, []).append(c["outcome"])
                if c["outcome"].startswith("hit #"):
                    assert hits[int(c["outcome"][5:]) - 1] == (ref, c["lines"]), (query, ref)
                elif c["outcome"] == "below minScore (0.1)":
                    assert c["relevance"] < 0.1 and (ref, c["lines"]) not in hits
    assert "below minScore (0.1)" in outcomes["sourdough flour"]
    assert sum(o.startswith("hit #") for o in outcomes["sourdough flour"]) == 1


def test_a_line_of_exactly_max_frame_bytes_is_accepted(serve_in_process: Any) -> None:
    """docs/protocol.md: `frame_too_large` is for a line *longer* than `server.maxFrameBytes`; the
    newline is not counted. A line of exactly the limit is answered (also when its newline comes
    in a later read), one byte more is refused."""
    limit = 4096
    server: InProcessServer = serve_in_process(**{"server.maxFrameBytes": limit})

    def line(size: int) -> bytes:
        frame = b'{"op": "search", "params": {"query": "bread"}}'
        return frame + b" " * (size - len(frame))  # JSON allows the blanks

    assert len(line(limit)) == limit
    (answer,) = exchange(server.socket, line(limit) + b"\n")
    assert answer["ok"] is True, answer
    with _connect(server.socket) as s, s.makefile("rb") as answers:
        s.sendall(line(limit))
        time.sleep(0.2)  # the server has read the whole line but not its end yet
        s.sendall(b"\n")
        assert json.loads(answers.readline())["ok"] is True
    (refused,) = exchange(server.socket, line(limit + 1) + b"\n")
    assert refused["error"]["code"] == "frame_too_large"


@pytest.mark.parametrize("version", [b"true", b"1.0", b'"1"', b"null", b"2"])
def test_protocol_version_must_be_the_integer_1(in_process: InProcessServer, version: bytes) -> None:
    """docs/protocol.md: `v` is an integer, 1 when present: `true` and `1.0` (equal to 1 in Python)
    are refused like any other wrong version; 1 and no `v` at all are served."""
    answers = exchange(
        in_process.socket,
        b'{"id": 1, "v": ' + version + b', "op": "health"}\n{"id": 2, "v": 1, "op": "health"}\n'
        b'{"id": 3, "op": "health"}\n',
    )
    assert answers[0]["error"]["code"] == "bad_request"
    assert "unsupported protocol version" in answers[0]["error"]["message"]
    assert [a["ok"] for a in answers[1:]] == [True, True]


def test_recall_gives_an_empty_context_when_no_note_fits_the_budget(
    serve_in_process: Any, vault: Path
) -> None:
    """docs/protocol.md: `context` is empty when nothing qualifies and fits the token budget: a
    budget that holds the frame but no note gives "", not a header announcing recalled notes."""
    body = " ".join(["Sourdough starter feeding schedule with rye flour and warm water."] * 20)
    write(vault / "Recipes/Starter.md", f"# Starter\n\n{body}\n")
    server: InProcessServer = serve_in_process()
    params = {"message": "sourdough starter feeding rye flour", "minScore": 0, "limit": 1}
    roomy = server.call("recall", {**params, "tokenBudget": 1500})
    assert roomy["hits"] and "vault/Recipes/Starter" in roomy["context"]
    tight = server.call("recall", {**params, "tokenBudget": 100})
    assert tight["hits"] and tight["context"] == ""


def test_list_without_an_agent_is_a_bad_request_not_a_bad_write(in_process: InProcessServer) -> None:
    """`list` reads: without an agent it is `bad_request` (as a bad agent name is for every op), not
    `bad_memory_write`; a write without one stays `bad_memory_write` (docs/protocol.md)."""
    from sidecar.clients.client import RemoteError

    with pytest.raises(RemoteError) as listed:
        in_process.call("list")
    assert listed.value.code == "bad_request" and "agent" in str(listed.value)
    with pytest.raises(RemoteError) as wrote:
        in_process.call("write", {"slug": "x", "content": "y"})
    assert wrote.value.code == "bad_memory_write"
    assert in_process.call("list", agent="a1")["notes"] == []


def test_confirm_deletions_of_an_unknown_root_lists_the_memory_roots_too(in_process: InProcessServer) -> None:
    """`index` `confirmDeletions` names a root `vault`, `wiki` or `memory/<agent>` (docs/protocol.md):
    an unknown one is refused listing them all, the agents' inboxes included, and an inbox is
    accepted."""
    from sidecar.clients.client import RemoteError

    in_process.call("write", {"slug": "kayak", "content": "The paddle is in the loft."}, agent="a1")
    with pytest.raises(RemoteError) as err:
        in_process.call("index", {"confirmDeletions": "bogus"})
    assert err.value.code == "bad_request"
    assert "roots: memory/a1, vault, wiki" in str(err.value)
    assert in_process.call("index", {"confirmDeletions": "memory/a1"})["queued"] is True


@pytest.mark.parametrize("op", ["health", "reload"])
def test_an_op_without_parameters_says_so_for_an_unknown_one(in_process: InProcessServer, op: str) -> None:
    """`health` and `reload` take no parameters: an unknown one says that, not "allowed: " and
    an empty list."""
    from sidecar.clients.client import RemoteError

    with pytest.raises(RemoteError) as err:
        in_process.call(op, {"verbose": True})
    assert err.value.code == "bad_request"
    assert str(err.value) == "unknown parameter(s) 'verbose'; this op takes no parameters"


def test_outline_counts_read_in_the_singular_for_one(in_process: InProcessServer) -> None:
    """The outline's head says "1 page, 1 folder", not "1 pages, 1 folders"."""
    wiki = in_process.call("outline")
    assert wiki["pages"] == 1 and wiki["folders"] == 0
    assert wiki["outline"].startswith("Outline of the wiki (1 page, 0 folders);"), wiki["outline"]
    vault = in_process.call("outline", {"source": "vault", "pathPrefix": "Projects"})
    assert vault["pages"] == 1 and vault["folders"] == 1
    assert vault["outline"].startswith("Outline of the vault (1 page, 1 folder);"), vault["outline"]


def test_a_request_whose_client_hung_up_is_dropped_before_a_worker_starts_it(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Searches queued behind a busy worker whose clients close are never run, and their
    connections stop counting; a client that only half-closes still gets its answer."""
    server: InProcessServer = serve_in_process(model=KEYWORD_ONLY, **{"server.workers": 1})
    release, started, searched = _held_worker(server, monkeypatch)
    arrived: list[str] = []  # requests the loop has read, whether or not a worker runs them
    import sidecar.daemon.server as server_mod

    parse = server_mod.parse_request

    def parse_request(line: bytes) -> Any:
        req = parse(line)
        arrived.append(req.op)
        return req

    monkeypatch.setattr(server_mod, "parse_request", parse_request)
    busy = _connect(server.socket)
    try:
        busy.sendall(b'{"id": 0, "op": "search", "params": {"query": "hold"}}\n')
        assert started.wait(10)  # the only worker is held
        for i in range(5):  # each sends a search and hangs up at once
            with _connect(server.socket) as s:
                s.sendall(b'{"id": %d, "op": "search", "params": {"query": "gone %d"}}\n' % (i, i))
        half = _connect(server.socket)
        half.sendall(b'{"id": 9, "op": "search", "params": {"query": "sourdough"}}\n')
        half.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 10
        while (len(arrived) < 7 or server.server.connections > 2) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(arrived) == 7
        assert server.server.connections == 2  # the busy one and the half-closed one
    finally:
        release.set()
    with busy, busy.makefile("rb") as lines:
        assert json.loads(lines.readline())["id"] == 0
    answer = json.loads(_recv_all(half))
    half.close()
    assert answer["id"] == 9 and _refs(answer)[0] == "vault/Recipes/Bread"
    assert searched == ["sourdough"]


def _held_worker(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, list[str]]:
    """The only read worker held by a search for ``hold`` until ``release``; other searches' queries
    are recorded as a worker runs them."""
    release, started = threading.Event(), threading.Event()
    searched: list[str] = []
    real_call = server.server.call

    def call(req: Any) -> bytes:
        if req.op == "search" and req.params["query"] == "hold":
            started.set()
            release.wait(30)
        elif req.op == "search":
            searched.append(req.params["query"])
        return real_call(req)

    monkeypatch.setattr(server.server, "call", call)
    return release, started, searched


def _until(check: Any, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(check())


def test_a_half_closed_client_that_then_closes_has_its_queued_read_dropped(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that half-closes (``nc -N``) and then closes on its own timeout while its search
    waits for a worker: the search still ran, for nobody (only a close without the half-close was
    seen). The close is watched for after the half-close too."""
    server: InProcessServer = serve_in_process(model=KEYWORD_ONLY, **{"server.workers": 1})
    release, started, searched = _held_worker(server, monkeypatch)
    busy = _connect(server.socket)
    try:
        busy.sendall(b'{"id": 0, "op": "search", "params": {"query": "hold"}}\n')
        assert started.wait(10)
        half = _connect(server.socket)
        half.sendall(b'{"id": 1, "op": "search", "params": {"query": "gone"}}\n')
        half.shutdown(socket.SHUT_WR)
        assert _until(lambda: server.server.buffered == 0 and server.server.connections == 2)
        half.close()
        assert _until(lambda: server.server.connections == 1)  # its request was given up
    finally:
        release.set()
    with busy, busy.makefile("rb") as lines:
        assert json.loads(lines.readline())["id"] == 0
    after = exchange(server.socket, b'{"id": 2, "op": "search", "params": {"query": "sourdough"}}\n')
    assert after[0]["id"] == 2 and searched == ["sourdough"]


def test_a_read_whose_client_hung_up_stays_foreground_while_its_worker_runs(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running search whose client hung up let go of its foreground claim at once, while its
    worker still computed: background work stopped yielding the cores to it. The claim is held
    until the worker ends."""
    server: InProcessServer = serve_in_process(model=KEYWORD_ONLY, **{"server.workers": 1})
    release, started, _searched = _held_worker(server, monkeypatch)
    foreground = server.server.foreground
    before = foreground.active
    try:
        with _connect(server.socket) as gone:
            gone.sendall(b'{"id": 0, "op": "search", "params": {"query": "hold"}}\n')
            assert started.wait(10)
        assert _until(lambda: server.server.connections == 0)  # the hang-up was seen
        assert foreground.active == before + 1
    finally:
        release.set()
    assert _until(lambda: foreground.active == before)
