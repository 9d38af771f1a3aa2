//! The transport to Redis: how a batch reaches the right server and how its messages come
//! back. It owns the connection pool (one server, Sentinel's master, a Cluster's nodes
//! with MOVED/ASK routing), Sentinel discovery, the Cluster shard map, and the pub/sub
//! listener whose messages wake waits. It may use the wire and observe, never the driver
//! or anything above; the in-process server beside it is a peer it does not know.

pub(crate) mod listener;
pub(crate) mod pool;
pub(crate) mod sentinel;
pub(crate) mod shards;
