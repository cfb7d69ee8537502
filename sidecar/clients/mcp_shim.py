"""`sidecar mcp --agent NAME`: an MCP stdio server whose tools each forward one protocol op.

A thin client that speaks MCP's JSON-RPC over stdio itself (the initialize handshake, tools,
resources, prompts): importing an MCP SDK costs seconds of pydantic models per agent start, and
the server side of the protocol is a few messages. It imports the socket client, never a model or
an index; stdout belongs to the protocol (logs go to stderr). Every tool call opens a fresh
connection, so the shim keeps working across daemon restarts; when the daemon is down the tools
answer with an error that says how to start it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import select
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import unquote

from sidecar import __version__
from sidecar.clients.mcp_calls import ToolCalls, ToolError
from sidecar.clients.mcp_schemas import out_of_bounds
from sidecar.clients.mcp_tools import INSTRUCTIONS, TOOLS
from sidecar.contracts.printable import escape_terminal, quoted, quoted_names
from sidecar.contracts.protocol import MAX_QUERY_CHARS

# Each tool's argument names (its input schema's properties), for the unknown-argument check.
INPUTS: dict[str, tuple[str, ...]] = {t["name"]: tuple(t["inputSchema"]["properties"]) for t in TOOLS}
SCHEMAS: dict[str, dict[str, Any]] = {t["name"]: t["inputSchema"] for t in TOOLS}

log = logging.getLogger(__name__)

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
NOTE_URI = "sidecar://note/"
CALL_WORKERS = 8  # tool calls one shim runs at once (more wait their turn, in order)
OUTLINE_URI = "sidecar://outline/wiki"

PROMPTS = [
    {
        "name": "recall",
        "title": "Recall what the notes say",
        "description": "Ask the model to search the user's notes and its memory before answering.",
        # Optional, as the prompt reads it: without a topic it recalls about "this conversation".
        "arguments": [
            {"name": "topic", "description": "What to recall (default: this conversation)", "required": False}
        ],
    }
]


RESOURCES = [
    {
        "uri": OUTLINE_URI,
        "name": "wiki-outline",
        "title": "Wiki outline",
        "description": "The wiki's folders, pages and one-line descriptions.",
        "mimeType": "text/markdown",
    }
]
RESOURCE_TEMPLATES = [
    {
        "uriTemplate": NOTE_URI + "{+reference}",
        "name": "note",
        "title": "A note by reference",
        "description": "A note of the vault, the wiki or your memory, e.g. "
        f"{NOTE_URI}wiki/Backups or {NOTE_URI}memory/nas-backup-setup.",
        "mimeType": "text/markdown",
    }
]


# A request refused as the daemon stops (``stopping_message``), or cut short by its closed index
# (``cut_short_message``), as the shim renders it: the op quoted there is the daemon's own.
_STOPPING = re.compile(r"^(busy: the daemon is stopping: )'[^']*'( was not run| was cut short)")


class Shim:
    """One agent's MCP server over a pair of byte streams: the JSON-RPC loop and the handshake."""

    def __init__(self, socket_path: Path, agent: str, out: BinaryIO, calls: ToolCalls | None = None) -> None:
        self.calls = calls or ToolCalls(socket_path, agent)
        self.out = out
        self._write_lock = threading.Lock()
        self.closed = threading.Event()  # the host closed stdout: nothing can be answered any more
        # Tool calls run on a few threads of their own, in the order they came: a host sending
        # 1,500 at once held as many daemon connections, and every other agent's search waited a
        # minute behind them.
        self._calls: queue.Queue[_Call] = queue.Queue()
        self._workers: list[threading.Thread] = []
        # The calls queued or running, by id: what a notifications/cancelled can still reach.
        self._pending: dict[tuple[str, str | int], list[_Call]] = {}
        self._pending_lock = threading.Lock()

    def send(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        try:
            data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate echoed back (an id, a method name): escaped
            data = json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"
        with self._write_lock:
            if self.closed.is_set():
                return
            try:
                self.out.write(data)
                self.out.flush()
            except BrokenPipeError:
                self._stdout_closed()

    def _stdout_closed(self) -> None:
        """Say once that the host closed stdout (a traceback per pending answer said it before)."""
        if not self.closed.is_set():
            self.closed.set()
            log.warning("mcp_stdout_closed the host closed the shim's stdout; no more calls are run, exiting")

    def stdout_gone(self) -> bool:
        """Whether the host closed stdout, known before anything is written: a pipe with no reader
        polls as an error. A call read after that is not run (a write would be made unanswered)."""
        if self.closed.is_set():
            return True
        try:
            fd = self.out.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (tests write to memory)
            return False
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0)):
            self._stdout_closed()
        return self.closed.is_set()

    def handle(self, message: Any) -> None:
        """Answer one message (or a batch of them, as JSON-RPC and MCP 2025-03-26 allow)."""
        if isinstance(message, list) and message:
            answers = [a for a in map(self.answer, message) if a is not None]
            if answers:
                self.send(answers)
            return
        answer = self.answer(message)
        if answer is not None:
            self.send(answer)

    def answer(self, message: Any) -> dict[str, Any] | None:
        """The response to one message; None for a notification or a response."""
        is_dict = isinstance(message, dict)
        method, rid = (message.get("method"), message.get("id")) if is_dict else (None, None)
        usable = isinstance(rid, str | int) and not isinstance(rid, bool)  # MCP: never null
        if not is_dict or message.get("jsonrpc") != "2.0":  # answered with its id when it has one
            return _error(rid if usable else None, -32600, "invalid request: not a JSON-RPC 2.0 message")
        if "id" not in message or method is None:
            if method == "notifications/cancelled":
                self._cancel(message.get("params"))
            return None  # a notification (initialized, cancelled) or a response: nothing to answer
        if not usable:
            return _error(None, -32600, "invalid request: 'id' must be a string or an integer")
        params = message.get("params") or {}
        try:
            if not isinstance(params, dict):
                raise RpcError(-32602, "'params' must be an object")
            result = self.dispatch(str(method), params)
        except RpcError as exc:
            return _error(rid, exc.code, str(exc))
        except Exception as exc:  # a bug here must not kill the agent's session
            log.exception("mcp_request_failed method=%s", method)
            return _error(rid, -32603, f"internal error: {exc}")
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        static: dict[str, dict[str, Any]] = {
            "ping": {},
            "logging/setLevel": {},
            "tools/list": {"tools": TOOLS},
            "resources/list": {"resources": RESOURCES},
            "resources/templates/list": {"resourceTemplates": RESOURCE_TEMPLATES},
            "prompts/list": {"prompts": PROMPTS},
            "completion/complete": {"completion": {"values": [], "hasMore": False}},
        }
        if method in static:
            return static[method]
        calls: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "initialize": self.initialize,
            "tools/call": self.call_tool,
            "resources/read": lambda p: self.read_resource(str(p.get("uri", ""))),
            "prompts/get": self.get_prompt,
        }
        if method not in calls:
            raise RpcError(-32601, f"method not found: {quoted(method)}")
        return calls[method](params)

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {
                "tools": {"listChanged": False},
                "resources": {"subscribe": False, "listChanged": False},
                "prompts": {"listChanged": False},
            },
            "serverInfo": {"name": "sidecar", "title": "sidecar memory", "version": __version__},
            "instructions": INSTRUCTIONS,
        }

    def call_tool(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        args = params.get("arguments") or {}
        if name is None:
            raise RpcError(-32602, "'name' is required: the tool to call")
        tool = self.calls.tools.get(str(name))
        if tool is None:
            raise RpcError(-32602, f"unknown tool {quoted(name)}")
        if not isinstance(args, dict):
            raise RpcError(-32602, "'arguments' must be an object")
        known = INPUTS[str(name)]
        unknown = sorted(str(k) for k in args if k not in known)
        try:
            if unknown:
                raise ToolError(
                    f"unknown argument{'s' if len(unknown) > 1 else ''} {quoted_names(unknown)} for "
                    f"{name}; it takes {', '.join(known) or 'no arguments'}"
                )
            # the schema's ranges and lengths are the tool's, checked here (see out_of_bounds)
            if (wrong := out_of_bounds(SCHEMAS[str(name)], args)) is not None:
                raise ToolError(f"{wrong} (see the {name} input schema)")
            try:
                text, structured = tool(args)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # An answer of another shape (a foreign program on the socket, a daemon of another
                # version) read as "0 hits" or an internal error: said as what it is.
                log.exception("mcp_answer_unreadable tool=%s", name)
                raise ToolError(
                    f"the sidecar daemon sent an answer this shim cannot read ({type(exc).__name__}: "
                    f"{exc}); is another program listening on {self.calls.socket_path}, or does the "
                    "daemon run another sidecar version (`sidecar status`)?",
                    "not answering",
                ) from exc
        except ToolError as exc:
            # The daemon names its own op ('write'); the agent called a tool (memory_write).
            said = _STOPPING.sub(rf"\g<1>{name}\g<2>", str(exc), count=1)
            error = {"content": [{"type": "text", "text": escape_terminal(said)}], "isError": True}
            return error if exc.structured is None else {**error, "structuredContent": exc.structured}
        # Hosts print tool text in a terminal: a note's ESC sequences (a web clipping's title
        # change, OSC 52 clipboard writes) are shown as escapes there; structuredContent stays exact.
        return {
            "content": [{"type": "text", "text": escape_terminal(text)}],
            "structuredContent": structured,
            "isError": False,
        }

    def read_resource(self, uri: str) -> dict[str, Any]:
        try:
            if uri == OUTLINE_URI:
                text = self.calls.call("outline", {})["outline"]
            elif uri.startswith(NOTE_URI) and len(uri) > len(NOTE_URI):
                text = self.note_text(uri[len(NOTE_URI) :])
            else:
                raise RpcError(-32602, f"unknown resource {quoted(uri)}; use {NOTE_URI}<reference>")
        except ToolError as exc:
            raise RpcError(-32002, str(exc)) from exc
        return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": escape_terminal(text)}]}

    def note_text(self, reference: str) -> str:
        """A note by the reference of a resource URI. Clients expanding the template {+reference}
        percent-encode spaces and non-ASCII letters; others send the name as it is, which may hold
        a '%' of its own: the decoded form first, then the raw one."""
        try:
            decoded = unquote(reference, errors="strict") if "%" in reference else reference
        except UnicodeDecodeError:  # "100%DE": a '%' of the name itself
            decoded = reference
        try:
            return str(self.calls.call("get", {"reference": decoded})["text"])
        except ToolError as first:
            if decoded == reference:
                raise
            try:
                return str(self.calls.call("get", {"reference": reference})["text"])
            except ToolError:
                raise first from None  # why the name as the client meant it was refused

    def get_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("name") != "recall":
            raise RpcError(-32602, f"unknown prompt {quoted(params.get('name'))}")
        args = params.get("arguments") or {}
        if not isinstance(args, dict):
            raise RpcError(-32602, "'arguments' must be an object")
        if unknown := sorted(str(k) for k in args if k != "topic"):  # refused as the tools refuse them
            raise RpcError(-32602, f"unknown argument {quoted_names(unknown)} for recall; it takes topic")
        topic = args.get("topic")
        if topic is not None and not isinstance(topic, str):
            raise RpcError(-32602, "'topic' must be a string")
        if topic is not None and len(topic) > MAX_QUERY_CHARS:  # a query, echoed into the prompt
            raise RpcError(-32602, f"'topic' is longer than {MAX_QUERY_CHARS} characters")
        topic = (topic or "").strip() or "this conversation"
        text = (
            f"Before answering, recall what the user's notes and your memory say about {topic}: call "
            "memory_search (and memory_get for the notes that matter), say which notes you used by their "
            "references, and treat them as recollection that may be outdated."
        )
        return {
            "description": "Recall from the user's notes and memory",
            "messages": [{"role": "user", "content": {"type": "text", "text": escape_terminal(text)}}],
        }

    def serve(self, stdin: BinaryIO) -> None:
        """Read one JSON-RPC message a line until stdin closes; tool calls run on threads."""
        for line in stdin:
            if self.stdout_gone():
                break
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.send(_error(None, -32700, "parse error"))
                continue
            except RecursionError:  # nested thousands deep: refused, the session goes on
                self.send(_error(None, -32700, "parse error: the message nests too deeply"))
                continue
            if isinstance(message, dict) and message.get("method") in ("tools/call", "resources/read"):
                self._submit(message)
            else:
                self.handle(message)
        if self.closed.is_set():
            return  # no answer can reach the host: the calls sent finish in the daemon anyway
        deadline = time.monotonic() + 65.0  # one wait for those still running, not 65 s each
        with self._calls.all_tasks_done:
            while self._calls.unfinished_tasks and (left := deadline - time.monotonic()) > 0:
                self._calls.all_tasks_done.wait(left)

    def _submit(self, message: dict[str, Any]) -> None:
        if len(self._workers) < CALL_WORKERS and self._calls.unfinished_tasks >= len(self._workers):
            worker = threading.Thread(target=self._work, name=f"mcp-call-{len(self._workers)}", daemon=True)
            self._workers.append(worker)
            worker.start()
        call = _Call(message)
        if call.key is not None:
            with self._pending_lock:
                self._pending.setdefault(call.key, []).append(call)
        self._calls.put(call)

    def _cancel(self, params: Any) -> None:
        """notifications/cancelled: the host will not use the answer (MCP: the receiver SHOULD
        stop and SHOULD NOT answer). A call still queued is not run; one running finishes in the
        daemon (a request sent cannot be taken back) and its answer is dropped. An id of no call
        queued or running (unknown, answered already, or `initialize`, answered at once) is
        ignored, as the spec allows; a later call reusing the id is not touched."""
        key = _id_key(params.get("requestId") if isinstance(params, dict) else None)
        with self._pending_lock:
            for call in self._pending.get(key, []) if key is not None else []:
                call.cancelled = True

    def _work(self) -> None:
        while True:
            call = self._calls.get()
            try:
                answer = None
                try:
                    if not self.closed.is_set() and not call.cancelled:
                        answer = self.answer(call.message)
                finally:
                    cancelled = self._finished(call)
                if answer is not None and not cancelled:
                    self.send(answer)
            except Exception:  # a worker lives on: the calls queued behind it must be answered
                log.exception("mcp_request_failed a tool call ended with an error")
            finally:
                self._calls.task_done()

    def _finished(self, call: _Call) -> bool:
        """Forget a call that ran (a cancel can no longer reach it); whether it was cancelled."""
        with self._pending_lock:
            if call.key is not None:
                calls = self._pending[call.key]
                calls.remove(call)
                if not calls:
                    del self._pending[call.key]
            return call.cancelled


class _Call:
    """A tool call or resource read waiting for a worker or running on one."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message
        self.key = _id_key(message.get("id"))
        self.cancelled = False


def _id_key(rid: Any) -> tuple[str, str | int] | None:
    """A request id as notifications/cancelled names it: 7 and "7" are two ids."""
    if isinstance(rid, bool) or not isinstance(rid, str | int):
        return None
    return (type(rid).__name__, rid)


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def run(
    socket_path: Path,
    agent: str,
    config_file: Path | None = None,
    serve_flags: Sequence[str] = (),
    resolve: Callable[[], Path | None] | None = None,
) -> None:
    calls = ToolCalls(socket_path, agent, config_file, serve_flags, resolve)
    shim = Shim(socket_path, agent, sys.stdout.buffer, calls)
    shim.serve(sys.stdin.buffer)
    if shim.closed.is_set():  # so the interpreter's last flush of stdout does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
