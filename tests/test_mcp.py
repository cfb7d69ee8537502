"""The MCP shim driven by the MCP SDK's own stdio client against a real daemon."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import DaemonProcess, write
from tests.test_agents import TOOLS  # one list of the shim's tools

pytestmark = pytest.mark.model


def _params(home: Path, agent: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "sidecar", "mcp", "--agent", agent, "--home", str(home)]
    )


async def _session(home: Path, agent: str, steps: Any) -> Any:
    async with Client(_params(home, agent)) as client:
        return await steps(client)


def _shim_with_closed_stdin(home: Path, agent: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "mcp", "--agent", agent, "--home", str(home)],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "text", None))


def test_mcp_end_to_end(daemon_factory: Any, vault: Path) -> None:
    """List the tools; write, search, get, edit, delete a note; a second agent never sees it."""
    d: DaemonProcess = daemon_factory(vault).start()

    async def claude(client: Client) -> dict[str, Any]:
        out: dict[str, Any] = {}
        tools = await client.list_tools()
        out["tools"] = {t.name: t for t in tools.tools}
        out["write"] = await client.call_tool(
            "memory_write",
            {
                "slug": "garage-kayak",
                "content": "The kayak paddle hangs in the garage loft.",
                "frontmatter": {"tags": ["boat"]},
            },
        )
        out["search"] = await client.call_tool("memory_search", {"query": "where is the kayak paddle"})
        out["get"] = await client.call_tool("memory_get", {"reference": "memory/garage-kayak"})
        out["list"] = await client.call_tool("memory_list", {"tag": "boat"})
        out["edit"] = await client.call_tool(
            "memory_edit", {"slug": "garage-kayak", "content": "The kayak paddle moved to the basement."}
        )
        out["search2"] = await client.call_tool(
            "memory_search", {"query": "kayak paddle basement", "limit": 3}
        )
        out["bad_slug"] = await client.call_tool("memory_write", {"slug": "../vault/x", "content": "x"})
        out["traversal"] = await client.call_tool("memory_get", {"reference": "vault/../../etc/passwd"})
        # A link as a note writes it: the note that link opens, only its section.
        out["link"] = await client.call_tool("memory_get", {"reference": "[[Boat#Engine]]"})
        out["no_heading"] = await client.call_tool("memory_get", {"reference": "Boat#Sails"})
        out["edit_missing"] = await client.call_tool("memory_edit", {"slug": "nope", "content": "x"})
        return out

    r = asyncio.run(_session(d.home, "claude", claude))
    assert set(r["tools"]) == TOOLS
    for tool in r["tools"].values():
        assert tool.description and len(tool.description) > 60
        assert tool.input_schema["type"] == "object"
    assert r["tools"]["memory_write"].input_schema["required"] == ["slug", "content"]
    assert not r["write"].is_error and "memory/garage-kayak created" in _text(r["write"])
    search = _text(r["search"])
    assert "[memory] memory/garage-kayak" in search and "garage loft" in search
    assert "tags:" in _text(r["get"]) and "garage loft" in _text(r["get"])
    assert "memory/garage-kayak" in _text(r["list"])
    assert not r["edit"].is_error
    assert "basement" in _text(r["search2"])
    for bad in ("bad_slug", "traversal", "edit_missing"):
        assert r[bad].is_error, bad
    assert "slug" in _text(r["bad_slug"]) and "memory_write" in _text(r["edit_missing"])
    link = _text(r["link"])
    assert link.startswith("[vault] vault/Projects/Boat (lines 3-5 of 5)") and "spark plugs" in link
    assert "# Boat" not in link
    assert r["link"].structured_content["anchor"] == {"text": "Engine", "found": True}
    assert _text(r["no_heading"]).startswith("note: vault/Projects/Boat has no heading or block 'Sails'")

    async def codex(client: Client) -> tuple[Any, Any, Any]:
        search = await client.call_tool("memory_search", {"query": "kayak paddle basement"})
        listed = await client.call_tool("memory_list", {})
        get = await client.call_tool("memory_get", {"reference": "memory/garage-kayak"})
        return search, listed, get

    search, listed, get = asyncio.run(_session(d.home, "codex", codex))
    assert "[memory] memory/" not in _text(search) and "moved to the basement" not in _text(search)
    assert "No notes" in _text(listed)
    assert get.is_error

    async def delete(client: Client) -> Any:
        return await client.call_tool("memory_delete", {"slug": "garage-kayak"})

    assert "deleted" in _text(asyncio.run(_session(d.home, "claude", delete)))
    trash = d.home / "agents" / "claude" / "memory" / ".trash"
    # the edit kept the first text, the delete the last one
    kept = sorted(trash.iterdir())
    assert [p.name.startswith("garage-kayak--") for p in kept] == [True, True]
    assert "garage loft" in kept[0].read_text() and "basement" in kept[1].read_text()


def test_mcp_starts_without_daemon_and_reconnects(daemon_factory: Any, vault: Path) -> None:
    """With no daemon the shim starts and tools say how to start it; once it runs, the same session works."""
    d: DaemonProcess = daemon_factory(vault)

    async def steps(client: Client) -> tuple[Any, Any, Any]:
        tools = await client.list_tools()
        down = await client.call_tool("memory_search", {"query": "garden"})
        await asyncio.to_thread(d.start)
        up = await client.call_tool("memory_search", {"query": "tomatoes sun water"})
        return tools, down, up

    tools, down, up = asyncio.run(_session(d.home, "claude", steps))
    assert {t.name for t in tools.tools} == TOOLS
    assert down.is_error and "sidecar serve" in _text(down)
    assert not up.is_error and "vault/Garden" in _text(up)


def test_mcp_stdout_is_protocol_only_and_imports_no_engine(tmp_path: Path) -> None:
    """The shim loads no engine module and prints nothing to stdout on its own."""
    code = (
        "import sys, sidecar.clients.mcp_shim;"
        "print(sorted({'onnxruntime', 'tokenizers', 'lancedb', 'tantivy', 'pyarrow'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
    # Started with closed stdin, a shim must exit without writing anything to stdout.
    assert _shim_with_closed_stdin(tmp_path, "claude").stdout == ""


def test_mcp_refuses_bad_agent_name(tmp_path: Path) -> None:
    """An invalid agent name stops the shim at once with a message on stderr."""
    proc = _shim_with_closed_stdin(tmp_path, "../x")
    assert proc.returncode == 2 and "invalid agent name" in proc.stderr and proc.stdout == ""


def _raw_session(home: Path, lines: list[str]) -> dict[Any, Any]:
    """Raw JSON-RPC lines through a shim (what a careless or hostile client may send, which the SDK
    would refuse to); the answers by id (a batch's answer under the key "batch")."""
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "mcp", "--agent", "claude", "--home", str(home)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[Any, Any] = {}
    for line in proc.stdout.splitlines():
        answer = json.loads(line)  # stdout holds nothing but protocol lines
        if isinstance(answer, list):
            out["batch"] = answer
        else:
            out.setdefault(answer["id"], []).append(answer)
    return out


def _call(rid: int, tool: str, arguments: str) -> str:
    return (
        f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call",'
        f'"params":{{"name":"{tool}","arguments":{arguments}}}}}'
    )


def test_mcp_hostile_messages_get_clear_errors_and_the_session_goes_on(
    daemon_factory: Any, vault: Path
) -> None:
    """Nesting thousands deep, a lone surrogate, a misspelt argument, a null id, a batch, a
    percent-encoded resource URI, a prompt with a wrong argument: each gets its own clear answer
    (a tool error where the model should read it) and the shim answers the next message."""
    write(vault / "Trip notes.md", "# Trip notes\n\nPack the tent and the stove.\n")
    write(vault / "Sales 100%DE.md", "# Sales\n\nAll of Germany.\n")
    d: DaemonProcess = daemon_factory(vault).start()
    init = (
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26",'
        '"capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}'
    )
    deep = "[" * 5000 + "]" * 5000
    nested = "{" + '"a":{' * 40 + "}" * 40 + "}"
    answers = _raw_session(
        d.home,
        [
            init,
            _call(2, "memory_search", f'{{"query":"x","tag":{deep}}}'),
            _call(3, "memory_search", '{"query":"tent\\ud800"}'),
            _call(4, "memory_write", '{"slug":"typo","content":"body","frontMatter":{"tags":["x"]}}'),
            _call(5, "memory_write", f'{{"slug":"deep","content":"body","frontmatter":{nested}}}'),
            '{"jsonrpc":"2.0","id":null,"method":"ping"}',
            '[{"jsonrpc":"2.0","id":6,"method":"ping"},{"jsonrpc":"2.0","id":7,"method":"ping"}]',
            '{"jsonrpc":"2.0","id":8,"method":"resources/read",'
            '"params":{"uri":"sidecar://note/vault/Trip%20notes"}}',
            '{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"recall","arguments":"x"}}',
            '{"jsonrpc":"2.0","id":"\\ud800","method":"\\udfff"}',  # echoed back: escaped, not fatal
            '{"jsonrpc":"2.0","id":11,"method":"resources/read",'
            '"params":{"uri":"sidecar://note/vault/Sales 100%DE"}}',
            '{"jsonrpc":"2.0","id":12,"method":"resources/read",'
            '"params":{"uri":"sidecar://note/vault%2F..%2F..%2Fetc%2Fpasswd"}}',
            '{"jsonrpc":"2.0","id":10,"method":"ping"}',
        ],
    )
    parse_errors = [a for a in answers.get(None, []) if a["error"]["code"] == -32700]
    assert len(parse_errors) == 1 and "nests too deeply" in parse_errors[0]["error"]["message"]
    for rid, words in ((3, "surrogate"), (4, "'frontMatter'"), (5, "nests deeper than 32")):
        result = answers[rid][0]["result"]
        assert result["isError"] and words in result["content"][0]["text"], (rid, result)
    assert "slug, content, frontmatter" in answers[4][0]["result"]["content"][0]["text"]
    assert not (d.home / "agents" / "claude" / "memory" / "typo.md").exists()
    assert not (d.home / "agents" / "claude" / "memory" / "deep.md").exists()
    null_id = [a for a in answers.get(None, []) if a["error"]["code"] == -32600]
    assert len(null_id) == 1 and "'id'" in null_id[0]["error"]["message"]
    assert sorted(a["id"] for a in answers["batch"]) == [6, 7]
    assert "Pack the tent" in answers[8][0]["result"]["contents"][0]["text"]
    assert answers[9][0]["error"]["code"] == -32602
    assert answers["\ud800"][0]["error"]["code"] == -32601
    assert "All of Germany" in answers[11][0]["result"]["contents"][0]["text"]
    assert answers[10][0]["result"] == {}
    # refused for what the client meant (the raw form's reason, "must start with vault/", misled)
    assert "leaves its root" in answers[12][0]["error"]["message"], answers[12]


def test_memory_status_leaves_out_other_agents_inboxes() -> None:
    """memory_status shows an agent its own inbox's troubles, not another agent's name, path or
    failed notes."""
    from sidecar.clients.mcp_texts import status_of

    health = {
        "roots": [
            {"name": "memory/alice", "mode": "offline", "path": "/h/agents/alice/memory", "error": "x"},
            {"name": "memory/bob", "mode": "offline", "path": "/h/agents/bob/memory", "error": "y"},
            {"name": "vault", "mode": "offline", "path": "/v", "error": "gone"},
        ],
        "problems": {
            "active": [
                {"area": "memory_write", "error": "writing to the bob inbox failed: secret-plan"},
                {"area": "memory_audit", "error": "the alice inbox's audit log cannot be appended to"},
                {"area": "index", "error": "disk full"},
                {
                    "area": "unreadable",
                    "error": "1 folder(s) of memory/bob cannot be read (/h/agents/bob/memory/x)",
                },
            ]
        },
    }
    out = status_of(health, "alice")
    assert [r["name"] for r in out["offlineRoots"]] == ["memory/alice", "vault"]
    assert [p["area"] for p in out["problems"]] == ["memory_audit", "index"]
    assert "bob" not in str(out)


def test_memory_status_says_how_long_indexing_and_a_switch_take() -> None:
    """memory_status carries the paces `sidecar status` shows (rate, time left, rough while the
    pace settles) for the sweep, the vectors and a model switch, in words and structured: an
    agent could not tell whether to wait a minute or a day. None while storing vectors fails."""
    import jsonschema

    from sidecar.clients.mcp_texts import status_of
    from sidecar.clients.mcp_tools import TOOLS

    health = {
        "embedder": {"state": "ok", "model": "new@1"},
        "index": {
            "state": "building",
            "phase": "indexing",
            "progress": {"done": 100, "total": 700, "notes_per_second": 2.0, "rough": True},
            "files": 100,
            "chunks": 900,
            "pending_vectors": 600,
            "embed_rate_chunks_per_second": 1.0,
            "embed_rate_rough": False,
        },
        "vectors": {
            "serving": "t1",
            "serving_model": "old@1",
            "building": "t2",
            "building_pending": 7200,
            "building_rate_chunks_per_second": 4.0,
            "building_rate_rough": False,
        },
    }
    out = status_of(health, "a")
    assert out["pace"] == {
        "notes": {"perSecond": 2.0, "left": 600, "secondsLeft": 300.0, "rough": True},
        "vectors": {"perSecond": 1.0, "left": 600, "secondsLeft": 600.0, "rough": False},
        "switch": {"perSecond": 4.0, "left": 7200, "secondsLeft": 1800.0, "rough": False},
    }
    said = out["message"]
    assert "100/700 notes read, about 5m 0s left (a rough estimate: the pace is still settling)" in said
    assert "600 chunks wait for their vector (found by keywords only), about 10m 0s left;" in said
    assert "7200 chunks still wait for the new model's vectors, about 30m 0s left;" in said
    schema = next(t["outputSchema"] for t in TOOLS if t["name"] == "memory_status")
    jsonschema.validate(out, schema)
    health["problems"] = {"active": [{"area": "embedding", "error": "storing vectors failed: disk full"}]}
    stalled = status_of(health, "a")
    assert (
        stalled["pace"]["vectors"]["secondsLeft"] is None and stalled["pace"]["switch"]["secondsLeft"] is None
    )
    assert "paused: storing vectors fails" in stalled["message"]
    jsonschema.validate(stalled, schema)
    for state in ("loading", "failed"):
        # The model not computing: the last known rate says nothing of when vectors come (as status).
        health["embedder"]["state"] = state
        gone = status_of(health, "a")
        assert set(gone["pace"]) == {"notes"}, gone["pace"]
        assert "10m 0s" not in gone["message"] and "30m 0s" not in gone["message"]
    health["embedder"]["state"] = "ok"
    del health["index"]["progress"], health["index"]["embed_rate_chunks_per_second"], health["vectors"]
    assert "pace" not in status_of(health, "a")  # no rate yet: nothing guessed


def test_memory_status_names_a_held_deletion() -> None:
    """A root whose mass deletion is held (mode 'held', the folder is there) is named with its
    reason and command, as an offline one is (the shim looked for 'offline' only)."""
    from sidecar.clients.mcp_texts import status_of

    why = (
        "lost 9 of 10 indexed notes in one burst of deletions; (or `sidecar index --confirm-deletions vault`)"
    )
    out = status_of({"roots": [{"name": "vault", "mode": "held", "path": "/v", "error": why}]}, "a")
    assert out["offlineRoots"][0]["mode"] == "held" and "--confirm-deletions vault" in out["message"]
    assert "vault deletions held" in out["message"]


def test_the_snippets_doctor_prints_reach_the_daemon(in_process: Any, tmp_path: Path) -> None:
    """The MCP snippet of `doctor --config FILE` works when pasted into a host that has none of
    the shell's flags or SIDECAR_* variables (it named only --home: a config with `socket:` left
    the shim knocking at another socket)."""
    cfg = in_process.cfg
    conf = tmp_path / "elsewhere" / "sidecar.yaml"
    write(conf, f"home: {cfg.home}\nsocket: {cfg.socket_path}\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    clean["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # no default file either
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "doctor", "--config", str(conf), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=clean,
    )
    args = json.loads(out.stdout)["mcp"]["claudeCode"]["json"]["mcpServers"]["sidecar"]["args"]
    assert args[-2:] == ["--config", str(conf)]
    params = StdioServerParameters(command=sys.executable, args=["-m", "sidecar", *args], env=clean)

    async def steps() -> Any:
        async with Client(params) as client:
            return await client.call_tool("memory_status", {})

    status = asyncio.run(steps())
    assert not status.is_error and "not available" not in _text(status), _text(status)


def test_a_shim_runs_a_few_calls_at_once_and_answers_every_one(tmp_path: Path) -> None:
    """A host sending hundreds of tool calls at once gets every answer, in turn: the shim runs at
    most CALL_WORKERS at once (a thread and a daemon connection each: 1,500 at once held the
    daemon's connections, and another agent's search waited a minute behind them)."""
    import io
    import threading
    import time

    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.clients.mcp_shim import CALL_WORKERS, Shim

    calls = ToolCalls(tmp_path / "no.sock", "flood")
    running, most = [0], [0]
    lock = threading.Lock()

    def status(_args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return "ok", {"ok": True}

    calls.tools["memory_status"] = status

    class Flaky(io.BytesIO):  # the first answers fail to be written (not a closed pipe)
        failures = 3

        def write(self, data: Any) -> int:
            if self.failures > 0:
                self.failures -= 1
                raise OSError(5, "Input/output error")
            return super().write(data)

    out = Flaky()
    lines = [_call(i, "memory_status", "{}") for i in range(1, 201)]
    Shim(tmp_path / "no.sock", "flood", out, calls).serve(io.BytesIO(("\n".join(lines) + "\n").encode()))
    answers = [json.loads(x) for x in out.getvalue().splitlines()]
    assert len(answers) >= 197 and max(a["id"] for a in answers) == 200  # the workers lived on
    assert all(a["result"]["isError"] is False for a in answers)
    assert 1 < most[0] <= CALL_WORKERS


def test_tool_resource_and_prompt_texts_show_a_notes_terminal_controls_escaped(tmp_path: Path) -> None:
    """A note's ESC sequences (a web clipping's title change, an OSC 52 clipboard write) came back
    raw in the text of memory_search and memory_get, which hosts print in a terminal. The text
    shows them escaped; structuredContent keeps the note exact; lines and tabs stay."""
    import io

    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.clients.mcp_shim import Shim

    body = "Body \x1b]0;pwned\x07 and \x1b[31mred\x1b[0m,\ttab\nnext line \u202eevil"
    calls = ToolCalls(tmp_path / "no.sock", "claude")
    calls.tools["memory_get"] = lambda _a: (body, {"text": body})
    calls.call = lambda op, params, **_: {"text": body}  # type: ignore[method-assign]
    shim = Shim(tmp_path / "no.sock", "claude", io.BytesIO(), calls)

    def _request(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}

    result = shim.answer(_request(1, "tools/call", {"name": "memory_get", "arguments": {"reference": "x"}}))
    assert result is not None
    text = result["result"]["content"][0]["text"]
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]0;pwned\\x07" in text and "\ttab\nnext line \\u202eevil" in text
    assert result["result"]["structuredContent"]["text"] == body
    read = shim.answer(_request(2, "resources/read", {"uri": "sidecar://note/vault/x"}))
    assert read is not None and "\x1b" not in read["result"]["contents"][0]["text"]
    prompt = shim.answer(_request(3, "prompts/get", {"name": "recall", "arguments": {"topic": "a\x1b[2Jb"}}))
    assert prompt is not None and "\x1b" not in prompt["result"]["messages"][0]["content"]["text"]


def test_an_answer_of_another_shape_is_an_error_not_an_empty_success(tmp_path: Path) -> None:
    """A foreign program on the socket (or a daemon of another version) answering with another
    shape: memory_search said "0 hits … Nothing relevant found" and memory_status "index
    building; 0 notes" (an agent concludes the notes hold nothing); a wrong type gave a JSON-RPC
    internal error. Both are a tool error naming the unreadable answer now."""
    import io

    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.clients.mcp_shim import Shim

    calls = ToolCalls(tmp_path / "no.sock", "claude")
    shim = Shim(tmp_path / "no.sock", "claude", io.BytesIO(), calls)
    for answer in ({"x": "A" * 100}, {"hits": "notalist"}, {"hits": [{"reference": 3}]}):
        calls.call = lambda op, params, answer=answer, **_: answer  # type: ignore[method-assign]
        for tool, arguments in (("memory_search", {"query": "sync"}), ("memory_status", {})):
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
            reply = shim.answer({**message, "params": {"name": tool, "arguments": arguments}})
            assert reply is not None and "result" in reply, reply
            result = reply["result"]
            assert result["isError"] is True, (answer, tool, result)
            assert "an answer this shim cannot read" in result["content"][0]["text"]


# An engine's debug dump and a multi-line error, as health keeps them whole.
_DUMP_ERROR = (
    "BM25 commit failed: 'IoError { io_error: Os { code: 28, kind: StorageFull, message: \"No space "
    'left on device" }, filepath: "/h/index/bm25/meta.json" }\''
)
_MULTILINE_ERROR = (
    "the configuration file could not be reloaded: 2 configuration problems:\n"
    "  /c/sidecar.yaml: unknown key 'serch' (value 1)\n"
    "  /c/sidecar.yaml: search.limit = 'many' is not a number"
)


def test_memory_status_says_errors_in_plain_words_with_every_line() -> None:
    """memory_status showed an engine's debug dump as it came, and an agent reading a multi-line
    error had the whole text with its line breaks escaped: now `sidecar status`' plain words,
    the file and cause of each line kept."""
    from sidecar.clients.mcp_texts import status_of

    health = {
        "problems": {
            "active": [
                {"area": "keyword_search", "error": _DUMP_ERROR},
                {"area": "config", "error": _MULTILINE_ERROR},
            ]
        }
    }
    out = status_of(health, "a")
    dump, config = (p["error"] for p in out["problems"])
    assert dump == "disk full: BM25 commit failed: No space left on device (/h/index/bm25/meta.json)"
    assert "IoError" not in out["message"] and "\\n" not in out["message"]
    assert "unknown key 'serch'" in config and "search.limit = 'many'" in config and "\n" not in config


def test_memory_status_says_no_embedder_error_when_there_is_none(in_process: Any) -> None:
    """With the model fine (health's error null), memory_status said "error": "an error without a
    message (the daemon's log may say more)" on every call; a real error is still said."""
    import jsonschema

    from sidecar.clients.mcp_texts import status_of
    from sidecar.clients.mcp_tools import TOOLS as SCHEMAS

    health = in_process.call("health", agent="a")
    assert health["embedder"]["state"] == "ok" and health["embedder"].get("error") is None
    said = status_of(health, "a")
    assert "error" not in said["embedder"] and "without a message" not in str(said)
    jsonschema.validate(said, next(t["outputSchema"] for t in SCHEMAS if t["name"] == "memory_status"))
    health["embedder"] = {"state": "failed", "model": None, "error": "model.onnx: no such file"}
    assert status_of(health, "a")["embedder"]["error"] == "model.onnx: no such file"


def test_memory_status_shows_no_control_characters_and_no_empty_error() -> None:
    """A problem's error reached the agent with its escape sequences and NUL, and an error that
    was a backtrace alone as an empty string."""
    from sidecar.clients.mcp_texts import status_of

    health = {
        "problems": {
            "active": [
                {"area": "keyword_search", "error": "commit failed\x1b[31m\x00 \x07now"},
                {"area": "vectors", "error": "stack backtrace:\n   0: lance::x\n"},
            ]
        }
    }
    dirty, frames = (p["error"] for p in status_of(health, "a")["problems"])
    assert dirty == "commit failed now"
    assert frames == "stack backtrace:"


def test_memory_status_marks_an_earlier_inbox_count_in_its_structured_content_and_dates_it() -> None:
    """An earlier count (the inbox did not answer in time) lost its ``counted_at`` and ``stale``
    in the structured ``inbox``, where it read as fresh; and the text said only HH:MM, a count of
    two days before reading as today's."""
    import time

    from sidecar.clients.mcp_texts import status_of

    two_days_ago = time.time() - 2 * 86400
    usage = {"notes": 3, "bytes": 900, "max_bytes": 1000, "trash_bytes": 0}
    stale = {
        **usage,
        "counted_at": two_days_ago,
        "stale": "the inbox did not answer within 2.0 s (hung share?)",
    }
    said = status_of({"inbox": stale}, "claude")
    assert said["inbox"]["countedAt"] == two_days_ago and "hung share" in said["inbox"]["stale"]
    day = time.strftime("%Y-%m-%d", time.localtime(two_days_ago))
    assert f"counted at {day} " in said["message"]
    fresh = status_of({"inbox": usage}, "claude")
    assert "stale" not in fresh["inbox"] and "countedAt" not in fresh["inbox"]
    assert "counted at" not in fresh["message"]


def test_a_refusal_as_the_daemon_stops_names_the_tool(tmp_path: Path) -> None:
    """A tool call refused ``busy`` because the daemon stops named the daemon's op ('write'),
    which the agent never called: the shim names its tool."""
    import io

    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.clients.mcp_shim import Shim
    from sidecar.contracts.errors import RemoteError, stopping_message

    calls = ToolCalls(tmp_path / "no.sock", "claude")

    def refused(*_a: Any, **_k: Any) -> dict[str, Any]:
        raise RemoteError("busy", stopping_message("'write'"))

    calls._ask = refused  # type: ignore[method-assign]
    shim = Shim(tmp_path / "no.sock", "claude", io.BytesIO(), calls)
    args = {"slug": "x", "content": "y"}
    result = shim.answer(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_write", "arguments": args},
        }
    )
    assert result is not None and result["result"]["isError"] is True
    text = result["result"]["content"][0]["text"]
    assert text.startswith("busy: the daemon is stopping: memory_write was not run"), text
    assert "30 s" in text


