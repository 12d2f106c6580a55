//! "Never twice" on any clock (SPEC §1 "One clock for every lease"): a replica whose wall
//! clock is wrong, or jumps, must never take a live lease over. Each replica runs under
//! Debian's libfaketime, which shifts its wall clock (`CLOCK_REALTIME`) and leaves the
//! monotonic clock alone, as NTP steps and skewed pods do. The upstream (the mock, which
//! does not deduplicate) holds every call 4 s under a 10 s lease, and the route retries
//! unknown outcomes (`on_unknown: retry`), the setting under which a wrongly judged
//! lease turns straight into a second execution:
//! - two replicas, the repeat's 60 s ahead (`ahead`);
//! - two replicas, the owner's 60 s behind (`owner_behind`);
//! - one replica stepped 2 minutes forward mid-call (`stepped_mid_call`), the only case a
//!   single-process memory store can have.
//!
//! Every case counts executions at the upstream, never from idem's metrics. Before the
//! leases moved to the store's clock, all of them executed the charge twice (checked on
//! c52cbb8: see docs/reliability.md).

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::env::{Backend, Env};
use support::harness::{post, try_send, IdemProcess};
use support::poll::eventually;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

macro_rules! on_stores {
    ($($name:ident: [$($store:ident),*]),* $(,)?) => {
        $(mod $name {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $store() { super::$name(super::Backend::$store()).await })*
        })*
    };
}

on_stores!(
    ahead: [redis, postgres],
    owner_behind: [redis, postgres],
    stepped_mid_call: [memory, redis, postgres],
);

/// A replica's wall clock, shifted through a file libfaketime reads on every call.
struct Clock {
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Clock {
    fn shifted(offset: &str) -> Clock {
        assert!(
            Path::new(LIBFAKETIME).exists(),
            "libfaketime is missing: apt-get install faketime (scripts/test.sh installs it)"
        );
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock {
            file: dir.path().join("faketime"),
            _dir: dir,
        };
        clock.set(offset);
        clock
    }

    /// Steps the clock: the next wall-clock read sees `offset` (e.g. `+120s`).
    fn set(&self, offset: &str) {
        std::fs::write(&self.file, offset).unwrap();
    }

    fn env(&self) -> [(&'static str, String); 4] {
        [
            ("LD_PRELOAD", LIBFAKETIME.to_owned()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ]
    }

    async fn idem(&self, env: &Env) -> IdemProcess {
        let envs = self.env();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        IdemProcess::spawn_with(&yaml(env), &[], "warn", &envs).await
    }
}

fn yaml(env: &Env) -> String {
    format!(
        "{}routes:\n  - name: charge\n    path: /invoices/{{invoice_id}}/charge\n    key: \"charge:{{path.invoice_id}}\"\n    lease: 10s\n    on_unknown: retry\n    upstream_key_window: 1h\n",
        env.base_yaml("30s")
    )
}

/// Sends the charge through `owner` (the upstream holds it 4 s) and waits until the
/// upstream has it; the caller's answer arrives later on the returned task.
async fn start_charge(
    env: &Env,
    owner: &IdemProcess,
    id: &str,
) -> tokio::task::JoinHandle<Option<support::harness::Resp>> {
    let url = owner.url(&format!("/invoices/{id}/charge"));
    let call = tokio::spawn(async move {
        try_send("POST", &url, &[("x-mock-delay-ms", "4000")], "{}")
            .await
            .ok()
    });
    let key = format!("charge:{id}");
    eventually(
        Duration::from_secs(5),
        "the call reached the upstream",
        async || env.upstream.executions(&key) == 1,
    )
    .await;
    call
}

/// A repeat while the first call runs: refused as in progress, never forwarded; then the
/// first answer arrives, a late repeat replays it, and the upstream executed once.
async fn assert_once(env: &Env, repeat_via: &IdemProcess, id: &str, call: CallHandle) {
    let url = repeat_via.url(&format!("/invoices/{id}/charge"));
    let repeat = post(&url, &[], "{}").await;
    assert_eq!(
        (repeat.status, repeat.code()),
        (409, "request_in_progress".to_owned()),
        "a repeat during the call: {}",
        repeat.text()
    );
    let first = call.await.unwrap().expect("the first call is answered");
    assert_eq!(first.status, 201, "{}", first.text());
    let late = post(&url, &[], "{}").await;
    assert!(late.replayed(), "a late repeat replays: {}", late.text());
    assert_eq!(late.body, first.body);
    assert_eq!(
        env.upstream.executions(&format!("charge:{id}")),
        1,
        "executed once"
    );
}

type CallHandle = tokio::task::JoinHandle<Option<support::harness::Resp>>;

async fn ahead(backend: Backend) {
    let env = Env::new(backend).await;
    let owner = Clock::shifted("+0s").idem(&env).await;
    let ahead = Clock::shifted("+60s");
    let repeater = ahead.idem(&env).await;
    let call = start_charge(&env, &owner, "inv_ahead").await;
    assert_once(&env, &repeater, "inv_ahead", call).await;
}

async fn owner_behind(backend: Backend) {
    let env = Env::new(backend).await;
    let behind = Clock::shifted("-60s");
    let owner = behind.idem(&env).await;
    let repeater = Clock::shifted("+0s").idem(&env).await;
    let call = start_charge(&env, &owner, "inv_behind").await;
    assert_once(&env, &repeater, "inv_behind", call).await;
}

async fn stepped_mid_call(backend: Backend) {
    let env = Env::new(backend).await;
    let clock = Clock::shifted("+0s");
    let only = clock.idem(&env).await;
    let call = start_charge(&env, &only, "inv_step").await;
    // An NTP step or a VM resumed from suspend, while the upstream holds the call.
    clock.set("+120s");
    assert_once(&env, &only, "inv_step", call).await;
}
