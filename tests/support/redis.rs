//! A private `redis-server` per test: free loopback port, no persistence, killed on drop.
//!
//! Tests never touch a shared Redis: each starts its own instance, so they can stop,
//! restart and pause it (`SIGSTOP`) to exercise outages, and run in parallel. With
//! [`TlsFiles`] the same server (or sentinel, or cluster node) speaks only TLS, and the
//! support's own commands go over TLS too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::tls::{Stream, TlsFiles};

const STARTUP: Duration = Duration::from_secs(10);

/// A running (or stopped, or paused) `redis-server` child process.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Arguments beyond the defaults (cluster, replication, TLS, sentinel settings).
    extra: Vec<String>,
    /// `--sentinel`: run as a sentinel (it needs a config file of its own).
    sentinel: bool,
    /// Only TLS, with these certificates.
    tls: Option<TlsFiles>,
    /// Working directory for the server (it writes nothing with `--save ""`, but never
    /// let it write into the repository).
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server on a free loopback port and waits until it answers `PING`.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with `extra` arguments, each `--name value` split in two; `{port}`
    /// in a value is replaced by the server's port, `{free}` by another free port.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, false, None)
    }

    /// [`RedisServer::start_with`], with `Some(tls)` speaking only TLS (replication
    /// and cluster bus too).
    pub fn start_with_tls(tls: Option<&TlsFiles>, extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, false, tls.cloned())
    }

    /// Starts `redis-server <conf> --sentinel`; `lines` are written to its config file
    /// (which the sentinel then rewrites as it learns the topology).
    pub fn start_sentinel(lines: &[&str]) -> RedisServer {
        RedisServer::launch(lines, true, None)
    }

    /// [`RedisServer::start_sentinel`], with `Some(tls)` speaking only TLS, to clients
    /// and to the servers and sentinels it talks to.
    pub fn start_sentinel_with_tls(tls: Option<&TlsFiles>, lines: &[&str]) -> RedisServer {
        RedisServer::launch(lines, true, tls.cloned())
    }

    fn launch(extra: &[&str], sentinel: bool, tls: Option<TlsFiles>) -> RedisServer {
        let mut server = RedisServer {
            port: 0,
            child: None,
            // A `{free}` port is chosen once: a restarted cluster node keeps its bus port.
            extra: extra
                .iter()
                .map(|s| s.replace("{free}", &free_port().to_string()))
                .collect(),
            sentinel,
            tls,
            dir: tempfile::tempdir().expect("temp dir for redis-server"),
        };
        // The free port is released before redis-server binds it, so a parallel test
        // may grab it first: then pick another.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(e) => last_error = e,
            }
        }
        panic!("cannot start redis-server: {last_error}");
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/0", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (like a crash: no graceful shutdown).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.signal("CONT"); // a stopped process cannot die until continued
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a fresh, empty server on the same port.
    pub fn start_again(&mut self) {
        if let Err(e) = self.spawn() {
            panic!("cannot restart redis-server on port {}: {e}", self.port);
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        self.stop();
        let mut cmd = Command::new("redis-server");
        let port = self.port.to_string();
        let mut extra: Vec<String> = self
            .extra
            .iter()
            .map(|a| a.replace("{port}", &port))
            .collect();
        if self.sentinel {
            // A sentinel rewrites its config file: give it one in its own directory,
            // kept across restarts.
            let conf = self.dir.path().join("sentinel.conf");
            if !conf.exists() {
                std::fs::write(&conf, extra.join("\n") + "\n").expect("write sentinel.conf");
            }
            cmd.arg(&conf).arg("--sentinel");
            extra.clear();
        }
        let listen = match &self.tls {
            Some(tls) => tls.server_args(self.port),
            None => vec!["--port".into(), port],
        };
        let child = cmd
            .args(listen)
            .args(["--bind", "127.0.0.1"])
            .args(extra)
            .args(["--protected-mode", "no"])
            .args(if self.sentinel {
                &[][..]
            } else {
                &["--save", "", "--appendonly", "no"][..]
            })
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server not found: install it (Debian: apt-get install redis-server) \
                 — the tests start their own instances"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        };
        self.child = Some(child);
        let ready = self.wait_ready();
        if ready.is_err() {
            self.stop();
        }
        ready
    }

    /// Freezes the server (`SIGSTOP`): connections stay open but nothing is answered.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Thaws a paused server (`SIGCONT`).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// Sends one command as raw RESP and returns the raw reply text, for assertions on
    /// what is stored (key names, TTLs) without going through the code under test.
    pub fn command(&self, args: &[&str]) -> String {
        let mut stream = self
            .connect(Duration::from_secs(5))
            .expect("connect to redis-server");
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream
            .write_all(req.as_bytes())
            .and_then(|()| stream.flush())
            .expect("write to redis-server");
        let mut reply = Vec::new();
        read_reply(&mut BufReader::new(stream), &mut reply).expect("read from redis-server");
        String::from_utf8_lossy(&reply).into_owned()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis-cli` arguments that reach this server (`-p`, and TLS if it speaks TLS).
    pub fn cli_args(&self) -> Vec<String> {
        let mut args = vec!["-p".to_string(), self.port.to_string()];
        args.extend(self.tls.iter().flat_map(TlsFiles::cli_args));
        args
    }

    /// A connection for raw RESP, over TLS if the server speaks only TLS.
    fn connect(&self, within: Duration) -> std::io::Result<Box<dyn Stream>> {
        Ok(match &self.tls {
            Some(tls) => Box::new(tls.connect(self.addr(), within)?),
            None => {
                let stream = TcpStream::connect_timeout(&self.addr(), within)?;
                stream.set_read_timeout(Some(within))?;
                Box::new(stream)
            }
        })
    }

    fn signal(&self, sig: &str) {
        if let Some(child) = &self.child {
            let status = Command::new("kill")
                .args([&format!("-{sig}"), &child.id().to_string()])
                .status()
                .expect("run kill");
            assert!(status.success(), "kill -{sig} failed");
        }
    }

    /// Waits until *our* child answers on the port: another test's server that won
    /// the port race would answer PING too, so the pid is checked.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP;
        let pid = self.child.as_ref().map(Child::id).unwrap_or_default();
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "exited at startup ({status}); port {} taken?",
                    self.port
                ));
            }
            if self.answers_ping() {
                let info = self.command(&["INFO", "server"]);
                if info.contains(&format!("process_id:{pid}\r\n")) {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err("did not answer PING in time".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = self.connect(Duration::from_millis(500)) else {
            return false;
        };
        let mut buf = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.flush().is_ok()
            && stream.read_exact(&mut buf).is_ok()
            && &buf == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Appends one complete RESP2 reply (simple, integer, error, bulk or array) to `out`.
fn read_reply(r: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<()> {
    let start = out.len();
    r.read_until(b'\n', out)?;
    let line = String::from_utf8_lossy(&out[start..]).trim_end().to_owned();
    let n: i64 = line.get(1..).and_then(|n| n.parse().ok()).unwrap_or(-1);
    match line.as_bytes().first() {
        Some(b'$') if n >= 0 => {
            let mut body = vec![0; n as usize + 2];
            r.read_exact(&mut body)?;
            out.extend_from_slice(&body);
        }
        Some(b'*') => {
            for _ in 0..n.max(0) {
                read_reply(r, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// A port the OS just handed out; released before redis-server binds it.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}
