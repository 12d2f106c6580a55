"""The proxies bench/callgrind.py measures, each started under `valgrind --tool=callgrind`
on a free loopback port in front of the same bench upstream: idem, nginx, an optional
peer idempotency proxy, and the floor of idem's own stack (bench/floor).

Each `start_*` returns a `Target`: the port to send to, the path to send (a peer may
route by path) and how to stop it. valgrind follows only the process it starts
(`--trace-children=no`, its default), so the count is the proxy's own user-space
instructions, every thread included, and nothing of the client, the upstream or Redis.
"""

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

import run

# Under valgrind a process starts 20–50× slower than natively; on a busy machine the
# default 10 s of run.wait_port is not always enough.
START_TIMEOUT = 60.0


class Target:
    def __init__(self, proc, port, path=None, stop_signal=signal.SIGTERM):
        self.proc, self.port, self.path, self.stop_signal = proc, port, path, stop_signal

    def stop(self):
        """Signal until the process exits (valgrind writes the counts on exit), up to a
        minute. nginx's single process can miss a signal that lands just before it
        blocks in epoll_wait (seen 2 runs in 10 under valgrind); a new connection
        wakes it to look at the flag again, and the signal is sent again."""
        p = self.proc.p
        for _ in range(12):
            if p.poll() is not None:
                break
            signal_target(p.pid, self.stop_signal)
            try:
                p.wait(5)
                break
            except subprocess.TimeoutExpired:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                except OSError:
                    pass
        self.proc.stop(signal.SIGKILL, timeout=10)
        if p.returncode == -signal.SIGKILL:
            raise RuntimeError(f"{self.proc.name} did not exit on {self.stop_signal!r}; "
                               f"see {self.proc.log_path}")


def signal_target(pid, sig):
    """Signal the measured process: under strace it is strace's child (strace, sent a
    fatal signal, would kill it before it could exit cleanly)."""
    if COUNTER["tool"] == "strace":
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            children = []
        for child in children:
            os.kill(child, sig)
        if children:
            return
    os.kill(pid, sig)


def wait_listening(proc, port):
    """Wait for `port` while `proc` lives; its output's tail in the error otherwise."""
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline and proc.p.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    proc.stop(signal.SIGKILL)
    with open(proc.log_path, errors="replace") as f:
        tail = f.read()[-2000:]
    sys.exit(f"{proc.name} did not listen on 127.0.0.1:{port} "
             f"(exit status {proc.p.returncode}); its output:\n{tail}")


# What counts a process: callgrind (instructions), or `strace -c` (system calls, with
# bench/callgrind.py --syscalls). Both write their totals to `out_file` on exit.
COUNTER = {"tool": "callgrind"}


def under_callgrind(out_file, argv):
    if COUNTER["tool"] == "strace":
        return ["strace", "-f", "-c", "-o", out_file, *argv]
    return ["valgrind", "--tool=callgrind", "--quiet",
            f"--callgrind-out-file={out_file}", *argv]


def start_idem(ctx, store, out_file, env=None, store_extra=""):
    """idem, one worker, through a wrapper script: run.Idem takes a binary path."""
    wrapper = os.path.join(ctx["workdir"], "idem-under-callgrind.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec " + " ".join(under_callgrind(out_file, [ctx["idem"]]))
                + ' "$@"\n')
    os.chmod(wrapper, stat.S_IRWXU)
    idem = run.Idem({"idem": wrapper}, ctx["workdir"], ctx["upstream_port"], store,
                    redis=ctx["redis"], workers=1, env=env, store_extra=store_extra)
    return Target(idem.proc, idem.port)


def start_floor(ctx, mode, out_file):
    """The floor of idem's own stack (bench/floor): `passthrough`, `fresh` or `replay`,
    in front of the same upstream and, but for passthrough, the same Redis."""
    port = run.free_port()
    argv = [ctx["floor"], "--mode", mode, "--listen", f"127.0.0.1:{port}",
            "--upstream", f"127.0.0.1:{ctx['upstream_port']}"]
    if mode != "passthrough":
        argv += ["--redis", ctx["redis"].url()]
    proc = run.Proc(f"floor-{mode}", under_callgrind(out_file, argv), ctx["workdir"])
    wait_listening(proc, port)
    return Target(proc, port)


