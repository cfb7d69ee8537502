"""The MCP shim driven by the MCP SDK's own stdio client against a real daemon."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.conftest import DaemonProcess
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
