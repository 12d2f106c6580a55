//! A private PostgreSQL per test: `initdb` into a temporary folder, `postgres` on a free
//! loopback port, killed (the postmaster and every child, like a crashed container) on
//! drop. Each child of the postmaster runs in a session of its own (PostgreSQL calls
//! `setsid`), so signals go to the processes found by their parent pid, not to a group.
//!
//! Tests never touch the shared instance on 5432: each starts its own, so it can kill,
//! restart, freeze it, or stream it to a standby and promote that. PostgreSQL refuses to
//! run as root; when the tests run as root, the server runs as the `postgres` OS user
//! (`setpriv`, which execs in place: the child *is* the postmaster).
//!
//! `fsync=off`: the tests kill processes, never the machine, and a killed server's
//! committed writes are in the OS page cache either way.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STARTUP: Duration = Duration::from_secs(30);
const BIN_DIRS: [&str; 4] = [
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/14/bin",
];

/// A PostgreSQL server process over a data directory of its own.
pub struct PgServer {
    port: u16,
    child: Option<Child>,
    data: PathBuf,
    /// `-c name=value` settings given at every start.
    settings: Vec<String>,
    /// Holds `data` and the socket; removed on drop.
    dir: tempfile::TempDir,
}

impl PgServer {
    /// `initdb` (trust authentication, user `postgres`) and start.
    pub fn start() -> PgServer {
        PgServer::start_with(&[])
    }

    /// Like [`PgServer::start`], with extra `name=value` server settings.
    pub fn start_with(settings: &[&str]) -> PgServer {
        PgServer::initdb_then(settings, |_| {})
    }

    /// TLS on (`ssl=on`) with this PEM certificate chain and key; plain connections
    /// are still accepted.
    pub fn start_tls(cert_pem: &Path, key_pem: &Path) -> PgServer {
        let settings = [
            "ssl=on",
            "ssl_cert_file=server.crt",
            "ssl_key_file=server.key",
        ];
        PgServer::initdb_then(&settings, |data| {
            for (from, to, mode) in [
                (cert_pem, "server.crt", "644"),
                (key_pem, "server.key", "600"),
            ] {
                let to = data.join(to);
                std::fs::copy(from, &to).expect("copy TLS file");
                chown_to_postgres(&to);
                let chmod = Command::new("chmod").arg(mode).arg(&to).status();
                assert!(chmod.is_ok_and(|s| s.success()), "chmod {mode}");
            }
        })
    }

