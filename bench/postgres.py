"""A private PostgreSQL for bench/run.py: initdb into the work dir, a free loopback port,
pg_stat_statements loaded; run as the `postgres` OS user when the bench runs as root
(PostgreSQL refuses root). Durability settings are PostgreSQL's defaults (fsync and
synchronous_commit on): what a fresh intent costs is measured with its WAL flush.

Readings for one measured window:
- statements: pg_stat_statements calls of idem's statements on its table (the
  background purge and the table creation excluded), i.e. the round trips idem made;
- transactions: pg_stat_database xact_commit + xact_rollback of the database;
- CPU: utime + stime of the postmaster and all its children (backends, WAL writer,
  checkpointer...), from /proc.
"""

import glob
import os
import shutil
import subprocess
import time

TABLE = "idem_records"


def bin_dir():
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    return None


def _as_postgres(argv):
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]


class Postgres:
    def __init__(self, workdir, port, proc_factory):
        self.port = port
        bins = bin_dir()
        if bins is None:
            raise SystemExit("PostgreSQL not found (bench/run.sh installs it)")
        d = os.path.join(workdir, "postgres")
        os.makedirs(d, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(d, "postgres", "postgres")
            os.chmod(workdir, 0o711)  # mkdtemp's 0700 would lock the postgres user out
        data = os.path.join(d, "data")
        subprocess.run(_as_postgres([os.path.join(bins, "initdb"), "-D", data, "-A", "trust",
                                     "-U", "postgres", "-E", "UTF8"]),
                       check=True, capture_output=True)
        self.proc = proc_factory("postgres", _as_postgres([
            os.path.join(bins, "postgres"), "-D", data, "-p", str(port), "-k", d,
            "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200",
            "-c", "shared_preload_libraries=pg_stat_statements",
            "-c", "pg_stat_statements.track=top"]))
        deadline = time.time() + 30
        while subprocess.run([os.path.join(bins, "pg_isready"), "-h", "127.0.0.1",
                              "-p", str(port), "-q"]).returncode != 0:
            if time.time() > deadline:
                raise RuntimeError("postgres did not start")
            time.sleep(0.1)
        self.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def url(self):
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def sql(self, query):
        return subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-d", "postgres", "-AtX", "-v", "ON_ERROR_STOP=1", "-c", query],
            capture_output=True, text=True, check=True).stdout.strip()

    def reset(self):
        """Empty the table (if idem created it yet) and the counters."""
        self.sql(f"DO $$ BEGIN IF to_regclass('{TABLE}') IS NOT NULL THEN "
                 f"TRUNCATE {TABLE}; END IF; END $$")

    def statements(self):
        """{statement kind: calls} of idem's request-path statements on its table."""
        out = {}
        rows = self.sql("SELECT calls, regexp_replace(query, '\\s+', ' ', 'g') "
                        "FROM pg_stat_statements")
        for line in rows.splitlines():
            calls, _, query = line.partition("|")
            kind = classify(query)
            if kind:
                out[kind] = out.get(kind, 0) + int(calls)
        return out

    def transactions(self):
        return int(self.sql("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                            "WHERE datname = 'postgres'"))

    def pids(self):
        pids = [self.proc.pid]
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                with open(stat) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == self.proc.pid:
                    pids.append(int(stat.split("/")[2]))
            except (OSError, IndexError, ValueError):
                pass
        return pids


def classify(query):
    """Which store operation a pg_stat_statements query text is (None: not idem's
    request path)."""
    if (TABLE not in query or "SKIP LOCKED" in query or "CREATE" in query
            or "WHERE false" in query or query.startswith("DO")):
        return None
    if query.startswith("WITH live AS"):
        return "reserve"
    if "pg_notify" in query and query.startswith("WITH changed AS"):
        return "complete_notify"
    if query.startswith("UPDATE"):
        return "replace"
    if "DELETE" in query:
        return "release_or_delete"
    if query.startswith("SELECT record"):
        return "get"
    return "other"
