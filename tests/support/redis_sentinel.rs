//! A private Sentinel deployment per test: one master, `replicas` replicas and three
//! sentinels (quorum 2) on free loopback ports, killed on drop.
//!
//! Failover settings that keep tests short: `down-after-milliseconds 1000`, and
//! `repl-diskless-sync-delay 0` (Redis 7 otherwise delays a replica's first sync by 5 s).
//! [`RedisSentinelSet::start`] returns only when every replica has received a probe
//! write and every sentinel knows every replica and the other sentinels, so a failover
//! can start the moment a test asks for one.

use std::time::{Duration, Instant};

use super::redis::RedisServer;
use super::redis_acl::{user_args, user_line};
use super::redis_cluster::field;
use super::tls::TlsFiles;

const FORMATION: Duration = Duration::from_secs(30);
pub const MASTER_NAME: &str = "mymaster";

pub struct RedisSentinelSet {
    /// The master first, then the replicas (roles change after a failover).
    pub servers: Vec<RedisServer>,
    pub sentinels: Vec<RedisServer>,
}

const REPLICATION: [&str; 4] = [
    "--repl-diskless-sync-delay",
    "0",
    "--repl-ping-replica-period",
    "1",
];

impl RedisSentinelSet {
    pub fn start(replicas: usize) -> RedisSentinelSet {
        RedisSentinelSet::launch(None, replicas, true)
    }

    /// For tests without a failover: returns as soon as every sentinel names the
    /// master, without waiting for the sentinels to discover each other (seconds).
    pub fn start_without_failover(replicas: usize) -> RedisSentinelSet {
        RedisSentinelSet::launch(None, replicas, false)
    }

    /// The servers and the sentinels speak only TLS (to clients and to each other), and
    /// each has the ACL user `docs/redis.md` documents for it: the `sentinel` rules on
    /// the servers, the `sentinels` rules on the sentinels (their default user stays
    /// open for the support's own commands and for each other). `failover_ready` as in
    /// [`RedisSentinelSet::start`], else as [`RedisSentinelSet::start_without_failover`].
    pub fn start_secured(
        tls: &TlsFiles,
        replicas: usize,
        failover_ready: bool,
    ) -> RedisSentinelSet {
        RedisSentinelSet::launch(Some(tls), replicas, failover_ready)
    }

    fn launch(tls: Option<&TlsFiles>, replicas: usize, failover_ready: bool) -> RedisSentinelSet {
        let user = tls.map(|_| user_args("sentinel")).unwrap_or_default();
        let mut args = REPLICATION.to_vec();
        args.extend(user.iter().map(String::as_str));
        let master = RedisServer::start_with_tls(tls, &args);
        let master_port = master.port().to_string();
        args.extend(["--replicaof", "127.0.0.1", &master_port]);
        let mut servers = vec![master];
        for _ in 0..replicas {
            servers.push(RedisServer::start_with_tls(tls, &args));
        }
        let monitor = format!("sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2");
        let sentinel_user = user_line("sentinels");
        let mut lines = vec![
            monitor.as_str(),
            "sentinel down-after-milliseconds mymaster 1000",
            "sentinel failover-timeout mymaster 10000",
            "sentinel parallel-syncs mymaster 5",
        ];
        if tls.is_some() {
            lines.push(&sentinel_user);
        }
        let sentinels = (0..3)
            .map(|_| RedisServer::start_sentinel_with_tls(tls, &lines))
            .collect();
        let set = RedisSentinelSet { servers, sentinels };
        if failover_ready {
            set.wait_formed(replicas);
        } else {
            set.wait_named();
        }
        set
    }

    /// Sentinel URLs for `store.redis.nodes`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// Every client connection of every running sentinel, one `CLIENT LIST` line each.
    pub fn clients(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .filter(|s| s.is_running())
            .flat_map(|s| {
                let list = s.command(&["CLIENT", "LIST"]);
                list.lines()
                    .filter(|l| l.starts_with("id="))
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Waits until some sentinel has a subscribed client other than the sentinels
    /// themselves (which never subscribe to each other): idem's `+switch-master`.
    pub fn wait_subscribed(&self, within: Duration) -> Vec<String> {
        let start = Instant::now();
        loop {
            let clients = self.clients();
            if clients.iter().any(|l| l.contains(" sub=1 ")) {
                return clients;
            }
            assert!(
                start.elapsed() < within,
                "nobody subscribed to the sentinels within {within:?}: {clients:#?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Index in `servers` of the master the sentinels name now.
    pub fn master(&self) -> usize {
        let port = self.named_master_port();
        self.servers
            .iter()
            .position(|s| s.port() == port)
            .expect("the named master is one of ours")
    }

    fn named_master_port(&self) -> u16 {
        for s in self.sentinels.iter().filter(|s| s.is_running()) {
            let reply = s.command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
            if let Some(port) = reply.lines().filter(|l| !l.starts_with(['*', '$'])).nth(1) {
                if let Ok(port) = port.trim().parse() {
                    return port;
                }
            }
        }
        panic!("no sentinel names a master");
    }

    /// Waits until the sentinels name a master other than `old` and that server
    /// reports itself master; returns how long that took.
    pub fn wait_switched(&self, old: usize, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let now = self.master();
            if now != old && self.servers[now].command(&["ROLE"]).contains("master") {
                return start.elapsed();
            }
            assert!(start.elapsed() < within, "no failover within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `SENTINEL FAILOVER`: a planned switch (the old master is demoted, not killed).
    pub fn force_failover(&self) {
        let reply = self.sentinels[0].command(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        assert_eq!(reply, "+OK\r\n", "SENTINEL FAILOVER refused");
    }

    fn wait_named(&self) {
        let start = Instant::now();
        while !self
            .sentinels
            .iter()
            .all(|s| s.command(&["INFO", "sentinel"]).contains("status=ok"))
        {
            assert!(
                start.elapsed() < FORMATION,
                "sentinels do not see the master within {FORMATION:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_formed(&self, replicas: usize) {
        let start = Instant::now();
        let master = &self.servers[0];
        let _ = master.command(&["SET", "probe", "1"]);
        let ready = || {
            let repl = master.command(&["INFO", "replication"]);
            let offset = field(&repl, "master_repl_offset");
            let caught_up = repl
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .filter(|l| {
                    l.split(',')
                        .find_map(|kv| kv.strip_prefix("offset="))
                        .and_then(|v| v.parse::<u64>().ok())
                        .is_some_and(|o| o >= offset)
                })
                .count();
            caught_up == replicas
                && self.sentinels.iter().all(|s| {
                    let info = s.command(&["INFO", "sentinel"]);
                    info.contains(&format!("slaves={replicas},sentinels=3"))
                })
        };
        while !ready() {
            assert!(
                start.elapsed() < FORMATION,
                "sentinel set not ready within {FORMATION:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
