//! Encryption keys over time: rotation on a running idem (SIGHUP), and the key a
//! config starts from (`idem keys new-encryption-key`, `idem check`).

use base64::Engine;

use super::{assert_unreadable, charge, config, raw_store, write_key};
use crate::support::env::{Backend, Env};
use crate::support::harness::{metric_sum, send, IdemProcess};

/// Rewrite `p`'s configuration, SIGHUP it, and wait until it runs `generation`.
pub async fn reload(p: &IdemProcess, yaml: &str, generation: f64) {
    p.rewrite_config(yaml);
    p.signal("HUP");
    crate::support::poll::eventually(std::time::Duration::from_secs(5), "reloaded", async || {
        let m = send("GET", &p.admin_url("/metrics"), &[], "").await.text();
        metric_sum(&m, "idem_config_generation") >= generation
    })
    .await;
}

/// Rotation on a running idem (SIGHUP): add the new key first, then drop the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_start_to_finish() {
    let env = Env::new(Backend::redis()).await;
    let dir = tempfile::tempdir().unwrap();
    let old = write_key(dir.path(), "old", 3);
    let new = write_key(dir.path(), "new", 4);
    let p = IdemProcess::spawn(&config(&env, &[("old", &old)], "")).await;
    let before = charge(&p, "r-old").await;
    // The new key is added first: old records still replay; new ones are sealed with it.
    reload(&p, &config(&env, &[("new", &new), ("old", &old)], ""), 2.0).await;
    let replay = charge(&p, "r-old").await;
    assert!(replay.replayed());
    assert_eq!(replay.body, before.body);
    let after = charge(&p, "r-new").await;
    assert_eq!(after.status, 201);
    let raw = raw_store(&env);
    assert!(raw.contains("\"sealed\":\"new\""), "{raw}");
    // The old key dropped (after `retention` in real life): its records are unreadable,
    // never executed again; the new key's still replay.
    reload(&p, &config(&env, &[("new", &new)], ""), 3.0).await;
    assert_unreadable(&charge(&p, "r-old").await);
    let kept = charge(&p, "r-new").await;
    assert!(kept.replayed());
    assert_eq!(kept.body, after.body);
    assert_eq!(env.upstream.executions("charge:r-old"), 1);
    assert_eq!(env.upstream.executions("charge:r-new"), 1);
    // A replica without any key: 409 as well, never a second execution or a 500.
    let keyless = IdemProcess::spawn(&config(&env, &[], "")).await;
    assert_unreadable(&charge(&keyless, "r-new").await);
    assert_eq!(env.upstream.executions("charge:r-new"), 1);
}

/// `idem keys new-encryption-key` prints a fresh key a config can use as it is, and
/// `idem check` names the key ids, never the material.
#[test]
fn a_new_key_from_the_cli_is_accepted_and_never_echoed() {
    let idem = env!("CARGO_BIN_EXE_idem");
    let run = |args: &[&str]| {
        std::process::Command::new(idem)
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["keys", "new-encryption-key"]);
    assert!(out.status.success());
    let key = String::from_utf8(out.stdout).unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .unwrap();
    assert_eq!(bytes.len(), 32);
    let again = run(&["keys", "new-encryption-key"]);
    assert_ne!(again.stdout, key.as_bytes(), "fresh every time");
    // It talks to nothing: its help lists none of the admin API's flags (which `keys
    // get`'s does).
    let help = |sub: &str| String::from_utf8(run(&["keys", sub, "--help"]).stdout).unwrap();
    let flags = ["--route", "--scope", "--admin", "--token"];
    let local = help("new-encryption-key");
    assert!(flags.iter().all(|f| !local.contains(f)), "{local}");
    let get = help("get");
    assert!(flags.iter().all(|f| get.contains(f)), "{get}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("k1");
    std::fs::write(&file, &key).unwrap();
    let config = dir.path().join("idem.yaml");
    std::fs::write(
        &config,
        format!(
            "upstream:\n  url: http://127.0.0.1:3000\nstore:\n  encryption:\n    keys:\n      - {{id: k1, file: {}}}\n",
            file.display()
        ),
    )
    .unwrap();
    let check = run(&["check", "--config", config.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&check.stdout).into_owned()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{text}");
    assert!(!text.contains(key.trim()), "{text}");
    assert!(text.contains("sealed (keys: k1)"), "{text}");
    std::fs::write(&file, "c2hvcnQ=").unwrap();
    let bad = run(&["check", "--config", config.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&bad.stderr).into_owned() + &String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(64), "{text}");
    assert!(
        text.contains("store.encryption.keys[0].file") && text.contains("holds 5 bytes"),
        "{text}"
    );
    // The credential key: said to be in use, never echoed, checked like the others.
    std::fs::write(&file, &key).unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::write(&credentials, &key).unwrap();
    let yaml = std::fs::read_to_string(&config).unwrap()
        + &format!("    credential_key_file: {}\n", credentials.display());
    std::fs::write(&config, yaml).unwrap();
    let keyed = run(&["check", "--config", config.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&keyed.stdout).into_owned()
        + &String::from_utf8_lossy(&keyed.stderr);
    assert!(keyed.status.success(), "{text}");
    assert!(text.contains("credential hashes keyed"), "{text}");
    assert!(!text.contains(key.trim()), "{text}");
    std::fs::write(&credentials, "c2hvcnQ=").unwrap();
    let bad = run(&["check", "--config", config.to_str().unwrap()]);
    let text =
        String::from_utf8_lossy(&bad.stderr).into_owned() + &String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(64), "{text}");
    assert!(
        text.contains("store.encryption.credential_key_file") && text.contains("holds 5 bytes"),
        "{text}"
    );
}

/// A FIFO in `dir` that hands `key` to one reader, once: a second read of it blocks
/// (no writer), so a process that reads a key file twice hangs where it would read it
/// again. The writer thread ends when its one reader has read.
fn key_once(dir: &std::path::Path, name: &str, key: &str) -> std::path::PathBuf {
    let fifo = dir.join(name);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "mkfifo (coreutils) {fifo:?}"
    );
    let (path, key) = (fifo.clone(), key.to_owned());
    std::thread::spawn(move || std::fs::write(path, key));
    fifo
}

/// Each key file is read once — by `idem check`, and by `idem serve` at start — by the
/// store's sealing layer (config parsing reads none): the keys and the credential key
/// are FIFOs that answer one read each, so a second read would hang the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_files_are_read_once() {
    let key = idem::store::seal::new_key_base64();
    let dir = tempfile::tempdir().unwrap();
    let yaml = |dir: &std::path::Path| {
        let (k1, k2, cred) = (
            key_once(dir, "k1", &key),
            key_once(dir, "k2", &key),
            key_once(dir, "cred", &key),
        );
        format!(
            "upstream:\n  url: http://127.0.0.1:3000\nstore:\n  encryption:\n    keys:\n      - {{id: k1, file: {}}}\n      - {{id: k2, file: {}}}\n    credential_key_file: {}\ndefault: reject\n",
            k1.display(),
            k2.display(),
            cred.display()
        )
    };
    let config = dir.path().join("idem.yaml");
    std::fs::write(&config, yaml(dir.path())).unwrap();
    let mut check = std::process::Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["check", "--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = check.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = check.kill();
            panic!("idem check hung: it read a key file twice");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // `serve`: a second read would hang its start (IdemProcess fails after 15 s).
    let served = tempfile::tempdir().unwrap();
    let p = IdemProcess::spawn(&yaml(served.path())).await;
    let health = send("GET", &p.admin_url("/healthz"), &[], "").await;
    assert_eq!(health.status, 200);
}
