"""An agent's MCP client (official Python SDK, session era) calling charge_card through
idem. It sends the agent's id for this intent (its job id + step) as X-Idem-Intent; the
route falls back to the tool and its arguments (`{mcp.tool}:{mcp.args_hash}`) for a
client that sends none. Kill it mid-call and run it again: a new process, a new session,
a new JSON-RPC id, the same intent; the charge runs once and the restarted client gets
its result.

    python client.py JOB_ID CUSTOMER AMOUNT      # IDEM_URL: http://127.0.0.1:8082
"""
import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:8082")


async def main() -> None:
    job, customer, amount = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # --- the helper: the agent's id for this intent, on every request of the session ---
    http = httpx2.AsyncClient(headers={"X-Idem-Intent": f"{job}:charge_card"},
                              timeout=httpx2.Timeout(60))
    # ------------------------------------------------------------------------------------
    async with http, streamable_http_client(IDEM_URL + "/mcp", http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("charge_card", {"customer": customer, "amount": amount})
    print(json.dumps({"text": result.content[0].text, "isError": result.is_error}), flush=True)


asyncio.run(main())
