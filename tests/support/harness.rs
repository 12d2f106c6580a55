//! Running idem for tests: in-process (`start`) or as the built binary (`IdemProcess`),
//! always on free loopback ports, plus a tiny HTTP client.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem::app::Running;
use idem::config::Config;

/// Build a config from YAML, with `listen` and `admin.listen` on port 0.
pub fn config(yaml: &str) -> Config {
    let mut config = Config::from_yaml_str(yaml, None)
        .unwrap_or_else(|e| panic!("test config invalid:\n{e}\n---\n{yaml}"));
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// Start idem in-process.
pub async fn start(yaml: &str) -> Running {
    idem::app::start(&config(yaml)).await.expect("idem starts")
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
    let resp = client.request(req).await.map_err(|e| format!("{e:?}"))?;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("{e:?}"))?
        .to_bytes();
    Ok(Resp {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
}

pub async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    send("POST", url, headers, body).await
}

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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
        let port = free_port();
        let admin_port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("idem.yaml");
        let text =
            format!("listen: 127.0.0.1:{port}\nadmin:\n  listen: 127.0.0.1:{admin_port}\n{yaml}");
        std::fs::write(&config_path, text).unwrap();
        let log = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args(["serve", "--config"])
            .arg(&config_path)
            .args(args)
            .env("RUST_LOG", rust_log)
            .envs(envs.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn idem binary");
        let process = IdemProcess {
            child,
            port,
            admin_port,
            _dir: dir,
            config_path,
        };
        process.wait_healthy().await;
        process
    }

    /// Everything the process wrote to stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// Replace the configuration file (keeping the listeners), e.g. before SIGHUP.
    pub fn rewrite_config(&self, yaml: &str) {
        let text = format!(
            "listen: 127.0.0.1:{}\nadmin:\n  listen: 127.0.0.1:{}\n{yaml}",
            self.port, self.admin_port
        );
        std::fs::write(&self.config_path, text).unwrap();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.admin_port, path)
    }

    async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(r) = try_send("GET", &self.admin_url("/healthz"), &[], "").await {
                if r.status == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("idem binary did not become healthy");
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for IdemProcess {
    fn drop(&mut self) {
        self.signal_quietly();
    }
}

impl IdemProcess {
    fn signal_quietly(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sum of every sample of metric `name` (all label sets) in a Prometheus text page.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
