"""The operator: while the traffic runs, a person settles unknown outcomes through the
admin API (SPEC §1 "Unknown outcomes"), as a careful one would. Every 2–4 s they list
`GET /v1/unknown` on one replica's admin port (the next one if it does not answer), pick
some of the listed intents and look each call up in the upstream's own records:
- executed: resolve it `completed` with the upstream's recorded answer (201, its body);
- never executed, and listed for at least SAFE_WAIT (longer than any link delay, so a
  request written before its lease ended has arrived by then): resolve it
  `not_executed`, and the next repeat forwards it once;
- never executed but listed only just now: look again later.
A resolve that finds the record no longer unknown (a repeat or another resolve came
first) is a 409 that changes nothing; it is counted. Every resolution is kept for the
checker and the history.
"""

import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from links import MAX_DELAY

SAFE_WAIT = MAX_DELAY + 2.0


class Resolution:
    __slots__ = ("at", "route", "key", "attempt", "outcome", "status", "replica", "execution")

    def __init__(self, at, route, key, attempt, outcome, status, replica, execution):
        self.at, self.route, self.key, self.attempt = at, route, key, attempt
        self.outcome, self.status, self.replica = outcome, status, replica
        self.execution = execution   # the execution whose answer was recorded, or None


class Operator:
    def __init__(self, seed, replicas, upstream, clock):
        self.rng = random.Random(seed * 31 + 7)
        self.replicas, self.upstream, self.clock = replicas, upstream, clock
        self.first_seen = {}      # (route, key, attempt) -> run clock
        self.chosen = {}          # (route, key, attempt) -> whether to settle it
        self.resolutions = []
        self.listings = self.listing_errors = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stopping.set()
        self.thread.join()

    def run(self):
        while not self.stopping.wait(self.rng.uniform(2.0, 4.0)):
            first = self.rng.randrange(len(self.replicas))
            for i in range(len(self.replicas)):
                replica = self.replicas[(first + i) % len(self.replicas)]
                listing = self.list(replica)
                if listing is not None:
                    self.listings += 1
                    self.settle(replica, listing)
                    break
            else:
                self.listing_errors += 1

    def list(self, replica):
        try:
            with urllib.request.urlopen(replica.admin_url("/v1/unknown?limit=1000"),
                                        timeout=5) as resp:
                return json.loads(resp.read())["unknown"]
        except (OSError, ValueError, KeyError):
            return None

    def settle(self, replica, listing):
        now = self.clock()
        for item in listing:
            ident = (item["route"], item["key"], item.get("attempt", 1))
            seen = self.first_seen.setdefault(ident, now)
            if ident not in self.chosen:
                self.chosen[ident] = self.rng.random() < 0.5
            if not self.chosen[ident] or self.stopping.is_set():
                continue
            with self.upstream.lock:
                runs = list(self.upstream.executions.get(item["key"], []))
            if runs:
                e = runs[0]
                self.resolve(replica, ident, {"outcome": "completed", "status": 201,
                                              "headers": {"content-type": "application/json"},
                                              "body": e.body.decode()}, e.n)
            elif now - seen >= SAFE_WAIT:
                self.resolve(replica, ident, {"outcome": "not_executed"}, None)

    def resolve(self, replica, ident, body, execution):
        route, key, attempt = ident
        path = f"/v1/keys/{urllib.parse.quote(route, safe='')}/" \
               f"{urllib.parse.quote(key, safe='')}/resolve"
        req = urllib.request.Request(replica.admin_url(path), data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"},
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=3) as resp:
                status = resp.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:
            return   # the replica went away: the intent is listed again next time
        self.resolutions.append(Resolution(self.clock(), route, key, attempt, body["outcome"],
                                           status, replica.name, execution))
        if status in (200, 409):
            self.chosen[ident] = False   # settled, or no longer unknown: done with it

    def counts(self):
        out = {}
        for r in self.resolutions:
            label = f"{r.outcome} {r.status}"
            out[label] = out.get(label, 0) + 1
        return out
