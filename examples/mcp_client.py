"""Two MCP sessions of the session era, then a 2026-07-28 client, each calling
charge_customer with the same arguments through idem: one charge on the server.

Usage: python examples/mcp_client.py [URL]   (default http://127.0.0.1:8081/mcp, the
listener of config/examples/mcp.yaml). Needs the official Python SDK, mcp 2.x.
"""

import asyncio
import sys

from mcp import ClientSession
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8081/mcp"


async def session_era():                      # initialize + Mcp-Session-Id
    async with streamable_http_client(URL) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("charge_customer", {"customer": "cus_42", "amount": 500})
            print("session era:", result.content[0].text)


async def stateless_era():                    # server/discover, 2026-07-28
    async with Client(URL) as client:
        result = await client.call_tool("charge_customer", {"customer": "cus_42", "amount": 500})
        print(client.protocol_version, ":", result.content[0].text)
        tools = await client.list_tools()
        charge = next(t for t in tools.tools if t.name == "charge_customer")
        print("idempotentHint:", charge.annotations.idempotent_hint)


async def main():
    await session_era()
    await session_era()
    await stateless_era()


asyncio.run(main())
