"""LangGraph: one charge per tool call, across a crash and a resume from the checkpoint.

The graph is `prompt → plan → charge`. The key idem sees is the thread id + the
super-step + the node (`langgraph_step`, `langgraph_node` in the run's metadata) + the
tool call's index within the node: all the same when the graph resumes from its
SqliteSaver checkpoint and re-runs the node. Not the task id: when the process dies
before the previous step's checkpoint is written (with durability `async`, LangGraph's
default, a race), the resume starts from an earlier checkpoint, re-runs that step, and
the node gets a new task id; step, node and thread stay the same.

    python agent.py THREAD_ID '[{"customer": "cus_1", "amount": 500}, ...]'

LOSE_PLAN_CHECKPOINT=1 makes that timing certain: the run checkpoints `prompt`
(durability sync, stopping after it), then continues with durability exit, so nothing of
`plan` is saved when the process dies in `charge`; the resume starts from `prompt`'s
checkpoint and asks the model again. Otherwise every step is checkpointed (sync) and the
resume re-runs only `charge`, with the same task id.

The scripted model (langchain-core's GenericFakeChatModel, no network) asks for one
charge_card tool call per item, with a fresh call id each time it is asked
(SAME_CALL_ID=1: every call `call_0`, as Gemini does) and a note (REWORD=1: reworded).

Environment: IDEM_URL (http://127.0.0.1:8082), LANGGRAPH_DB (langgraph-example.sqlite),
IDEM_CRASH_AFTER_CHARGE=1 (SIGKILL right after the first charge answered, before
LangGraph checkpoints the node).
"""
import json
import os
import signal
import sys
import uuid
from typing import Annotated, TypedDict

import httpx
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:8082")


# --- the helper: the runtime's id for this intent, as the key idem reads ----------------
def idem_post(config: RunnableConfig, index: int, path: str, body: dict) -> dict:
    md = config["metadata"]  # thread, super-step and node: stable across a resume
    intent = f"{md['thread_id']}:{md['langgraph_step']}:{md['langgraph_node']}:{index}"
    r = httpx.post(IDEM_URL + path, json=body, headers={"X-Idem-Intent": intent}, timeout=30)
    out = {"intent": intent, "status": r.status_code, "body": r.json(),
           "replayed": r.headers.get("idempotent-replayed") == "true", "note": body.get("note"),
           "task_id": md["langgraph_checkpoint_ns"].split(":")[-1]}  # for the README's point
    if os.environ.get("IDEM_CRASH_AFTER_CHARGE") == "1":
        print(json.dumps({"crashed_after": out}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the tool ran; no checkpoint of this node
    return out
# -----------------------------------------------------------------------------------------


class State(TypedDict):
    charges: list
    messages: Annotated[list[AnyMessage], add_messages]


def prompt(state: State) -> dict:
    return {"messages": [HumanMessage(f"Charge these: {json.dumps(state['charges'])}")]}


def plan(state: State) -> dict:
    same = os.environ.get("SAME_CALL_ID") == "1"
    note = "Monthly plan, renewal" if os.environ.get("REWORD") == "1" else "Renewal of the monthly plan"
    calls = [{"name": "charge_card", "args": {**c, "note": note}, "type": "tool_call",
              "id": "call_0" if same else f"call_{uuid.uuid4().hex[:12]}"}
             for c in state["charges"]]
    model = GenericFakeChatModel(messages=iter([AIMessage(content="", tool_calls=calls)]))
    return {"messages": [model.invoke(state["messages"])]}


def charge(state: State, config: RunnableConfig) -> dict:
    calls = state["messages"][-1].tool_calls
    return {"messages": [
        ToolMessage(json.dumps(idem_post(config, i, "/charges", call["args"])),
                    tool_call_id=call["id"])
        for i, call in enumerate(calls)]}


def main() -> None:
    thread_id, charges = sys.argv[1], json.loads(sys.argv[2])
    builder = StateGraph(State)
    builder.add_node("prompt", prompt)
    builder.add_node("plan", plan)
    builder.add_node("charge", charge)
    builder.add_edge(START, "prompt")
    builder.add_edge("prompt", "plan")
    builder.add_edge("plan", "charge")
    builder.add_edge("charge", END)
    with SqliteSaver.from_conn_string(os.environ.get("LANGGRAPH_DB", "langgraph-example.sqlite")) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread_id}}
        snapshot = graph.get_state(config)
        if snapshot.next:  # a checkpoint with work left: resume from it
            graph.invoke(None, config, durability="sync")
        elif not snapshot.values:  # a new thread
            start = {"charges": charges, "messages": []}
            if os.environ.get("LOSE_PLAN_CHECKPOINT") == "1":
                graph.invoke(start, config, durability="sync", interrupt_after=["prompt"])
                graph.invoke(None, config, durability="exit")  # saved only at the end
            else:
                graph.invoke(start, config, durability="sync")
        messages = graph.get_state(config).values["messages"]
    results = [json.loads(m.content) for m in messages if isinstance(m, ToolMessage)]
    print(json.dumps({"results": results}), flush=True)


if __name__ == "__main__":
    main()
