#!/usr/bin/env python3
"""The Helm chart on a real PostgreSQL, without Kubernetes (called by .ci/deploy-checks).

    python3 .ci/chart_on_postgres.py IDEM_BIN [extra `helm template` args]

Renders helm/idem with helm/examples/postgres-url-secret.yaml and plays the objects as a
cluster would, on a private PostgreSQL with docs/kubernetes.md's two roles (idem_owner
creates the table; idem_app may only SELECT, INSERT, UPDATE, DELETE): idem as the
Deployment's container, then the `idem migrate` hook Job, each with its args, env (from a
stand-in for the user's Secret) and ConfigMap. Proves: not ready before the Job, ready
after it with no other step, a replay, the Job again (pre-upgrade) harmless, and no DDL
for idem_app. Stdlib + PyYAML.
"""
import base64, glob, http.server, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time
import urllib.error, urllib.request
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART, VALUES = "helm/idem", "helm/examples/postgres-url-secret.yaml"
OWNER_KEY, APP_KEY = "postgres-owner-url", "postgres-url"  # the example's two Secret keys
PASSWORDS = {"idem_owner": "owner-pw", "idem_app": "app-pw"}


class Fail(Exception):
    pass


def ok(msg):
    print(f"    ok: {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(method, url, body=None):
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()
    except OSError:
        return None, {}, b""


def pg_bin_dir():
    # The newest server installed (Debian 12: 15); never a silent skip when there is none.
    dirs = [d for d in glob.glob("/usr/lib/postgresql/*/bin")
            if os.path.exists(f"{d}/initdb") and os.path.exists(f"{d}/postgres")]
    if not dirs:
        raise Fail("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb, postgres): "
                   "apt-get install postgresql (scripts/test.sh installs it)")
    return max(dirs, key=lambda d: int(re.sub(r"\D.*", "", d.split("/")[-2]) or 0))


def as_postgres(argv):
    # PostgreSQL refuses to run as root. setpriv execs (no fork, unlike runuser), so the
    # Popen's pid is the postmaster's and stopping it reaches the server itself.
    return argv if os.geteuid() else ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]


