"""The processes of a nemesis run, all private, on free loopback ports, in one work dir:
the store (a redis-server; a Sentinel set; or a PostgreSQL primary with a synchronous
streaming standby) and the idem replicas, each under libfaketime with a clock file of
its own. Never the machine's shared instances (6379, 5432).

Stores keep what they acknowledged across a restart (Redis: `appendfsync always`;
PostgreSQL: its WAL), so a store restart loses no reservation: a second execution
after one is a finding, not a documented limit.
"""

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, test, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if test():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what}: not ready within {timeout:.0f} s")


def redis_cmd(port, *args, timeout=2.0):
    """One command as raw RESP; returns the reply's text (enough for PING/INFO/ROLE)."""
    req = f"*{len(args)}\r\n" + "".join(f"${len(str(a))}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(req.encode())
        time.sleep(0.02)
        s.settimeout(0.3)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except socket.timeout:
            pass
    return out.decode(errors="replace")


def pids_of_tree(pid):
    """`pid` and its direct children (a postmaster's backends), from /proc."""
    pids = [pid]
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    pids.append(int(stat.split("/")[2]))
        except (OSError, IndexError, ValueError):
            pass
    return pids


def signal_tree(proc, sig):
    if proc is not None and proc.poll() is None:
        for pid in pids_of_tree(proc.pid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


class Procs:
    """Every child process of the run, its output in WORKDIR/NAME.log; all killed at the end."""

    def __init__(self, workdir):
        self.workdir, self.all = workdir, []

    def start(self, name, argv, env=None):
        log = open(os.path.join(self.workdir, f"{name}.log"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        self.all.append(p)
        return p

    def kill(self, proc):
        if proc is not None and proc.poll() is None:
            pids = pids_of_tree(proc.pid)
            for sig in (signal.SIGCONT, signal.SIGKILL):
                for pid in pids:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
            proc.wait()

    def stop_all(self):
        for p in reversed(self.all):
            self.kill(p)


class Replica:
    """One `idem serve` under libfaketime; its wall clock is offset by writing its file."""

    def __init__(self, name, procs, binary, workdir, config_body):
        self.name, self.procs, self.binary = name, procs, binary
        self.port, self.admin = free_port(), free_port()
        self.clock_file = os.path.join(workdir, f"{name}.faketime")
        self.config = os.path.join(workdir, f"{name}.yaml")
        with open(self.config, "w") as f:
            f.write(f"listen: 127.0.0.1:{self.port}\nadmin:\n  listen: 127.0.0.1:{self.admin}\n")
            f.write(config_body)
        if "backend: postgres" in config_body:
            # Serving runs no DDL: the table is created by `idem migrate`, as an operator
            # runs it before serving (each replica's run after the first changes nothing).
            subprocess.run([binary, "migrate", "-c", self.config], check=True,
                           capture_output=True)
        self.set_clock(0)
        self.proc = None
        self.start()

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}{path}"

    def admin_url(self, path=""):
        return f"http://127.0.0.1:{self.admin}{path}"

    def set_clock(self, offset_s):
        with open(self.clock_file + ".tmp", "w") as f:
            f.write(f"{offset_s:+d}s\n")
        os.replace(self.clock_file + ".tmp", self.clock_file)

    def start(self):
        env = dict(os.environ, LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=self.clock_file,
                   FAKETIME_NO_CACHE="1", FAKETIME_DONT_FAKE_MONOTONIC="1",
                   RUST_LOG=os.environ.get("NEMESIS_RUST_LOG", "warn,idem::app=info"),
                   NO_COLOR="1")
        self.proc = self.procs.start(self.name, [self.binary, "serve", "-c", self.config], env)

    def wait_ready(self, timeout=30.0):
        def ready():
            with urllib.request.urlopen(self.admin_url("/readyz"), timeout=1) as r:
                return r.status == 200
        wait_for(f"idem {self.name}", ready, timeout)

    def kill(self):
        self.procs.kill(self.proc)

    def pause(self):
        signal_tree(self.proc, signal.SIGSTOP)

    def resume(self):
        signal_tree(self.proc, signal.SIGCONT)


class Redis:
    """`--store redis`: one redis-server, AOF with `appendfsync always`."""

    def __init__(self, procs, workdir, name="redis", replicaof=None):
        self.procs, self.name, self.port = procs, name, free_port()
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.replicaof, self.proc = replicaof, None
        self.start()

    def start(self):
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--protected-mode", "no", "--dir", self.dir, "--save", "",
                "--appendonly", "yes", "--appendfsync", "always",
                "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"]
        if self.replicaof:
            argv += ["--replicaof", "127.0.0.1", str(self.replicaof)]
        self.proc = self.procs.start(self.name, argv)
        wait_for(self.name, lambda: "PONG" in redis_cmd(self.port, "PING"))

    def kill(self):
        self.procs.kill(self.proc)

    def pause(self):
        signal_tree(self.proc, signal.SIGSTOP)

    def resume(self):
        signal_tree(self.proc, signal.SIGCONT)

    def store_yaml(self):
        return (f"store:\n  backend: redis\n  redis:\n    url: redis://127.0.0.1:{self.port}/0\n"
                "    op_timeout: 250ms\n  on_error: reject\n")

    # The scheduler's store faults.
    def restart_target(self):
        return self

    def pause_target(self):
        return self
