"""DBOS: one charge per workflow step, across a crash and DBOS's recovery.

The key idem sees is the DBOS workflow id + the step's id within the workflow
(`DBOS.workflow_id`, `DBOS.step_id`): recovery re-runs an unfinished step with the same
two, and a new workflow (a new intent) has a new id.

    python agent.py WORKFLOW_ID CUSTOMER AMOUNT

Environment: IDEM_URL (http://127.0.0.1:8082), DBOS_SYSTEM_DATABASE_URL (a PostgreSQL
URL, or sqlite:///FILE; default sqlite:///dbos-example.sqlite), IDEM_CRASH_AFTER_CHARGE=1
(SIGKILL this process right after the charge answered, before DBOS records the step).
"""
import json
import os
import signal
import sys

import httpx
from dbos import DBOS, DBOSConfig, SetWorkflowID

IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:8082")


# --- the helper: the runtime's id for this intent, as the key idem reads ----------------
def idem_post(path: str, body: dict) -> dict:
    intent = f"{DBOS.workflow_id}:{DBOS.step_id}"  # same on recovery, new per workflow
    r = httpx.post(IDEM_URL + path, json=body, headers={"X-Idem-Intent": intent}, timeout=30)
    out = {"intent": intent, "status": r.status_code, "body": r.json(),
           "replayed": r.headers.get("idempotent-replayed") == "true"}
    if os.environ.get("IDEM_CRASH_AFTER_CHARGE") == "1":
        print(json.dumps({"crashed_after": out}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # the tool ran; DBOS has not recorded it
    return out
# -----------------------------------------------------------------------------------------


@DBOS.step()
def charge_card(customer: str, amount: int) -> dict:
    return idem_post("/charges", {"customer": customer, "amount": amount})


@DBOS.workflow()
def checkout(customer: str, amount: int) -> dict:
    return charge_card(customer, amount)


def main() -> None:
    workflow_id, customer, amount = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config: DBOSConfig = {
        "name": "idem-dbos-example",
        "system_database_url": os.environ.get(
            "DBOS_SYSTEM_DATABASE_URL", "sqlite:///dbos-example.sqlite"),
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()  # recovers this executor's PENDING workflows (a crashed run)
    if DBOS.get_workflow_status(workflow_id) is None:
        with SetWorkflowID(workflow_id):
            handle = DBOS.start_workflow(checkout, customer, amount)
    else:
        handle = DBOS.retrieve_workflow(workflow_id)  # resumed by recovery
    print(json.dumps(handle.get_result()), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main()
