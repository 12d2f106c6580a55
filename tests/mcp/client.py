"""Drives an MCP server (through idem) with the official Python SDK (`mcp` 2.x).

Usage: client.py ERA URL STEP...
  ERA: session (ClientSession: initialize + Mcp-Session-Id, the <= 2025-11-25 era)
       | modern (Client in its default auto mode: server/discover, the 2026-07-28 era)
  STEP: call:TOOL:ARGS_JSON | list
Prints one JSON line: the negotiated protocol version and one entry per step, so the
Rust test asserts on what the SDK returned (results, not exceptions).
"""

import asyncio
import json
import sys
import time

from mcp import ClientSession
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


def call_entry(result, progress, started):
    return {
        "isError": bool(result.is_error),
        "text": "".join(getattr(c, "text", "") for c in result.content),
        "structured": result.structured_content,
        "progress": progress,
        "elapsed": time.monotonic() - started,
    }


async def run_steps(call, list_tools, steps):
    out = []
    for step in steps:
        if step == "list":
            tools = await list_tools()
            out.append({
                "tools": {
                    t.name: {
                        "description": t.description,
                        "idempotentHint": t.annotations.idempotent_hint if t.annotations else None,
                        "readOnlyHint": t.annotations.read_only_hint if t.annotations else None,
                    }
                    for t in tools.tools
                }
            })
            continue
        _, tool, args = step.split(":", 2)
        progress = []
        started = time.monotonic()

        async def on_progress(value, total, message):
            progress.append({"value": value, "at": time.monotonic() - started})

        result = await call(tool, json.loads(args), on_progress)
        out.append(call_entry(result, progress, started))
    return out


async def main():
    era, url, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
    if era == "session":
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out = await run_steps(
                    lambda t, a, p: session.call_tool(t, a, progress_callback=p),
                    session.list_tools,
                    steps,
                )
                version = init.protocol_version
    else:
        async with Client(url) as client:
            out = await run_steps(
                lambda t, a, p: client.call_tool(t, a, progress_callback=p),
                client.list_tools,
                steps,
            )
            version = client.protocol_version
    print(json.dumps({"protocol": version, "steps": out}))


asyncio.run(main())
