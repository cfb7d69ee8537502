"""The wire protocol: newline-delimited JSON over a Unix stream socket (see docs/protocol.md).

Leaf module shared by the server and every client. A request is one JSON object on one line:
``{"v": 1, "id": "7", "op": "search", "agent": "claude", "params": {...}}``; the answer is one line:
``{"v": 1, "id": "7", "ok": true, "result": {...}}`` or ``{"v": 1, "id": "7", "ok": false,
"error": {"code": "bad_request", "message": "..."}}``. Errors travel as data.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from sidecar.contracts.errors import ProtocolError
from sidecar.contracts.printable import quoted, quoted_names

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME = 1_048_576
# How deep a request's values may nest: parameters are flat but for a memory's front matter
# (a few levels). Deeper is a bug or an attack, and recursive code (redaction, YAML) would
# fail on it with an internal error instead of this clear one.
MAX_DEPTH = 32
# The ranges of the ops' numeric parameters (docs/protocol.md). The daemon enforces them; the CLI
# and the MCP shim check the same ranges before they ask.
LIMIT_RANGE = (1, 200)  # search and recall: hits
MIN_SCORE_RANGE = (0.0, 100.0)  # search and recall: minScore (relevance is 0-1; 0 keeps everything)
# What a person or an agent may ask for as minScore (`search --min-score`, the MCP tools): relevance
# is 0-1, so a floor above 1 drops every hit; the daemon's wider range lets a configured
# search.minScore above 1 (a floor that empties search on purpose) still answer.
RELEVANCE_RANGE = (0.0, 1.0)
RELATED_LIMIT_RANGE = (1, 100)  # related: notes
LIST_LIMIT_RANGE = (1, 1000)  # list: notes
LIST_LIMIT_DEFAULT = 200
TOKEN_BUDGET_RANGE = (100, 50_000)  # recall and outline: tokenBudget
# The lengths of the ops' text parameters, in characters; the MCP tools' schemas state the same.
MAX_QUERY_CHARS = 4000  # search, recall, why: the query or message (a recall prompt's topic too)
MAX_REFERENCE_CHARS = 8192  # a path inside a root: PATH_MAX (4096 bytes on Linux) plus the source
MAX_PATH_PREFIX_CHARS = 1000
MAX_TAG_CHARS = 200
MAX_DAY_CHARS = 20  # since / until
# A JSON escape can encode half of a UTF-16 pair ("\ud800"): Python keeps it as a lone
# surrogate, which no file, index or reply can hold.
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Request:
    op: str
    params: dict[str, Any] = field(default_factory=dict)
    id: str | int | None = None
    agent: str | None = None


def encode(obj: dict[str, Any]) -> bytes:
    """One frame: compact JSON and a newline (JSON strings never contain a raw newline)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def request_frame(req: Request) -> bytes:
    body: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": req.op, "params": req.params}
    if req.id is not None:
        body["id"] = req.id
    if req.agent is not None:
        body["agent"] = req.agent
    return encode(body)


def ok_frame(req_id: Any, result: dict[str, Any]) -> bytes:
    return encode({"v": PROTOCOL_VERSION, "id": req_id, "ok": True, "result": result})


def error_frame(req_id: Any, code: str, message: str) -> bytes:
    return encode(
        {"v": PROTOCOL_VERSION, "id": req_id, "ok": False, "error": {"code": code, "message": message}}
    )


def parse_request(line: bytes) -> Request:
    """Decode and validate one request line; raise ProtocolError with a message a person can act on."""
    try:
        data = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ProtocolError("request is not valid UTF-8") from exc
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"request is not valid JSON: {exc.msg} at position {exc.pos}") from exc
    except RecursionError as exc:
        raise ProtocolError(f"request nests deeper than {MAX_DEPTH} levels") from exc
    if not isinstance(data, dict):
        raise ProtocolError("request must be a JSON object")
    check_values(data)
    version = data.get("v", PROTOCOL_VERSION)
    if type(version) is not int or version != PROTOCOL_VERSION:  # true and 1.0 equal 1 in Python
        raise ProtocolError(
            f"unsupported protocol version {quoted(version)}; this daemon speaks {PROTOCOL_VERSION}"
        )
    req_id = data.get("id")
    if req_id is not None and (not isinstance(req_id, str | int) or isinstance(req_id, bool)):
        raise ProtocolError("'id' must be a string or an integer")
    op = data.get("op")
    if not isinstance(op, str):
        raise ProtocolError("'op' is required and must be a string")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise ProtocolError("'params' must be a JSON object")
    agent = data.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise ProtocolError("'agent' must be a string")
    return Request(op=op, params=params, id=req_id, agent=agent)


def check_values(value: Any) -> None:
    """Raise ProtocolError for values nested deeper than ``MAX_DEPTH`` or text holding a lone
    surrogate (keys included)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise ProtocolError("request text holds an unpaired UTF-16 surrogate: not valid Unicode")
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                raise ProtocolError(f"request nests deeper than {MAX_DEPTH} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def request_id_of(line: bytes) -> Any:
    """Best-effort id of a request that failed validation, so the error still pairs with it."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    rid = data.get("id") if isinstance(data, dict) else None
    if isinstance(rid, str) and _SURROGATE.search(rid):
        return None  # it could not be sent back
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def parse_response(line: bytes) -> dict[str, Any]:
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError("the daemon sent a malformed answer") from exc
    if not isinstance(data, dict) or "ok" not in data:
        raise ProtocolError("the daemon sent a malformed answer")
    return data


# --- typed parameter access: every handler reads its params through these ------------------


def param_str(params: dict[str, Any], name: str, *, default: str | None = None, max_len: int = 10_000) -> str:
    value = params.get(name, default)
    if value is None:
        raise ProtocolError(f"'{name}' is required")
    if not isinstance(value, str):
        raise ProtocolError(f"'{name}' must be a string")
    if len(value) > max_len:
        raise ProtocolError(f"'{name}' is longer than {max_len} characters")
    return value


def param_opt_str(params: dict[str, Any], name: str, *, max_len: int = 10_000) -> str | None:
    if params.get(name) is None:
        return None
    return param_str(params, name, max_len=max_len)


def param_int(params: dict[str, Any], name: str, *, default: int, lo: int, hi: int) -> int:
    value = params.get(name, default)
    if value is None:
        value = default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError(f"'{name}' must be an integer")
    if not lo <= value <= hi:
        raise ProtocolError(f"'{name}' must be between {lo} and {hi}")
    return value


def param_float(params: dict[str, Any], name: str, *, default: float, lo: float, hi: float) -> float:
    value = params.get(name, default)
    if value is None:
        value = default
    if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
        raise ProtocolError(f"'{name}' must be a number")
    if not lo <= value <= hi:
        raise ProtocolError(f"'{name}' must be between {lo} and {hi}")
    return float(value)


def param_bool(params: dict[str, Any], name: str, *, default: bool) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise ProtocolError(f"'{name}' must be true or false")
    return value


def check_known(params: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        takes = f"allowed: {', '.join(allowed)}" if allowed else "this op takes no parameters"
        raise ProtocolError(f"unknown parameter(s) {quoted_names(unknown)}; {takes}")
