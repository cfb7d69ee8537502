"""MCP shim benchmark: cold start to the answer of tools/list, write-to-searchable latency and
memory-tool round trips, through the MCP SDK's stdio client against a real daemon.

    python bench/shim.py --vault ../shared/eval/vaults/obsidian-help/en --out bench/out/mcp.json
    python bench/shim.py --start-only 15   # spawn to tools/list, bare JSON-RPC, no daemon needed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import bench_daemon, emit, pct

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters


def params(home: Path, agent: str) -> StdioServerParameters:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable, args=["-m", "sidecar", "mcp", "--agent", agent, "--home", str(home)]
    )


async def cold_start(home: Path) -> float:
    from mcp import Client

    t0 = time.perf_counter()
    async with Client(params(home, "bench")) as client:
        await client.list_tools()
        return (time.perf_counter() - t0) * 1000


async def session(home: Path, n: int) -> dict[str, Any]:
    from mcp import Client

    write_ms: list[float] = []
    visible_ms: list[float] = []
    search_ms: list[float] = []
    get_ms: list[float] = []
    async with Client(params(home, "bench")) as client:
        for i in range(n):
            word = f"zebracorn{i}"
            t0 = time.perf_counter()
            await client.call_tool(
                "memory_write", {"slug": f"bench-{i}", "content": f"Note {i}: the {word} lives in the shed."}
            )
            t1 = time.perf_counter()
            found = await client.call_tool("memory_search", {"query": word, "limit": 3})
            t2 = time.perf_counter()
            assert f"memory/bench-{i}" in found.content[0].text, found.content[0].text[:300]
            write_ms.append((t1 - t0) * 1000)
            visible_ms.append((t2 - t0) * 1000)
        queries = ["record a lecture", "sync notes", "canvas", "properties", "graph view", "hotkeys"]
        for _ in range(20):
            for q in queries:
                t0 = time.perf_counter()
                await client.call_tool("memory_search", {"query": q})
                search_ms.append((time.perf_counter() - t0) * 1000)
        for _ in range(50):
            t0 = time.perf_counter()
            await client.call_tool("memory_get", {"reference": "memory/bench-0"})
            get_ms.append((time.perf_counter() - t0) * 1000)
        for i in range(n):
            await client.call_tool("memory_delete", {"slug": f"bench-{i}"})
    return {
        "write_ms_p50": pct(write_ms, 0.5),
        "write_ms_p95": pct(write_ms, 0.95),
        "write_to_found_ms_p50": pct(visible_ms, 0.5),
        "write_to_found_ms_p95": pct(visible_ms, 0.95),
        "search_ms_p50": pct(search_ms, 0.5),
        "search_ms_p95": pct(search_ms, 0.95),
        "get_ms_p50": pct(get_ms, 0.5),
        "get_ms_p95": pct(get_ms, 0.95),
    }


def raw_start(home: Path, python: str) -> float:
    """Spawn to the tools/list answer with a bare JSON-RPC exchange (no client library cost).

    The server runs in the home folder, so `-m sidecar` imports the installed package, not a
    checkout in the current folder."""
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "b", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "sidecar", "mcp", "--agent", "bench", "--home", str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=home,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    proc.stdin.flush()
    for raw in proc.stdout:
        if json.loads(raw).get("id") == 2:
            break
    elapsed = (time.perf_counter() - t0) * 1000
    proc.stdin.close()
    proc.wait(10)
    return elapsed


def start_only(runs: int, python: str) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="sidecar-mcp-start-"))
    bare: list[float] = []
    starts: list[float] = []
    # Interleaved, so a drift in the machine's speed touches both series alike.
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([python, "-c", "pass"], check=True, cwd=home)
        bare.append((time.perf_counter() - t0) * 1000)
        starts.append(raw_start(home, python))
    return {
        "python": python,
        "mcp_start_to_tools_list_ms_p50": round(statistics.median(starts), 1),
        "mcp_start_to_tools_list_ms_min": round(min(starts), 1),
        "mcp_start_to_tools_list_ms_max": round(max(starts), 1),
        "bare_python_start_ms_p50": round(statistics.median(bare), 1),
        "bare_python_start_ms_min": round(min(bare), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", type=Path, help="needed unless --start-only")
    ap.add_argument(
        "--start-only", type=int, metavar="RUNS", default=0, help="only time the start, RUNS times"
    )
    ap.add_argument(
        "--python", default=sys.executable, help="interpreter of the venv to start (--start-only)"
    )
    ap.add_argument("--home", type=Path, default=None)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.start_only:
        emit(start_only(args.start_only, args.python), args.out)
        return
    if args.vault is None:
        ap.error("--vault is required")
    home = args.home or Path(tempfile.mkdtemp(prefix="sidecar-mcp-bench-"))
    d = bench_daemon(args.vault.resolve(), home)
    try:
        d.wait_ready(timeout=7200, poll=0.2)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare_python_ms = (time.perf_counter() - t0) * 1000
        starts = [asyncio.run(cold_start(home)) for _ in range(7)]
        result = {
            "mcp_cold_start_to_tools_list_ms_p50": round(statistics.median(starts), 1),
            "mcp_cold_start_min_ms": round(min(starts), 1),
            "bare_python_start_ms": round(bare_python_ms, 1),
            **asyncio.run(session(home, args.writes)),
        }
    finally:
        d.stop()
    emit(result, args.out)


if __name__ == "__main__":
    main()
