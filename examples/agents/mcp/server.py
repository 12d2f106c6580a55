"""A billing MCP server made with the official Python SDK (`mcp` 2.x, where FastMCP is
now `MCPServer`), to run behind idem. Its one side effect, charge_card, appends a line to
LOG per execution and takes CHARGE_SECONDS (default 2) to answer: long enough for an
agent's client to die mid-call.

    python server.py PORT LOG
"""
import asyncio
import json
import os
import sys
import uuid

from mcp.server.mcpserver import MCPServer

PORT, LOG = int(sys.argv[1]), sys.argv[2]
server = MCPServer("billing")


@server.tool(description="Charge a customer's card.")
async def charge_card(customer: str, amount: int) -> str:
    charge = f"ch_{uuid.uuid4().hex[:12]}"
    with open(LOG, "a") as log:
        log.write(json.dumps({"charge": charge, "customer": customer, "amount": amount}) + "\n")
    await asyncio.sleep(float(os.environ.get("CHARGE_SECONDS", "2")))
    return f"charged {customer} {amount} as {charge}"


server.run(transport="streamable-http", host="127.0.0.1", port=PORT)
