//! Reading each master's `maxmemory-policy` (SPEC §1 "What the code enforces"): every
//! record has a TTL (its retention), so under `volatile-lru` — the default of most
//! managed Redis services — or any `allkeys-*` policy, Redis may evict a record whose
//! call is still running, and the next repeat runs the call again. The proof assumes a
//! record lives until its TTL; on Redis only `noeviction` makes that true.
//!
//! Read with `INFO memory` rather than `CONFIG GET`, which managed services rename or
//! deny; the documented ACL grants `+info`. On a Cluster every master is asked (a
//! multi-node command, answered as a map of node address to reply); in Sentinel mode the
//! master the connection follows now, so a check after a failover reads the new one.

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{RedisResult, Value};

use super::conn::Link;
use super::RedisStore;
use crate::store::StoreError;

/// One master's answer: where, and its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePolicy {
    pub node: String,
    pub policy: String,
}

impl NodePolicy {
    /// Whether this master keeps every key until its TTL.
    pub fn keeps_records(&self) -> bool {
        self.policy == "noeviction"
    }
}

impl RedisStore {
    /// The `maxmemory-policy` of every master idem writes to, one round trip each.
    pub async fn eviction_policies(&self) -> Result<Vec<NodePolicy>, StoreError> {
        let mut link = self.conn.link();
        let read = read_policies(&mut link);
        let policies = self.bounded(&self.conn, read).await?;
        if policies.is_empty() {
            return Err(StoreError::Unavailable(
                "INFO memory named no maxmemory_policy".to_owned(),
            ));
        }
        Ok(policies)
    }
}

async fn read_policies(link: &mut Link) -> RedisResult<Vec<NodePolicy>> {
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    match link {
        Link::Cluster(cluster) => {
            let every = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let reply = cluster.route_command(info, every).await?;
            let Value::Map(nodes) = reply else {
                return Ok(Vec::new());
            };
            let mut out = Vec::with_capacity(nodes.len());
            for (node, reply) in nodes {
                let node: String = redis::from_redis_value(node)?;
                let text: String = redis::from_redis_value(reply)?;
                if let Some(policy) = policy_of(&text) {
                    out.push(NodePolicy { node, policy });
                }
            }
            Ok(out)
        }
        _ => {
            let text: String = info.query_async(link).await?;
            Ok(policy_of(&text)
                .map(|policy| NodePolicy {
                    node: "master".to_owned(),
                    policy,
                })
                .into_iter()
                .collect())
        }
    }
}

/// The `maxmemory_policy:` line of an `INFO` reply.
fn policy_of(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(|p| p.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_info_memory() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:volatile-lru\r\nallocator_frag_ratio:1\r\n";
        assert_eq!(policy_of(info).as_deref(), Some("volatile-lru"));
        assert_eq!(policy_of("# Memory\r\n"), None);
        let keeps = |policy: &str| NodePolicy {
            node: "n".into(),
            policy: policy.into(),
        };
        assert!(keeps("noeviction").keeps_records());
        assert!(!keeps("volatile-lru").keeps_records());
        assert!(!keeps("allkeys-lfu").keeps_records());
    }
}
