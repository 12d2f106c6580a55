"""The replicated stores of a nemesis run (`--store sentinel`, `--store postgres`); the
standalone Redis is `cluster.Redis`. Each store offers the scheduler the same faults:
`restart_target()` (a server to SIGKILL and start again), `pause_target()` (a server to
SIGSTOP/SIGCONT), `clock_target()` (the server whose clock decides leases: its wall
clock is stepped), `link_ports()` (the servers idem reaches through a link proxy) and
`failover()` (lose the primary for good: the Sentinel set promotes a replica;
PostgreSQL's synchronous standby is promoted with `pg_ctl promote`; either is checked
to have happened).

The Sentinel set has no store links: the sentinels hand idem the servers' own
addresses, so a proxy in front of them would carry nothing but the discovery.
"""

import glob
import os
import shutil
import struct
import subprocess
import time

from cluster import (Redis, check_clock, check_dead, check_faked, check_stopped, free_port,
                     redis_cmd, signal_tree, store_env, wait_for, write_clock)
import signal

MASTER = "mymaster"


class SentinelSet:
    """A master with two replicas (AOF, `wait_replicas: 1`) and three sentinels."""

    def __init__(self, procs, workdir):
        self.procs, self.workdir = procs, workdir
        master = Redis(procs, workdir, "redis-0")
        self.servers = [master] + [Redis(procs, workdir, f"redis-{i}", replicaof=master.port)
                                   for i in (1, 2)]
        self.sentinels = []
        for i in range(3):
            port = free_port()
            d = os.path.join(workdir, f"sentinel-{i}")
            os.makedirs(d, exist_ok=True)
            conf = os.path.join(d, "sentinel.conf")
            with open(conf, "w") as f:
                f.write(f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {d}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {master.port} 2\n"
                        f"sentinel down-after-milliseconds {MASTER} 1000\n"
                        f"sentinel failover-timeout {MASTER} 10000\n"
                        f"sentinel parallel-syncs {MASTER} 5\n")
            self.procs.start(f"sentinel-{i}", ["redis-server", conf, "--sentinel"])
            self.sentinels.append(port)
        redis_cmd(master.port, "SET", "probe", "1")

        def formed():
            repl = redis_cmd(master.port, "INFO", "replication")
            online = repl.count("state=online")
            return online == 2 and all(
                "slaves=2,sentinels=3" in redis_cmd(p, "INFO", "sentinel")
                for p in self.sentinels)
        wait_for("sentinel set", formed, 40)

    def master(self):
        for p in self.sentinels:
            try:
                reply = redis_cmd(p, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
                port = int([l for l in reply.split("\r\n") if l and l[0] not in "*$"][1])
                return next(s for s in self.servers if s.port == port)
            except (OSError, ValueError, IndexError, StopIteration):
                continue
        return self.servers[0]

    def store_yaml(self, via=None):
        nodes = ", ".join(f"redis://127.0.0.1:{p}" for p in self.sentinels)
        return ("store:\n  backend: redis\n  redis:\n    mode: sentinel\n"
                f"    url: redis://127.0.0.1:1/0\n    nodes: [{nodes}]\n"
                f"    sentinel_master: {MASTER}\n    op_timeout: 250ms\n    wait_replicas: 1\n"
                "  on_error: reject\n")

    def restart_target(self):
        """A running replica (restarted as a replica of the current master)."""
        master = self.master()
        for s in self.servers:
            if s is not master and s.proc.poll() is None:
                s.replicaof = master.port
                return s
        return None

    def pause_target(self):
        return self.master()

    def clock_target(self):
        return self.master()

    def link_ports(self):
        return [], None

    def failover(self):
        """Kill the master for good; the sentinels promote a replica. Returns when done,
        raises if no replica took over within 30 s."""
        old = self.master()
        old.kill(check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            new = self.master()
            if new is not old and "master" in redis_cmd(new.port, "ROLE"):
                return
            time.sleep(0.1)
        raise RuntimeError("sentinel failover: no replica promoted within 30 s")


def pg_bin(name):
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    raise SystemExit("PostgreSQL server binaries not found (scripts/test.sh installs them)")


def as_postgres(argv):
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]


class Pg:
    """One PostgreSQL server over a data directory of its own (run as `postgres` when root)."""

    def __init__(self, procs, workdir, name, settings, basebackup_of=None):
        self.procs, self.name, self.port, self.settings = procs, name, free_port(), settings
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        if basebackup_of is None:
            cmd = [pg_bin("initdb"), "-D", self.data, "-A", "trust", "-U", "postgres",
                   "-E", "UTF8", "--no-sync"]
        else:
            cmd = [pg_bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(basebackup_of.port),
                   "-U", "postgres", "-D", self.data, "-R", "-X", "stream", "--no-sync"]
        subprocess.run(as_postgres(cmd), check=True, capture_output=True)
        self.proc = None
        self.clock_file = os.path.join(workdir, f"{name}.clock")
        write_clock(self.clock_file, 0)
        self.env = store_env(workdir, self.clock_file)
        # Set on a primary with a synchronous standby: back only once a commit returns.
        self.commits_sync = False
        self.start()

    def start(self):
        argv = [pg_bin("postgres"), "-D", self.data, "-p", str(self.port), "-k", self.dir,
                "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"]
        for s in self.settings:
            argv += ["-c", s]
        self.proc = self.procs.start(self.name, as_postgres(argv), self.env)
        wait_for(self.name, lambda: subprocess.run(
            [pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"]).returncode == 0)
        if self.commits_sync:
            # Accepting connections is not being back: a restarted primary's commits wait
            # for the synchronous standby to reconnect (seconds), and until then idem's
            # writes time out. The fault ends when a write commits (check.py's "store
            # unreachable" is measured to here).
            wait_for(f"{self.name} commits", self.commits)

    def commits(self):
        try:
            subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                            "-d", "postgres", "-AtX", "-c",
                            "CREATE TABLE IF NOT EXISTS nemesis_probe (at timestamptz); "
                            "INSERT INTO nemesis_probe VALUES (now())"],
                           capture_output=True, check=True, timeout=1.0)
            return True
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return False

    def kill(self, check=False):
        self.procs.kill(self.proc)
        if check:
            check_dead(self.proc, self.port, self.name)

    def pause(self, check=False):
        signal_tree(self.proc, signal.SIGSTOP)
        if check:
            check_stopped(self.proc, self.name)

    def resume(self, check=False):
        signal_tree(self.proc, signal.SIGCONT)
        if check:
            check_stopped(self.proc, self.name, stopped=False)

    def now(self):
        """The server's own clock (`clock_timestamp()`), Unix seconds."""
        return float(self.sql("SELECT extract(epoch FROM clock_timestamp())"))

    def set_clock(self, offset_s, check=False):
        write_clock(self.clock_file, offset_s)
        if not check:
            return
        try:
            check_clock(self.now, offset_s, self.name)
        except RuntimeError as e:
            if "CalledProcessError" not in str(e):
                raise
            # No connection to ask on (every slot taken: see docs/reliability.md, the
            # PostgreSQL connection pile-up): check the preload instead, as for a replica.
            check_faked(self.proc, self.clock_file, offset_s, self.name, lib="storeclock",
                        var="NEMESIS_CLOCK_FILE")

    def sql(self, query):
        return subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                               "-d", "postgres", "-AtX", "-c", query],
                              capture_output=True, text=True, check=True).stdout.strip()


