"""An agent's MCP client (official Python SDK, session era) calling charge_card through
idem, one call per step of its job. It sends the agent's id for each intent as
X-Idem-Intent: the job id + the step (the call's index in the job's plan, the same when
the job is run again) + the tool. The route falls back to the tool and its arguments
(`{mcp.tool}:{mcp.args_hash}`) for a client that sends none. Kill it mid-call and run the
job again: a new process and session, whose JSON-RPC ids start over (the same numbers as
the first session's), the same intents; each charge runs once and the restarted client
gets its result. Two steps of one job that charge the same customer the same amount are
two intents: both run.

    python client.py JOB_ID CUSTOMER AMOUNT [CUSTOMER AMOUNT ...]   # IDEM_URL: http://127.0.0.1:8082
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
    job, rest = sys.argv[1], sys.argv[2:]
    plan = [{"customer": c, "amount": int(a)} for c, a in zip(rest[::2], rest[1::2])]
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(60))
    results = []
    async with http, streamable_http_client(IDEM_URL + "/mcp", http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for step, args in enumerate(plan):
                # --- the helper: the agent's id for this intent, on the call's request ---
                intent = f"{job}:{step}:charge_card"
                http.headers["X-Idem-Intent"] = intent  # one call at a time: this one's
                result = await session.call_tool("charge_card", args)
                # -------------------------------------------------------------------------
                results.append({"intent": intent, "text": result.content[0].text,
                                "isError": result.is_error})
    print(json.dumps({"results": results}), flush=True)


asyncio.run(main())
