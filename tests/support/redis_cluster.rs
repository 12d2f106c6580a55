//! A private Redis Cluster per test: `masters` masters with `replicas` replicas each, on
//! free loopback ports, created with `redis-cli --cluster create`, killed on drop.
//!
//! Settings that keep failover tests short and deterministic: a 1 s node timeout,
//! `repl-diskless-sync-delay 0` (Redis 7 otherwise delays a replica's first sync by
//! 5 s), and [`RedisCluster::start`] returns only once every replica has received a
//! probe write, so replication is flowing before the test begins.

use std::process::Command;
use std::time::{Duration, Instant};

use super::redis::RedisServer;
use super::redis_acl::user_args;
use super::tls::TlsFiles;

const FORMATION: Duration = Duration::from_secs(30);

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::launch(None, masters, replicas)
    }

    /// Every node speaks only TLS (clients, replication, cluster bus) and has the ACL
    /// user `docs/redis.md` documents for cluster mode (the default user stays open for
    /// the support's own commands and `redis-cli --cluster create`).
    pub fn start_secured(tls: &TlsFiles, masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::launch(Some(tls), masters, replicas)
    }

    fn launch(tls: Option<&TlsFiles>, masters: usize, replicas: usize) -> RedisCluster {
        let user = tls.map(|_| user_args("cluster")).unwrap_or_default();
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            "{free}",
            "--cluster-node-timeout",
            "1000",
            "--cluster-config-file",
            "nodes-{port}.conf",
            "--repl-diskless-sync-delay",
            "0",
        ];
        args.extend(user.iter().map(String::as_str));
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_with_tls(tls, &args))
            .collect();
        let mut create = Command::new("redis-cli");
        create.args(tls.map(TlsFiles::cli_args).unwrap_or_default());
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli not found: install it (Debian: apt-get install redis-tools)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_formed(masters * (1 + replicas));
        cluster
    }

    /// Seed URLs for `store.redis.nodes`.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// The live node that is master of `slot`.
    pub fn master_of(&self, slot: u16) -> usize {
        self.live()
            .find(|&i| self.owns(i, slot))
            .expect("a master for the slot")
    }

    /// A live replica of the master `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let nodes = self.nodes[master].command(&["CLUSTER", "NODES"]);
        let id = nodes
            .lines()
            .find(|l| l.contains("myself"))
            .and_then(|l| l.split(' ').next())
            .expect("own node id")
            .to_string();
        self.live()
            .find(|&i| {
                let nodes = self.nodes[i].command(&["CLUSTER", "NODES"]);
                nodes
                    .lines()
                    .any(|l| l.contains("myself") && l.contains("slave") && l.contains(&id))
            })
            .expect("a replica of the master")
    }

    fn owns(&self, i: usize, slot: u16) -> bool {
        let nodes = self.nodes[i].command(&["CLUSTER", "NODES"]);
        nodes.lines().any(|line| {
            line.contains("myself") && line.contains("master") && {
                line.split(' ').skip(8).any(|range| {
                    let mut parts = range.split('-');
                    let lo: u16 = parts
                        .next()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(u16::MAX);
                    let hi: u16 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(lo);
                    lo <= slot && slot <= hi
                })
            }
        })
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].is_running())
    }

    /// Waits until `replica_of_dead` master's slots are served again by a promoted
    /// replica, as every live node sees it (not merely `cluster_state:ok`, which stays
    /// `ok` for the node timeout after a master dies).
    pub fn wait_promoted(&self, slot: u16, dead: usize, within: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let owner = self.live().find(|&i| i != dead && self.owns(i, slot));
            let all_ok = self.live().all(|i| {
                self.nodes[i]
                    .command(&["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            });
            if owner.is_some() && all_ok {
                return start.elapsed();
            }
            assert!(start.elapsed() < within, "no promotion within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every node agrees the cluster is up and every replica's link is up and has
    /// received a probe write in each slot range.
    fn wait_formed(&self, count: usize) {
        let start = Instant::now();
        let formed = || {
            self.nodes.iter().all(|n| {
                let info = n.command(&["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{count}"))
            }) && self.nodes.iter().all(|n| {
                let repl = n.command(&["INFO", "replication"]);
                repl.contains("role:master") || repl.contains("master_link_status:up")
            })
        };
        while !formed() {
            assert!(
                start.elapsed() < FORMATION,
                "cluster not formed within {FORMATION:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // A probe write on each master, then wait until each replica has its offset.
        for n in &self.nodes {
            if n.command(&["ROLE"]).contains("master") {
                let probe = format!("probe{{{}}}", n.port());
                // Only succeeds on the master owning that slot; others answer MOVED.
                let _ = n.command(&["SET", &probe, "1"]);
            }
        }
        while !self.replicas_caught_up() {
            assert!(
                start.elapsed() < FORMATION,
                "replicas not caught up within {FORMATION:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn replicas_caught_up(&self) -> bool {
        self.nodes.iter().all(|n| {
            let repl = n.command(&["INFO", "replication"]);
            if !repl.contains("role:master") {
                return true;
            }
            let offset = field(&repl, "master_repl_offset");
            repl.lines()
                .filter(|l| l.starts_with("slave") && l.contains("offset="))
                .all(|l| {
                    let replica_offset = l
                        .split(',')
                        .find_map(|kv| kv.strip_prefix("offset="))
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                    replica_offset >= offset
                })
        })
    }
}

/// A numeric `name:value` field of an INFO reply.
pub fn field(info: &str, name: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Redis Cluster's slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub fn slot(key: &[u8]) -> u16 {
    let tag = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}