class PgPair:
    """A primary and a synchronous streaming standby; idem's URL names both hosts."""

    def __init__(self, procs, workdir):
        os.chmod(workdir, 0o711)  # mkdtemp's 0700 would lock the postgres user out
        self.primary = Pg(procs, workdir, "pg-primary", [])
        self.standby = Pg(procs, workdir, "pg-standby", ["cluster_name=standby"],
                          basebackup_of=self.primary)
        self.primary.sql("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
        self.primary.sql("SELECT pg_reload_conf()")
        wait_for("synchronous standby", lambda: self.primary.sql(
            "SELECT sync_state FROM pg_stat_replication") == "sync")
        self.primary.commits_sync = True
        self.promoted = False

    def store_yaml(self, via=lambda port: port):
        return ("store:\n  backend: postgres\n  postgres:\n"
                f"    url: postgres://postgres@127.0.0.1:{via(self.primary.port)},"
                f"127.0.0.1:{via(self.standby.port)}/postgres?target_session_attrs=read-write\n"
                "    op_timeout: 500ms\n  on_error: reject\n")

    def current(self):
        return self.standby if self.promoted else self.primary

    def restart_target(self):
        return self.current()

    def pause_target(self):
        return self.current()

    def clock_target(self):
        return self.current()

    def link_ports(self):
        # The probe: an SSLRequest, which a server without TLS answers with "N".
        return [self.primary.port, self.standby.port], (struct.pack("!ii", 8, 80877103), b"N")

    def link_probe_port(self):
        return self.current().port

    def failover(self):
        """Kill the primary for good and promote the synchronous standby (checked: it
        leaves recovery)."""
        self.primary.kill(check=True)
        subprocess.run(as_postgres([pg_bin("pg_ctl"), "promote", "-w", "-D", self.standby.data]),
                       check=True, capture_output=True)
        self.promoted = True
        if self.standby.sql("SELECT pg_is_in_recovery()") != "f":
            raise RuntimeError("postgres failover: the standby is still in recovery")