    /// `initdb`, then `prepare(data dir)`, then start.
    fn initdb_then(settings: &[&str], prepare: impl FnOnce(&Path)) -> PgServer {
        let dir = owned_tempdir();
        let data = dir.path().join("data");
        let initdb = run_as_postgres(&bin("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"])
            .stdout(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            initdb.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&initdb.stderr)
        );
        prepare(&data);
        PgServer::launch(dir, data, settings)
    }

    /// A streaming-replication standby of `primary` (`pg_basebackup -R`), started and
    /// connected. Its walreceiver announces itself as `standby`.
    pub fn standby_of(primary: &PgServer) -> PgServer {
        let dir = owned_tempdir();
        let data = dir.path().join("data");
        let backup = run_as_postgres(&bin("pg_basebackup"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg("-D")
            .arg(&data)
            .args(["-R", "-X", "stream", "--no-sync"])
            .output()
            .expect("run pg_basebackup");
        assert!(
            backup.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&backup.stderr)
        );
        PgServer::launch(dir, data, &["cluster_name=standby"])
    }

    fn launch(dir: tempfile::TempDir, data: PathBuf, settings: &[&str]) -> PgServer {
        let mut server = PgServer {
            port: 0,
            child: None,
            data,
            settings: settings.iter().map(|s| s.to_string()).collect(),
            dir,
        };
        // The free port is released before postgres binds it: on a lost race, retry.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("cannot start postgres: {last_error}");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Kills the postmaster and every backend (`SIGKILL`): a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pids = server_pids(child.id());
            signal(&pids, "KILL");
            let _ = child.wait();
            // Wait until no child is left holding the shared memory and data dir.
            let deadline = Instant::now() + Duration::from_secs(10);
            while pids.iter().any(|pid| alive(*pid)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Starts the server again on the same data and port (crash recovery runs).
    pub fn restart(&mut self) {
        if let Err(e) = self.spawn() {
            panic!("cannot restart postgres on port {}: {e}", self.port);
        }
    }

    /// Freezes every process of the server (`SIGSTOP`): sockets open, nothing answered.
    pub fn pause(&self) {
        self.signal_all("STOP");
    }

    pub fn resume(&self) {
        self.signal_all("CONT");
    }

    /// Runs SQL through `psql` (not the code under test) and returns its unaligned,
    /// tuples-only output.
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", "postgres", "-AtX", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .expect("run psql (Debian: apt-get install postgresql-client)");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn spawn(&mut self) -> Result<(), String> {
        self.kill();
        let mut cmd = run_as_postgres(&bin("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "max_connections=200", "-c", "logging_collector=off"]);
        for setting in &self.settings {
            cmd.args(["-c", setting]);
        }
        let log = std::fs::File::create(self.dir.path().join("server.log"))
            .map_err(|e| format!("cannot create server log: {e}"))?;
        // A group of its own: a Ctrl-C on the test run does not reach it first.
        cmd.process_group(0).stdout(Stdio::null()).stderr(log);
        self.child = Some(
            cmd.spawn()
                .map_err(|e| format!("cannot run postgres: {e}"))?,
        );
        let ready = self.wait_ready();
        if ready.is_err() {
            self.kill();
        }
        ready
    }

    /// Waits until *our* postmaster accepts connections, failing early if it exited
    /// (port taken by a parallel test). `pg_isready` alone would be satisfied by any
    /// server on the port (another test's, which took it first, or the previous run of
    /// this one); `postmaster.pid` in our data directory names the process that holds
    /// it, the port it listens on and its state, which must be ours, ours, and up.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP;
        let pid = self.child.as_ref().map(Child::id);
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                let log = std::fs::read_to_string(self.dir.path().join("server.log"));
                return Err(format!(
                    "exited at startup ({status}): {}",
                    log.unwrap_or_default()
                ));
            }
            let ready = pid.is_some_and(|pid| self.postmaster_up(pid))
                && Command::new(bin("pg_isready"))
                    .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
                    .status()
                    .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("did not accept connections in time".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether `postmaster.pid` says process `pid` runs this data directory on our port
    /// and accepts connections (`ready`; `standby` for a hot standby). Its lines: pid,
    /// data directory, start time, port, socket directory, listen address, shared
    /// memory key, status.
    fn postmaster_up(&self, pid: u32) -> bool {
        let Ok(text) = std::fs::read_to_string(self.data.join("postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines.len() >= 8
            && lines[0] == pid.to_string()
            && lines[3] == self.port.to_string()
            && matches!(lines[7], "ready" | "standby")
    }

    fn signal_all(&self, sig: &str) {
        if let Some(child) = &self.child {
            signal(&server_pids(child.id()), sig);
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.signal_all("CONT");
        self.kill();
    }
}

/// The postmaster and its children (from `/proc/<pid>/stat`'s parent pid).
fn server_pids(postmaster: u32) -> Vec<u32> {
    let mut pids = vec![postmaster];
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // "pid (comm) state ppid ...": comm may hold spaces, so split after the ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

fn signal(pids: &[u32], sig: &str) {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .args(&pids)
        .stderr(Stdio::null())
        .status();
}

fn alive(pid: u32) -> bool {
    // A zombie (reaped by nobody yet) no longer holds anything.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
    })
}

/// A PostgreSQL server binary, or a panic saying how to install it.
fn bin(name: &str) -> PathBuf {
    for dir in BIN_DIRS {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!(
        "PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin: install them \
         (Debian: apt-get install postgresql) — the tests start their own instances"
    );
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `program`, run as the `postgres` OS user when we are root (PostgreSQL refuses root).
fn run_as_postgres(program: &Path) -> Command {
    if !is_root() {
        return Command::new(program);
    }
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--",
    ])
    .arg(program);
    cmd
}

/// A temporary folder the server's user may write into.
fn owned_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir for postgres");
    chown_to_postgres(dir.path());
    dir
}

/// Hands `path` to the `postgres` OS user when we are root (it runs the server).
fn chown_to_postgres(path: &Path) {
    if is_root() {
        let status = Command::new("chown")
            .args(["postgres:postgres"])
            .arg(path)
            .status()
            .expect("run chown");
        assert!(
            status.success(),
            "chown postgres failed (is there a postgres user?)"
        );
    }
}

/// A port the OS just handed out; released before postgres binds it.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}
