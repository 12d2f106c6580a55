"""The processes of a nemesis run, all private, on free loopback ports, in one work dir:
the store (a redis-server; a Sentinel set; or a PostgreSQL primary with a synchronous
streaming standby) and the idem replicas, each under libfaketime with a clock file of
its own. Store servers run under `storeclock.c` (built here with `cc`), whose clock
file `st-clock` steps: libfaketime cannot start Debian's redis-server (see that file).
Never the machine's shared instances (6379, 5432).

Every fault a process takes is checked to have happened (the scheduler fails the run
otherwise): a kill leaves the process reaped and its port closed, a freeze leaves every
process of its tree in state T, a clock step is read back from the process (the store's
own clock: Redis `TIME`, PostgreSQL `clock_timestamp()`; for a replica, which shows no
clock, libfaketime mapped into it, reading the file that holds the step).

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


def faked_env(clock_file, **extra):
    """The environment of a process whose wall clock follows `clock_file` (monotonic
    clocks stay real, so timers and leases on `Instant` do not move)."""
    return dict(os.environ, LD_PRELOAD=FAKETIME, FAKETIME_TIMESTAMP_FILE=clock_file,
                FAKETIME_NO_CACHE="1", FAKETIME_DONT_FAKE_MONOTONIC="1", **extra)


def store_env(workdir, clock_file):
    """The environment of a store server whose wall clock follows `clock_file`."""
    lib = os.path.join(workdir, "storeclock.so")
    if not os.path.exists(lib):
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "storeclock.c")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", lib + ".tmp", src], check=True)
        os.chmod(lib + ".tmp", 0o755)
        os.replace(lib + ".tmp", lib)
    return dict(os.environ, LD_PRELOAD=lib, NEMESIS_CLOCK_FILE=clock_file)


def write_clock(clock_file, offset_s):
    with open(clock_file + ".tmp", "w") as f:
        f.write(f"{offset_s:+d}s\n")
    os.chmod(clock_file + ".tmp", 0o644)
    os.replace(clock_file + ".tmp", clock_file)


def states(proc):
    """The state letters (R, S, T, Z…) of `proc`'s tree, from /proc."""
    out = []
    for pid in pids_of_tree(proc.pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                out.append(f.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            pass
    return out


def check_stopped(proc, what, stopped=True):
    """Raise unless every process of the tree is (or, `stopped=False`, none is) frozen."""
    deadline = time.monotonic() + 2.0
    while True:
        if proc is None or proc.poll() is not None:
            raise RuntimeError(f"{what}: not running")
        st = states(proc)
        live = [s for s in st if s not in "ZX"]   # an exited child not yet reaped
        if live and all((s == "T") == stopped for s in live):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: states {st} after {'SIGSTOP' if stopped else 'SIGCONT'}")
        time.sleep(0.02)


def check_dead(proc, port, what):
    """Raise unless the process was reaped and nothing listens on its port."""
    if proc is None or proc.poll() is None:
        raise RuntimeError(f"{what}: still running after SIGKILL")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return
    raise RuntimeError(f"{what}: port {port} still accepts connections after the kill")


def check_faked(proc, clock_file, offset_s, what, lib="libfaketime",
                var="FAKETIME_TIMESTAMP_FILE"):
    """Raise unless `lib` is mapped into `proc`, reads `clock_file` (named by `var`),
    and the file holds the step (what a process that shows no clock can be checked for)."""
    with open(f"/proc/{proc.pid}/maps") as f:
        if lib not in f.read():
            raise RuntimeError(f"{what}: {lib} is not loaded")
    with open(f"/proc/{proc.pid}/environ", "rb") as f:
        if f"{var}={clock_file}".encode() not in f.read().split(b"\0"):
            raise RuntimeError(f"{what}: does not read {clock_file}")
    with open(clock_file) as f:
        if f.read().strip() != f"{offset_s:+d}s":
            raise RuntimeError(f"{what}: clock file does not hold {offset_s:+d}s")


def check_clock(read_now, offset_s, what):
    """Raise unless the store's own clock (`read_now()`, Unix seconds) reads real time
    plus `offset_s` (±1.5 s) within 3 s."""
    deadline = time.monotonic() + 3.0
    while True:
        try:
            seen = read_now() - time.time()
        except (OSError, ValueError, IndexError, subprocess.SubprocessError) as e:
            seen = e
        if isinstance(seen, float) and abs(seen - offset_s) < 1.5:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: clock reads {seen!r} s off, not {offset_s:+d}")
        time.sleep(0.1)


def signal_tree(proc, sig):
    """`sig` to the process, then to its children. SIGSTOP stops the parent first and
    goes over the children again until no new one appears: a postmaster forks a backend
    per connection, and one forked while its children were listed escaped the freeze
    (PostgreSQL, seed 22: 69 backends running through an `st-pause`, caught by its check)."""
    if proc is None or proc.poll() is not None:
        return
    signalled = set()
    for _ in range(20 if sig == signal.SIGSTOP else 1):
        fresh = [pid for pid in pids_of_tree(proc.pid) if pid not in signalled]
        if not fresh:
            return
        for pid in fresh:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            signalled.add(pid)


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

    def set_clock(self, offset_s, check=False):
        write_clock(self.clock_file, offset_s)
        if check:
            check_faked(self.proc, self.clock_file, offset_s, f"replica {self.name}")

    def start(self, check=False):
        env = faked_env(self.clock_file, NO_COLOR="1",
                        RUST_LOG=os.environ.get("NEMESIS_RUST_LOG", "warn,idem::app=info"))
        self.proc = self.procs.start(self.name, [self.binary, "serve", "-c", self.config], env)
        if check:   # up again: its health endpoint answers (ready needs the store)
            def up():
                if self.proc.poll() is not None:
                    raise RuntimeError(f"replica {self.name} exited: {self.proc.returncode}")
                with urllib.request.urlopen(self.admin_url("/healthz"), timeout=1) as r:
                    return r.status == 200
            wait_for(f"idem {self.name} restarted", up, 20)

    def wait_ready(self, timeout=30.0):
        def ready():
            with urllib.request.urlopen(self.admin_url("/readyz"), timeout=1) as r:
                return r.status == 200
        wait_for(f"idem {self.name}", ready, timeout)

    def kill(self, check=False):
        self.procs.kill(self.proc)
        if check:
            check_dead(self.proc, self.port, f"replica {self.name}")

    def pause(self, check=False):
        signal_tree(self.proc, signal.SIGSTOP)
        if check:
            check_stopped(self.proc, f"replica {self.name}")

    def resume(self, check=False):
        signal_tree(self.proc, signal.SIGCONT)
        if check:
            check_stopped(self.proc, f"replica {self.name}", stopped=False)


class Redis:
    """`--store redis`: one redis-server, AOF with `appendfsync always`."""

    def __init__(self, procs, workdir, name="redis", replicaof=None):
        self.procs, self.name, self.port = procs, name, free_port()
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.replicaof, self.proc = replicaof, None
        self.clock_file = os.path.join(workdir, f"{name}.clock")
        write_clock(self.clock_file, 0)
        self.env = store_env(workdir, self.clock_file)
        self.start()

    def start(self):
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--protected-mode", "no", "--dir", self.dir, "--save", "",
                "--appendonly", "yes", "--appendfsync", "always",
                "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"]
        if self.replicaof:
            argv += ["--replicaof", "127.0.0.1", str(self.replicaof)]
        self.proc = self.procs.start(self.name, argv, self.env)
        wait_for(self.name, lambda: "PONG" in redis_cmd(self.port, "PING"))

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
        """The server's own clock (`TIME`), Unix seconds."""
        parts = [l for l in redis_cmd(self.port, "TIME").split("\r\n") if l and l[0] not in "*$"]
        return int(parts[0]) + int(parts[1]) / 1e6

    def set_clock(self, offset_s, check=False):
        write_clock(self.clock_file, offset_s)
        if check:
            check_clock(self.now, offset_s, self.name)

    def store_yaml(self, via=lambda port: port):
        return (f"store:\n  backend: redis\n  redis:\n"
                f"    url: redis://127.0.0.1:{via(self.port)}/0\n"
                "    op_timeout: 250ms\n  on_error: reject\n")

    # The scheduler's store faults.
    def restart_target(self):
        return self

    def pause_target(self):
        return self

    def clock_target(self):
        return self

    def link_ports(self):
        """The servers idem connects to, each reached through a link of its own, and the
        link probe (request, answer prefix)."""
        return [self.port], (b"PING\r\n", b"+PONG")

    def link_probe_port(self):
        return self.port