class Postgres:
    def __init__(self, work):
        self.bins, self.port = pg_bin_dir(), free_port()
        self.dir = os.path.join(work, "pg")
        os.makedirs(self.dir)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self.psql_bin = f"{self.bins}/psql" if os.path.exists(f"{self.bins}/psql") else "/usr/bin/psql"
        data = os.path.join(self.dir, "data")
        # Trust on the socket (the superuser sets up), passwords over TCP (what idem uses).
        run(as_postgres([f"{self.bins}/initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--no-sync",
                         "--auth-local=trust", "--auth-host=scram-sha-256"]), "initdb")
        self.log = open(os.path.join(work, "postgres.log"), "wb")
        self.proc = subprocess.Popen(as_postgres([f"{self.bins}/postgres", "-D", data, "-p", str(self.port),
                                                  "-k", self.dir, "-c", "listen_addresses=127.0.0.1"]),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while self.sql("SELECT 1", db="postgres", check=False).returncode != 0:
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise Fail(f"postgres did not start (see {self.log.name})")
            time.sleep(0.2)

    def url(self, role):
        return f"postgres://{role}:{PASSWORDS[role]}@127.0.0.1:{self.port}/idem"

    def sql(self, *statements, db="idem", role=None, check=True):
        conn = ([self.url(role)] if role else ["-h", self.dir, "-p", str(self.port), "-U", "postgres", "-d", db])
        argv = [self.psql_bin, *conn, "-AtX", "-v", "ON_ERROR_STOP=1"] + [a for s in statements for a in ("-c", s)]
        return run(argv, "psql", check=check)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc.wait()


def run(argv, what, check=True, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise Fail(f"{what} exited {p.returncode}: {(p.stderr or p.stdout).strip()}")
    return p


class Upstream(http.server.BaseHTTPRequestHandler):
    """The app container: 201 to POST /invoices/{id}/charge, counting executions."""
    protocol_version, calls, lock = "HTTP/1.1", 0, threading.Lock()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        charge = re.fullmatch(r"/invoices/[^/]+/charge", self.path) is not None
        with Upstream.lock:
            Upstream.calls += charge
            body = f'{{"charge": {Upstream.calls}}}'.encode() if charge else b""
        self.send_response(201 if charge else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    log_message = lambda self, *args: None  # quiet


def only(found, what):
    if len(found) != 1:
        raise Fail(f"the chart renders {len(found)} {what}, expected one")
    return found[0]


def container_env(c, secrets):
    """The container's env as the kubelet would set it; and which Secret keys it read."""
    env, read = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, set()
    if c.get("envFrom"):
        raise Fail(f"container {c['name']}: envFrom is not played here")
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if not ref:
            raise Fail(f"container {c['name']}: env {e['name']} is neither a value nor a secretKeyRef")
        if ref["key"] not in secrets.get(ref["name"], {}):
            raise Fail(f"container {c['name']}: env {e['name']} reads Secret {ref['name']} key {ref['key']}, which does not exist")
        env[e["name"]] = secrets[ref["name"]][ref["key"]]
        read.add((ref["name"], ref["key"]))
    return env, read


def lay_out(pod, c, configmaps, work):
    """The container's args with each ConfigMap mount laid out in a folder of its own
    (the directory rewritten, the file names kept)."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts = {}
    for m in c.get("volumeMounts") or []:
        cm = (volumes.get(m["name"]) or {}).get("configMap")
        if not cm:
            raise Fail(f"container {c['name']}: volume {m['name']} is not a ConfigMap, not played here")
        folder = tempfile.mkdtemp(dir=work, prefix=f"{m['name']}.")
        for key, text in configmaps[cm["name"]]["data"].items():
            with open(os.path.join(folder, key), "w") as f:
                f.write(text)
        mounts[m["mountPath"].rstrip("/") + "/"] = folder + "/"
    return [next((f + a[len(m):] for m, f in mounts.items() if a.startswith(m)), a) for a in c.get("args") or []]


def main():
    idem, extra = os.path.abspath(sys.argv[1]), sys.argv[2:]
    os.chdir(ROOT)
    render = run(["helm", "template", "ci", CHART, "-f", VALUES, "--namespace", "ci", *extra], "helm template")
    docs = [d for d in yaml.safe_load_all(render.stdout) if d]
    job = only([d for d in docs if d["kind"] == "Job"], "migrate Job(s) (postgres.migrate.enabled)")
    deploy = only([d for d in docs if d["kind"] == "Deployment"], "Deployment(s)")
    pod, jpod = deploy["spec"]["template"]["spec"], job["spec"]["template"]["spec"]
    # Native sidecar (an init container) or a plain one: idem's container either way.
    serve_c = only([c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == "idem"],
                   "Deployment containers named idem")
    (job_c,) = jpod["containers"]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    # The chart's own Secrets as rendered (the generated admin token), plus a stand-in for
    # the user's: the one the example names, with its two keys.
    secrets = {d["metadata"]["name"]: {k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()}
               for d in docs if d["kind"] == "Secret"}
    user_secret = yaml.safe_load(open(VALUES))["postgres"]["existingSecret"]
    ok(f"helm template ci {' '.join([CHART, '-f', VALUES, *extra])}: a migrate Job and idem's Deployment")
    work = tempfile.mkdtemp(prefix="idem-chart-pg.")
    os.chmod(work, 0o711)  # mkdtemp's 0700 would lock the postgres user out
    pg = serve = upstream = None
    try:
        pg = Postgres(work)
        version = pg.sql("SHOW server_version", db="postgres").stdout.strip()
        ok(f"private PostgreSQL {version} on 127.0.0.1:{pg.port} ({pg.bins})")
        # docs/kubernetes.md's two roles. Since PostgreSQL 15 the public schema gives
        # CREATE to its owner only, so the migrating role is granted it.
        pg.sql(*[f"CREATE ROLE {r} LOGIN PASSWORD '{p}'" for r, p in PASSWORDS.items()],
               "CREATE DATABASE idem", db="postgres")
        pg.sql("GRANT CREATE ON SCHEMA public TO idem_owner",
               "ALTER DEFAULT PRIVILEGES FOR ROLE idem_owner IN SCHEMA public "
               "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO idem_app")
        secrets[user_secret] = {APP_KEY: pg.url("idem_app"), OWNER_KEY: pg.url("idem_owner")}
        ok(f"roles idem_owner (CREATE on schema public) and idem_app (default SELECT, INSERT, UPDATE, DELETE); "
           f"Secret {user_secret}: {APP_KEY}, {OWNER_KEY}")
        job_env, job_read = container_env(job_c, secrets)
        serve_env, serve_read = container_env(serve_c, secrets)
        if (user_secret, OWNER_KEY) not in job_read:
            raise Fail(f"the migrate Job does not read {user_secret}/{OWNER_KEY}: it reads {sorted(job_read)}")
        if (user_secret, APP_KEY) not in serve_read or (user_secret, OWNER_KEY) in serve_read:
            raise Fail(f"idem's container must read {user_secret}/{APP_KEY} only: it reads {sorted(serve_read)}")
        job_args = lay_out(jpod, job_c, configmaps, work)

        def migrate_job(when):  # bounded as the Job is
            p = run([idem, *job_args], f"the migrate Job ({when}): idem {' '.join(job_args)}",
                    env=job_env, timeout=job["spec"].get("activeDeadlineSeconds", 300))
            ok(f"migrate Job ({when}) as rendered, `idem {' '.join(job_c['args'])}` as idem_owner: {p.stdout.strip()}")

        upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        # idem as the Deployment runs it; only the addresses change (free loopback ports, the app).
        serve_args = lay_out(pod, serve_c, configmaps, work)
        config_path = serve_args[serve_args.index("--config") + 1]
        config = yaml.safe_load(open(config_path))
        proxy_port, admin_port = free_port(), free_port()
        config["listen"], config["admin"]["listen"] = f"127.0.0.1:{proxy_port}", f"127.0.0.1:{admin_port}"
        config["upstream"]["url"] = f"http://127.0.0.1:{upstream.server_address[1]}"
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
        serve_log = open(os.path.join(work, "idem.log"), "wb")
        serve = subprocess.Popen([idem, *serve_args], env=serve_env, stdout=serve_log, stderr=subprocess.STDOUT)
        admin, proxy = f"http://127.0.0.1:{admin_port}", f"http://127.0.0.1:{proxy_port}"

        def wait_for(path, want, seconds):
            start = time.time()
            while time.time() < start + seconds:
                if serve.poll() is not None:
                    raise Fail(f"idem serve exited {serve.returncode}:\n{open(serve_log.name).read()[-3000:]}")
                if call("GET", admin + path)[0] == want:
                    return time.time() - start
                time.sleep(0.2)
            raise Fail(f"{path} did not answer {want} in {seconds} s; idem's log:\n{open(serve_log.name).read()[-3000:]}")

        wait_for("/healthz", 200, 30)
        # Not ready before the Job: serve runs no DDL and checks the table every second.
        for _ in range(3):
            time.sleep(1)
            status = call("GET", admin + "/readyz")[0]
            if status == 200 or serve.poll() is not None:
                raise Fail(f"before the migrate Job idem must be up and not ready: /readyz {status}, exit {serve.poll()}")
        ok(f"idem serve as the Deployment's container renders it, as idem_app: /healthz 200, /readyz {status} "
           "before the migrate Job (no table yet)")

        migrate_job("pre-install")
        took = wait_for("/readyz", 200, 30)
        ok(f"/readyz turns 200 {took:.1f} s after the Job (bound 30 s), with no other step")

        answers = [call("POST", proxy + "/invoices/inv_1/charge", b'{"amount": 42}') for _ in range(2)]
        seen = [(s, h.get("Idempotent-Replayed"), b) for s, h, b in answers]
        if seen != [(201, None, b'{"charge": 1}'), (201, "true", b'{"charge": 1}')] or Upstream.calls != 1:
            raise Fail(f"POST /invoices/inv_1/charge twice: {seen}, {Upstream.calls} upstream calls (want one, then a replay)")
        ok("POST /invoices/inv_1/charge twice: 201 and 201 with Idempotent-Replayed: true, one upstream execution")
        owner = pg.sql("SELECT tableowner FROM pg_tables WHERE tablename = 'idem_records'").stdout.strip()
        if owner != "idem_owner":
            raise Fail(f"table idem_records is owned by {owner or 'nobody (missing)'}, not idem_owner")
        ok("table idem_records is owned by idem_owner (made by the Job, not by the pods)")

        migrate_job("pre-upgrade, table already there")
        wait_for("/readyz", 200, 5)
        status = call("POST", proxy + "/invoices/inv_2/charge", b'{"amount": 7}')[0]
        if status != 201 or Upstream.calls != 2:
            raise Fail(f"after the second Job, a fresh POST got {status} with {Upstream.calls} upstream calls (want 201, 2)")
        ok("idem still serves after it: /readyz 200, a fresh POST forwarded once")

        for ddl in ("CREATE TABLE x (i int)", "ALTER TABLE idem_records ADD COLUMN y int"):
            p = pg.sql(ddl, role="idem_app", check=False)
            if p.returncode == 0 or "must be owner" not in p.stderr and "permission denied" not in p.stderr:
                raise Fail(f"idem_app ran `{ddl}` ({p.returncode}: {p.stderr.strip()}): the roles are not split")
        ok("idem_app cannot run DDL (CREATE TABLE: permission denied; ALTER TABLE: must be owner)")
    finally:  # on failure too: nothing of this run is left running
        if serve and serve.poll() is None:
            serve.kill()  # nothing in flight to drain
            serve.wait()
        if upstream:
            upstream.shutdown()
        if pg:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops PostgreSQL
    try:
        main()
    except Fail as e:
        sys.exit(f"\nchart_on_postgres: FAIL: {e}")
