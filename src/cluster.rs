//! A throwaway Redis Cluster: three masters on loopback ports, joined with
//! `redis-cli --cluster create` (redis-cli comes with redis-server).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{HarnessError, RedisServer};

/// Three cluster-enabled redis-servers covering all 16384 slots; stopped when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three masters, joins them, and waits (at most 20 s) until every node reports
    /// `cluster_state:ok`.
    pub fn start() -> Result<RedisCluster, HarnessError> {
        let nodes = (0..3)
            .map(|_| {
                RedisServer::builder()
                    .config("cluster-enabled", "yes")
                    .config("cluster-config-file", "nodes.conf")
                    // A node silent this long is marked failing (and, by a majority,
                    // failed: its slots stop being served). Long enough that a node
                    // starved for a moment on a loaded machine is not.
                    .config("cluster-node-timeout", "5000")
                    .start()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .map_err(|source| HarnessError::Io {
                context:
                    "cannot run redis-cli --cluster create (redis-cli comes with redis-server)"
                        .into(),
                source,
            })?;
        if !out.status.success() {
            return Err(HarnessError::Startup {
                port: nodes[0].port(),
                reason: "redis-cli --cluster create failed".into(),
                log_tail: String::from_utf8_lossy(&out.stdout).into_owned(),
            });
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let cluster = RedisCluster { nodes };
        while !cluster.is_ok() {
            if Instant::now() > deadline {
                return Err(HarnessError::Startup {
                    port: cluster.nodes[0].port(),
                    reason: "the cluster did not reach cluster_state:ok in 20 s".into(),
                    log_tail: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(cluster)
    }

    fn is_ok(&self) -> bool {
        self.nodes.iter().all(|n| {
            redis::Client::open(n.url())
                .and_then(|c| c.get_connection())
                .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        })
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Their URLs, as seed nodes for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}