def test_a_call_cut_short_by_the_stop_names_the_tool_not_the_daemons_op(tmp_path: Path) -> None:
    """A search cut short where it met the index the stop closed: the daemon names its own op
    ('search'), and the agent, which called memory_search, read a name it never used. The shim
    names the tool, as for a call refused before it ran."""
    import io

    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.clients.mcp_shim import Shim
    from sidecar.contracts.errors import RemoteError, cut_short_message

    calls = ToolCalls(tmp_path / "no.sock", "claude")

    def cut(*_a: Any, **_k: Any) -> dict[str, Any]:
        raise RemoteError("busy", cut_short_message("'search'", write=False))

    calls._ask = cut  # type: ignore[method-assign]
    shim = Shim(tmp_path / "no.sock", "claude", io.BytesIO(), calls)
    result = shim.answer(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_search", "arguments": {"query": "x"}},
        }
    )
    assert result is not None and result["result"]["isError"] is True
    text = result["result"]["content"][0]["text"]
    assert text.startswith("busy: the daemon is stopping: memory_search was cut short where"), text
    assert "no note was changed" in text


def test_the_frontmatter_schema_says_a_yes_no_is_refused_as_a_name() -> None:
    """An agent reads the tool's schema before it writes: that JSON true/false under aliases, tags
    or title is refused (send it as text) is said there, not learnt from a failed write."""
    from sidecar.clients.mcp_schemas import FRONTMATTER
    from sidecar.notes.frontmatter import is_name_property

    said = FRONTMATTER["description"]
    assert "true or false is refused" in said and "aliases" in said and "as text" in said
    # every key the refusal covers is named (the singular forms and any case were not)
    assert all(is_name_property(k) for k in ("alias", "tag", "Tags"))
    assert "'alias'" in said and "'tag'" in said and "any case" in said
