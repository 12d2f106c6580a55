"""An MCP server for idem's tests, made with the official Python SDK (`mcp` 2.x).

Usage: server.py PORT LOG {json|sse}

Tools:
- charge_customer: the side effect. Appends one line to LOG per execution, sends a
  progress notification, waits `delay` seconds (and while the file `gate` exists), and
  answers with a fresh charge id (a second execution would answer with another id).
- lookup: read-only (annotated readOnlyHint), never protected by the test routes.
- decline: a definitive tool error (isError: true), counted in LOG.
- confirm_refund: asks first (2026-07-28 `input_required` with a request state), runs on
  the continuation; the ask and the execution are both counted in LOG.
"""

import asyncio
import json
import os
import sys
import uuid

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations

PORT = int(sys.argv[1])
LOG = sys.argv[2]
JSON_RESPONSE = sys.argv[3] == "json"

server = MCPServer("billing")


def record(event: str, **fields: object) -> None:
    with open(LOG, "a") as log:
        log.write(json.dumps({"event": event, **fields}) + "\n")


@server.tool(description="Charge a customer's card.")
async def charge_customer(customer: str, amount: int, ctx: Context, delay: float = 0.0, gate: str = "") -> str:
    charge = uuid.uuid4().hex
    record("charge_customer", customer=customer, amount=amount, charge=charge)
    await ctx.report_progress(1, 2, "charging")
    await asyncio.sleep(delay)
    while gate and os.path.exists(gate):
        await asyncio.sleep(0.02)
    return f"charged {customer} {amount} as {charge}"


@server.tool(description="Look a customer up.", annotations=ToolAnnotations(readOnlyHint=True))
def lookup(customer: str) -> str:
    record("lookup", customer=customer)
    return f"{customer}: active"


@server.tool(description="Try to charge a card that is declined.")
def decline(customer: str) -> CallToolResult:
    record("decline", customer=customer, attempt=uuid.uuid4().hex)
    return CallToolResult(content=[TextContent(type="text", text=f"card of {customer} declined")], is_error=True)


@server.tool(description="Refund an order after the user confirms.")
def confirm_refund(order: str, ctx: Context) -> str | InputRequiredResult:
    if ctx.request_state is None:
        record("confirm_refund_asked", order=order)
        return InputRequiredResult(request_state="confirmed")
    refund = uuid.uuid4().hex
    record("confirm_refund", order=order, refund=refund)
    return f"refunded {order} as {refund}"


server.run("streamable-http", host="127.0.0.1", port=PORT, json_response=JSON_RESPONSE)
