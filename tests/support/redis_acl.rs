//! The ACL user of the Redis tests, made with exactly the rules `docs/redis.md`
//! documents for each mode (read from the doc's table), so the doc cannot drift from
//! what is tested: a rule idem needs and the doc lacks fails the tests.

use std::process::Command;

use super::harness::{post, IdemProcess};

/// The ACL user's name and password; the password must never appear in any output.
pub const USER: &str = "idem";
pub const PASSWORD: &str = "s3cret-Zq81";

const DOC: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/redis.md"));

/// The documented rules for `mode` (`standalone`, `sentinel`, `cluster`): the code span of
/// the doc's table row `| mode | `rules` |` (where a `|` in a rule is written `\|`).
pub fn documented_rules(mode: &str) -> Vec<String> {
    let row = DOC
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(&format!("| {mode} |")))
        .unwrap_or_else(|| panic!("docs/redis.md has no ACL row for {mode}"));
    let rules = row
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("the ACL row for {mode} has no `rules`"));
    rules
        .split_whitespace()
        .map(|rule| rule.replace("\\|", "|"))
        .collect()
}

/// redis-server arguments creating the user with the documented rules for `mode`.
pub fn user_args(mode: &str) -> Vec<String> {
    let mut args = vec![
        "--user".to_string(),
        USER.into(),
        "on".into(),
        format!(">{PASSWORD}"),
    ];
    args.extend(documented_rules(mode));
    args
}

/// A config-file line creating the user with the documented rules for `mode` (for
/// sentinels, which read their users from their config file).
pub fn user_line(mode: &str) -> String {
    format!(
        "user {USER} on >{PASSWORD} {}",
        documented_rules(mode).join(" ")
    )
}

/// `rediss://idem:${env}@…` (or `redis://`): `url` of the test support with the user's
/// credentials, the password taken from the environment variable `env` by idem.
pub fn with_user(url: &str, env: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    format!("{scheme}://{USER}:${{{env}}}@{rest}")
}

/// idem's environment for [`with_user`] URLs naming `REDIS_PASSWORD`.
pub const PASSWORD_ENV: [(&str, &str); 1] = [("REDIS_PASSWORD", PASSWORD)];

/// Neither `idem check` on `idem`'s configuration (run with `envs`) nor `idem`'s logs
/// show `password`; `idem check` succeeds and names the store.
pub fn assert_password_hidden(idem: &IdemProcess, envs: &[(&str, &str)], password: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_idem"))
        .args(["check", "--config"])
        .arg(&idem.config_path)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("redis"), "{printed}");
    assert!(
        !printed.contains(password),
        "idem check printed the password:\n{printed}"
    );
    assert!(
        !idem.logs().contains(password),
        "the logs hold the password"
    );
}

/// A password the servers do not accept.
pub const WRONG_PASSWORD: &str = "not-the-Password-77";
/// What the logs say (lowercased) when the server's certificate is not trusted…
pub const WRONG_CA: &str = "certificate";
/// …and when the password is wrong (redis-rs's words for the server's `WRONGPASS`).
pub const WRONG_PASSWORD_REFUSED: &str = "password authentication failed";

/// idem with `yaml` (a store it must not reach) and `password` in `REDIS_PASSWORD`: not
/// ready, a protected request answered 503, the logs name `reason` and do not show
/// `password`.
pub async fn assert_refused(yaml: &str, password: &str, reason: &str) {
    let envs = [("REDIS_PASSWORD", password)];
    let idem = IdemProcess::spawn_with(yaml, &[], "warn", &envs).await;
    let ready = idem.readiness(503).await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    let r = post(&idem.url("/invoices/refused/charge"), &[], "{}").await;
    assert_eq!(r.status, 503, "{}", r.text());
    let logs = idem.logs();
    assert!(
        logs.to_lowercase().contains(reason),
        "no {reason:?} in the logs:\n{logs}"
    );
    assert!(!logs.contains(password), "the logs hold the password");
}
