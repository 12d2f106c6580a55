"""The callers: a stream of intents, each sent as a burst of concurrent duplicates and
then a few late duplicates, spread over the three replicas, on three routes:
- `hold`  (POST /hold/{id}, key from the path, `on_concurrent: conflict`, `on_unknown: hold`)
- `retry` (POST /retry/{id}, key from the `x-intent` header, `on_concurrent: wait`,
           `on_unknown: retry`; the upstream deduplicates its key)
- `reconcile` (POST /reconcile/{id}, key from the path, `on_concurrent: conflict`,
           `on_unknown: reconcile` with the upstream's search)
Each caller behaves like an agent: it repeats on 409 `request_in_progress`, 503,
504, broken connections (moving to another replica) and 409 `outcome_unknown` with a
`Retry-After` (a reconciliation that could not ask the upstream), and stops at a 2xx,
at 409 `outcome_unknown` without one, at any other answer, or after CALLER_PATIENCE
seconds. Every answer
is recorded with the run clock, for the checker. The shape of the stream (routes,
duplicates, replicas, delays) comes from the seed.
"""

import http.client
import json
import random
import threading
import time

CALLER_PATIENCE = 20.0
HTTP_TIMEOUT = 10.0


class Answer:
    __slots__ = ("at", "caller", "replica", "status", "code", "body")

    def __init__(self, at, caller, replica, status, code, body):
        self.at, self.caller, self.replica = at, caller, replica
        self.status, self.code, self.body = status, code, body


class Intent:
    def __init__(self, n, route, created):
        self.n, self.route, self.created = n, route, created
        self.id = f"i{n:05d}"
        self.key = f"{route}:{self.id}"
        self.path = f"/{route}/{self.id}"
        self.body = json.dumps({"amount": 100 + n, "intent": self.id}).encode()
        self.answers = []
        self.lock = threading.Lock()
        self.sent = 0
        self.final = None    # the settling pass' answer (check.py)

    def record(self, answer):
        with self.lock:
            self.answers.append(answer)


def send(replica, intent, caller, timeout=HTTP_TIMEOUT):
    """One POST; returns (status, problem code, body). Status 0: no HTTP answer. A 409
    `outcome_unknown` that says when to try again has the code `outcome_unknown+retry`."""
    headers = {"content-type": "application/json", "x-intent": intent.key,
               "x-nemesis-replica": replica.name, "x-nemesis-caller": caller}
    conn = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=timeout)
    try:
        conn.request("POST", intent.path, intent.body, headers)
        resp = conn.getresponse()
        body = resp.read()
        code = ""
        if resp.status >= 400:
            try:
                code = json.loads(body).get("code", "")
            except ValueError:
                pass
            if code == "outcome_unknown" and resp.getheader("retry-after"):
                code += "+retry"
        return resp.status, code, body
    except (OSError, http.client.HTTPException) as e:
        return 0, type(e).__name__, b""
    finally:
        conn.close()


def retryable(status, code):
    return (status == 0 or status == 503 or status == 504
            or (status == 409 and code in ("request_in_progress", "outcome_unknown+retry")))


class Workload:
    def __init__(self, seed, replicas, clock, duration, rate):
        self.rng = random.Random(seed * 7919 + 1)
        self.replicas, self.clock = replicas, clock
        self.duration, self.rate = duration, rate
        self.intents, self.threads = [], []
        self.duplicates = 0

    def caller(self, intent, first_replica, name, delay):
        time.sleep(delay)
        deadline = self.clock() + CALLER_PATIENCE
        r = first_replica
        while True:
            replica = self.replicas[r % len(self.replicas)]
            with intent.lock:
                intent.sent += 1
            status, code, body = send(replica, intent, name)
            intent.record(Answer(self.clock(), name, replica.name, status, code, body))
            if not retryable(status, code) or self.clock() > deadline:
                return
            r += 1 if status in (0, 503) else 0
            time.sleep(1.0 if status == 504 or code.endswith("+retry") else 0.25)

    def run(self):
        """Start intents at `rate` per second until `duration`; returns without waiting."""
        n = 0
        start = self.clock()
        while self.clock() - start < self.duration:
            n += 1
            draw = self.rng.random()
            route = "retry" if draw < 0.35 else "hold" if draw < 0.7 else "reconcile"
            intent = Intent(n, route, self.clock())
            self.intents.append(intent)
            burst = self.rng.randint(2, 4)
            late = self.rng.randint(0, 2)
            for d in range(burst + late):
                delay = 0.0 if d < burst else self.rng.uniform(1.0, 12.0)
                first = self.rng.randrange(len(self.replicas))
                t = threading.Thread(target=self.caller, daemon=True,
                                     args=(intent, first, f"c{n}.{d}", delay))
                t.start()
                self.threads.append(t)
            self.duplicates += burst + late - 1
            time.sleep(self.rng.expovariate(self.rate))

    def wait(self):
        for t in self.threads:
            t.join()
