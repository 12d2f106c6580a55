"""OpenAI Agents SDK: one charge per intent, across a crash and a re-run of the run.

The SDK has no durable id of its own, and the model's `tool_call_id` is no key: a re-run
gets a new one for the same intent, and some models reuse one (`call_0`) for different
intents. So the application owns a run id (it stores it with the user's request before
running the agent, and re-runs with the same id after a crash), and the key is that id +
the tool's name + the call's natural key (the invoice). A model that re-mints its own
`idempotency_key` argument or rewords the note still maps to the same intent.

    python agent.py RUN_ID '[{"customer": "cus_1", "amount": 500, "invoice": "inv_1"}, ...]'

The model is a scripted `agents.models.interface.Model` (no network): it asks for one
charge_card call per turn, one turn per item, then answers. Each time it is asked it
mints a fresh call id and its own fresh idempotency_key (SAME_CALL_ID=1: every call id is
`call_0`, as Gemini numbers its calls anew in each response). The SDK 0.24 refuses a call
id reused within one run: for other arguments in a later response it raises
ModelBehaviorError before the tool runs; for the same arguments it skips the call as
completed. Across runs nothing refuses it. REWORD=1 rewords the note.

Environment: IDEM_URL (http://127.0.0.1:8082), IDEM_CRASH_AFTER_CHARGE=1 (SIGKILL right
after the first charge answered, before the run finished).
"""
import asyncio
import json
import os
import signal
import sys
import uuid
from dataclasses import dataclass

import httpx
from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:8082")


@dataclass
class AppRun:
    run_id: str  # the application's: stored with the request, reused when re-run


# --- the helper: the application's run id + tool + natural key, as the key idem reads ---
async def idem_post(ctx: ToolContext[AppRun], natural_key: str, path: str, body: dict) -> dict:
    intent = f"{ctx.context.run_id}:{ctx.tool_name}:{natural_key}"
    headers = {"X-Idem-Intent": intent, "X-Tool-Call-Id": ctx.tool_call_id}  # the latter: no key
    async with httpx.AsyncClient(timeout=30) as client:
        r = await client.post(IDEM_URL + path, json=body, headers=headers)
    out = {"intent": intent, "tool_call_id": ctx.tool_call_id, "status": r.status_code,
           "body": r.json(), "replayed": r.headers.get("idempotent-replayed") == "true"}
    if os.environ.get("IDEM_CRASH_AFTER_CHARGE") == "1":
        print(json.dumps({"crashed_after": out}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the tool ran; the run never finished
    return out
# -----------------------------------------------------------------------------------------


@function_tool
async def charge_card(ctx: ToolContext[AppRun], customer: str, amount: int, invoice: str,
                      note: str, idempotency_key: str) -> str:
    """Charge a customer's card for an invoice."""
    body = {"customer": customer, "amount": amount, "invoice": invoice, "note": note,
            "idempotency_key": idempotency_key}
    return json.dumps(await idem_post(ctx, invoice, "/charges", body))


class ScriptedModel(Model):
    """Asks for the scripted charges, then answers once it has their outputs."""

    def __init__(self, charges: list[dict]):
        self.charges = charges

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **_kwargs) -> ModelResponse:
        done = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if len(done) == len(self.charges):
            output = [ResponseOutputMessage(
                id="msg_1", role="assistant", status="completed", type="message",
                content=[ResponseOutputText(text=f"charged {len(done)} invoice(s)",
                                            type="output_text", annotations=[])])]
        else:  # one call per turn, for the next invoice not charged yet
            same = os.environ.get("SAME_CALL_ID") == "1"
            note = ("Monthly plan, renewal" if os.environ.get("REWORD") == "1"
                    else "Renewal of the monthly plan")
            args = {**self.charges[len(done)], "note": note, "idempotency_key": str(uuid.uuid4())}
            output = [ResponseFunctionToolCall(
                type="function_call", name="charge_card", status="completed", id=f"fc_{len(done)}",
                call_id="call_0" if same else f"call_{uuid.uuid4().hex[:12]}",
                arguments=json.dumps(args))]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("this example does not stream")


async def main() -> None:
    run_id, charges = sys.argv[1], json.loads(sys.argv[2])
    set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    agent = Agent(name="billing", instructions="Charge the invoices.", tools=[charge_card],
                  model=ScriptedModel(charges), model_settings=ModelSettings())
    result = await Runner.run(agent, "Charge my invoices.", context=AppRun(run_id),
                              run_config=RunConfig(tracing_disabled=True))
    outputs = [json.loads(item.output) for item in result.new_items
               if item.type == "tool_call_output_item"]
    print(json.dumps({"results": outputs, "final": result.final_output}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
