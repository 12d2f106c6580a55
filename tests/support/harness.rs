//! Running idem for tests: in-process (`start`) or as the built binary (`IdemProcess`),
//! always on free loopback ports (port 0, then asking where), plus a tiny HTTP client.
//! Either way a panic in idem fails the test (see `panics`), and a test's traffic starts
//! once idem is ready, as a kubelet's would.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem::app::Running;
use idem::config::Config;

use super::panics;
use super::poll::eventually;

/// How long idem may take to start, listen and become ready on a loaded machine.
const STARTUP: Duration = Duration::from_secs(15);

/// Build a config from YAML, with `listen` and `admin.listen` on port 0.
pub fn config(yaml: &str) -> Config {
    let mut config = Config::from_yaml_str(yaml, None)
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// idem running in-process (a [`Running`] to the test); when dropped, fails the test if
/// idem panicked meanwhile, its shutdown included (the watch is dropped last).
pub struct Idem(Running, panics::Watch);

impl std::ops::Deref for Idem {
    type Target = Running;
    fn deref(&self) -> &Running {
        &self.0
    }
}

/// Start idem in-process, with the panic watch on, and wait until `/readyz` says it is
/// ready (its store answered a ping in time; on a loaded machine the first may not).
pub async fn start(yaml: &str) -> Idem {
    let idem = start_unready(yaml).await;
    let ready = admin_url(&idem, "/readyz");
    eventually(STARTUP, "idem ready (/readyz 200)", async || {
        try_send("GET", &ready, &[], "")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    idem
}

/// Start idem in-process from a configuration built by the test (e.g. a listener that
/// is not on loopback), and wait until it is ready.
pub async fn start_config(config: Config) -> Idem {
    let watch = panics::watched();
    let idem = Idem(idem::app::start(&config).await.expect("idem starts"), watch);
    let ready = format!("http://127.0.0.1:{}/readyz", idem.admin_addr.port());
    eventually(STARTUP, "idem ready (/readyz 200)", async || {
        try_send("GET", &ready, &[], "")
            .await
            .is_ok_and(|r| r.status == 200)
    })
    .await;
    idem
}

/// Start idem in-process without waiting for readiness (a test of readiness itself, or
/// one whose store is down on purpose).
pub async fn start_unready(yaml: &str) -> Idem {
    let watch = panics::watched();
    Idem(
        idem::app::start(&config(yaml)).await.expect("idem starts"),
        watch,
    )
}

pub fn url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.addr, path)
}

pub fn admin_url(running: &Running, path: &str) -> String {
    format!("http://{}{}", running.admin_addr, path)
}

/// A response as a test sees it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// The problem `code`, for proxy-made errors.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// Every response is a 201 with the same body: the one execution's answer, replayed to
/// the duplicates.
pub fn assert_all_got_the_one_result(responses: &[Resp]) {
    for r in responses {
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(r.body, responses[0].body);
    }
}

/// Send one request on a fresh connection.
/// The longest a test request may take, answer body included.
const REQUEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

pub async fn send(method: &str, url: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    try_send(method, url, headers, body).await.expect("request")
}

pub async fn try_send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Resp, String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
    // Generous, far above any test's own waits: a request that hangs fails its test
    // rather than the whole run at CI's time limit.
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("{e:?}"))?
            .to_bytes();
        Ok::<_, String>((parts, body))
    };
    let (parts, body) = tokio::time::timeout(REQUEST_LIMIT, exchange)
        .await
        .map_err(|_| format!("{method} {url}: no complete answer within {REQUEST_LIMIT:?}"))??;
    Ok(Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

/// [`try_send`] with a client timeout: no answer within `within` is an error, not a hang.
pub async fn try_send_within(
    within: Duration,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Resp, String> {
    tokio::time::timeout(within, try_send(method, url, headers, body))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {within:?}")))
}

pub async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    send("POST", url, headers, body).await
}

/// A loopback port nothing listens on, for refused connections. (Never bind a server
/// to it: another test may take it first. Servers bind port 0 and say where.)
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Both listeners on port 0: the OS picks free ports and idem logs them.
const LISTEN_ANY: &str = "listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0\n";

/// The idem binary as a child process, killed on drop.
pub struct IdemProcess {
    pub child: Child,
    pub port: u16,
    pub admin_port: u16,
    _dir: tempfile::TempDir,
    pub config_path: PathBuf,
}

impl IdemProcess {
    /// Write `yaml` (with `listen`/`admin` prepended) and spawn `idem serve --config`.
    pub async fn spawn(yaml: &str) -> IdemProcess {
        Self::spawn_with(yaml, &[], "warn", &[]).await
    }

    /// As `spawn`, with extra CLI arguments and a `RUST_LOG` filter; stderr goes to a
    /// file that [`IdemProcess::logs`] reads.
    pub async fn spawn_with(
        yaml: &str,
        args: &[&str],
        rust_log: &str,
        envs: &[(&str, &str)],
    ) -> IdemProcess {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("idem.yaml");
        std::fs::write(&config_path, format!("{LISTEN_ANY}{yaml}")).unwrap();
        let config = config_path.to_str().unwrap().to_owned();
        let mut all = vec!["serve", "--config", &config];
        all.extend_from_slice(args);
        Self::launch(dir, &all, rust_log, envs).await
    }

    /// `idem serve ARGS` with no configuration file, both listeners on port 0.
    pub async fn serve(args: &[&str]) -> IdemProcess {
        let dir = tempfile::tempdir().unwrap();
        let mut all = vec!["serve"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]);
        Self::launch(dir, &all, "warn", &[]).await
    }

    /// Runs the binary, learns its ports from its "idem listening" log line (binding
    /// port 0 cannot race another test the way pick-a-free-port-then-bind can), and
    /// waits until it is healthy.
    async fn launch(
        dir: tempfile::TempDir,
        args: &[&str],
        rust_log: &str,
        envs: &[(&str, &str)],
    ) -> IdemProcess {
        let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(args)
            // The listening line is logged at info by `idem::app`.
            .env("RUST_LOG", format!("{rust_log},idem::app=info"))
            .env("NO_COLOR", "1")
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn idem binary");
        let mut process = IdemProcess {
            child,
            port: 0,
            admin_port: 0,
            config_path: dir.path().join("idem.yaml"),
            _dir: dir,
        };
        let (addr, admin) = eventually(STARTUP, "idem listening", async || {
            if let Ok(Some(status)) = process.child.try_wait() {
                panic!("idem exited at startup ({status}):\n{}", process.logs());
            }
            listening(&process.logs())
        })
        .await;
        process.port = addr.port();
        process.admin_port = admin.port();
        process.wait_healthy().await;
        process
    }

    /// Everything the process wrote to stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Replace the configuration file (keeping the listeners: a reload does not move
    /// them), e.g. before SIGHUP.
    pub fn rewrite_config(&self, yaml: &str) {
        std::fs::write(&self.config_path, format!("{LISTEN_ANY}{yaml}")).unwrap();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    /// The main listener's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The admin listener's address.
    pub fn admin_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.admin_port))
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.admin_port, path)
    }

    /// Polls `/readyz` until it answers `want` (or 15 s pass); returns the last answer.
    pub async fn readiness(&self, want: u16) -> Resp {
        let deadline = std::time::Instant::now() + STARTUP;
        loop {
            let r = send("GET", &self.admin_url("/readyz"), &[], "").await;
            if r.status == want || std::time::Instant::now() > deadline {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_healthy(&self) {
        eventually(STARTUP, "idem healthy", async || {
            let health = try_send("GET", &self.admin_url("/healthz"), &[], "").await;
            health.is_ok_and(|r| r.status == 200)
        })
        .await;
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Kills the process (SIGKILL); fails the test if it had panicked.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.assert_no_panic();
    }

    /// Fails the test if the process' log shows a panic (the default hook's
    /// `thread '…' panicked at …`).
    #[track_caller]
    pub fn assert_no_panic(&self) {
        panics::assert_no_panic_in_log(&format!("idem (pid {})", self.child.id()), &self.logs());
    }
}

/// Stops the process, then fails the test if it panicked (unless the test is already
/// failing).
impl Drop for IdemProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            self.assert_no_panic();
        }
    }
}

/// The sum of every sample of metric `name` (all label sets) in a Prometheus text page.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The proxy and admin addresses from idem's "idem listening" log line (text or JSON).
fn listening(logs: &str) -> Option<(SocketAddr, SocketAddr)> {
    let line = strip_ansi(logs.lines().find(|l| l.contains("idem listening"))?);
    Some((field(&line, "addr")?, field(&line, "admin_addr")?))
}

/// `key=value` (text) or `"key":"value"` (JSON) in a log line.
fn field(line: &str, key: &str) -> Option<SocketAddr> {
    let (_, rest) = line
        .split_once(&format!(" {key}="))
        .or_else(|| line.split_once(&format!("\"{key}\":\"")))?;
    rest.split([' ', '"']).next()?.parse().ok()
}

/// The line without terminal colour codes (in case `NO_COLOR` is not honoured).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