# One process that is both master and worker (`master_process off`), so valgrind,
# which does not follow forks here, counts the process that serves; otherwise as
# bench/run.py's nginx: upstream keepalive, HTTP/1.1 upstream, access log off.
NGINX_CONF = """\
{user}
worker_processes 1;
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    upstream up {{
        server 127.0.0.1:{upstream};
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def start_nginx(ctx, out_file):
    port = run.free_port()
    d = os.path.join(ctx["workdir"], f"nginx-{port}")
    os.makedirs(d, exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=d, port=port, upstream=ctx["upstream_port"],
                                  user="user root;" if os.geteuid() == 0 else ""))
    argv = under_callgrind(out_file, ["nginx", "-p", d, "-c", conf, "-e", f"{d}/error.log"])
    proc = run.Proc("nginx", argv, ctx["workdir"])
    wait_listening(proc, port)
    # SIGQUIT: graceful exit, the single process returns from its cycle and exits.
    return Target(proc, port, stop_signal=signal.SIGQUIT)


# The defaults fit ldclabs/idempotent-proxy's server (`cargo build --release -p
# idempotent-proxy-server`): it reads its settings from the environment, panics without
# a `.env` file in its working directory, and sends `/URL_<NAME>` to the URL in the
# variable `URL_<NAME>`; the key is the `Idempotency-Key` header, stored in Redis.
PEER_ENV = [
    "SERVER_ADDR=127.0.0.1:{port}",
    "REDIS_URL={redis}",
    "URL_IDEM_BENCH=http://{upstream}/charges",
    "LOG_LEVEL=warn",
]
PEER_PATH = "/URL_IDEM_BENCH"

PEER_HELP = f"""\
peer (--peer-bin): another idempotency proxy, measured on fresh intents on the same
Redis exactly as idem is (N vs 2N requests, one keep-alive connection, unique
Idempotency-Key per request, every answer must be 2xx). It is started as
  <peer-bin> [--peer-arg ARG ...]
with the environment --peer-env K=V (repeatable), in a fresh directory that holds an
empty .env file, and sent POSTs to --peer-path. Placeholders in ARG and V: {{port}} (the
port it must listen on, 127.0.0.1), {{upstream}} (the bench upstream, host:port),
{{redis}} (redis://127.0.0.1:P/0), {{dir}} (its directory). Defaults, for
ldclabs/idempotent-proxy's idempotent-proxy-server: no arguments,
--peer-path {PEER_PATH}, and the environment
{''.join(f'  {e}' + chr(10) for e in PEER_ENV)}"""


def check_peer(path):
    """Fail before anything starts if the peer binary cannot be run."""
    if not os.path.isfile(path):
        sys.exit(f"--peer-bin {path}: no such file (build the peer first, e.g. "
                 "cargo build --release -p idempotent-proxy-server)")
    if not os.access(path, os.X_OK):
        sys.exit(f"--peer-bin {path}: not executable")


def start_peer(ctx, args, out_file):
    port = run.free_port()
    d = os.path.join(ctx["workdir"], f"peer-{port}")
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, ".env"), "w").close()
    values = {"port": port, "upstream": f"127.0.0.1:{ctx['upstream_port']}",
              "redis": ctx["redis"].url(), "dir": d}
    env = {}
    for item in args.peer_env or PEER_ENV:
        k, sep, v = item.partition("=")
        if not sep:
            sys.exit(f"--peer-env {item}: expected K=V")
        env[k] = v.format(**values)
    argv = [os.path.abspath(args.peer_bin), *(a.format(**values) for a in args.peer_arg)]
    proc = run.Proc("peer", under_callgrind(out_file, argv), ctx["workdir"], env=env, cwd=d)
    wait_listening(proc, port)
    return Target(proc, port, path=args.peer_path)


def ensure_tools(need_nginx, packages=None):
    """Install what is missing from Debian, as bench/run.sh does; `packages` (tool:
    package) replaces the default valgrind and redis-server."""
    packages = dict(packages or {"valgrind": "valgrind", "redis-server": "redis-server"})
    if need_nginx:
        packages["nginx"] = "nginx-light"
    missing = [p for tool, p in packages.items() if not shutil.which(tool)]
    if not missing:
        return
    print(f"installing from Debian: {' '.join(missing)}", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", *missing], check=True,
                       env=env, stdout=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"could not install {' '.join(missing)} ({e}): apt-get install them")
