//! The registry of live clients: who they are (host, process id, label, version), when they
//! last gave a heartbeat and how many leases they watch, so that the holder of a lock
//! ([`Holder::client_id`](super::Holder::client_id)) can be named.
//!
//! Two keys under the keyspace's prefix, on one cluster slot: `<prefix>:{clients}:registry`
//! (a hash: client id -> heartbeat time and record) and `<prefix>:{clients}:heartbeats` (a
//! sorted set: client id -> until when it counts as live, on the server's clock). A live
//! client sends [`beat`] once per heartbeat interval (one script, one round trip); its entry
//! lives for `keep` after each, so a client that died without leaving (killed, frozen, cut
//! off) drops out of [`read`] once `keep` has passed, and its entry is deleted by the next
//! heartbeat of any client. A client dropped sends [`leave`]. Readers never write.
//!
//! ```text
//!   beat(id, keep, record) ──clients_beat.lua──► Done(server ms)    (every interval)
//!   leave(id)              ──clients_leave.lua─► Done(was there)    (client dropped)
//!   read()                 ──clients_read.lua──► Done(Vec<ClientInfo>, live ones only)
//! ```
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::{Protocol, Reply, Response, Step};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::inspect::registry::{self, ClientRecord};
//!
//! let ks = Keyspace::default();
//! let now = Instant::now();
//! let record = ClientRecord::new("billing-worker", "host-7", 4242, "0.9.0", 3).unwrap();
//! let beat = registry::beat(&ks, "1a2b3c4d", Duration::from_secs(30), &record, now).unwrap();
//! # let _ = beat;
//! let mut read = registry::read(&ks, now + Duration::from_secs(1));
//! let Step::Send(batch) = read.poll(now) else { unreachable!() };
//! let bulk = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
//! let entry = format!("1700000000000\n{}", record.encode());
//! let reply = Reply::Array(vec![
//!     Reply::Int(1_700_000_002_500), bulk("1a2b3c4d"), Reply::Int(1_700_000_030_000), bulk(&entry),
//! ]);
//! read.handle(Response::reply(batch.requests[0].id, reply), now);
//! let Step::Done(Ok(clients)) = read.poll(now) else { unreachable!() };
//! assert_eq!(clients[0].id, "1a2b3c4d");
//! assert_eq!(clients[0].record, record);
//! assert_eq!(clients[0].since_heartbeat, Duration::from_millis(2500));
//! assert_eq!(clients[0].expires_in, Duration::from_millis(27_500));
//! ```

use std::time::{Duration, Instant};

use crate::error::{Error, InvalidArgument};
use crate::keys::{Keyspace, cat};
use crate::lease::{OpKind, ScriptOp, Target};
use crate::reply::Reply;
use crate::script;
use crate::script::prelude::NOW_MS;
use crate::script::{Script, ScriptCall};

/// `lua/clients_beat.lua`
pub static BEAT: Script = script!(
    "clients_beat",
    [NOW_MS],
    include_str!("lua/clients_beat.lua")
);

/// `lua/clients_leave.lua`
pub static LEAVE: Script = script!("clients_leave", [], include_str!("lua/clients_leave.lua"));

/// `lua/clients_read.lua`
pub static READ: Script = script!(
    "clients_read",
    [NOW_MS],
    include_str!("lua/clients_read.lua")
)
.read_only();

/// The longest label accepted, in bytes.
pub const MAX_LABEL_LEN: usize = 128;

/// The registry's keys in `keyspace`: the hash of records and the sorted set of heartbeats.
pub fn keys(keyspace: &Keyspace) -> [String; 2] {
    let prefix = keyspace.prefix();
    [
        cat(&[prefix, ":{clients}:registry"]),
        cat(&[prefix, ":{clients}:heartbeats"]),
    ]
}

/// What a client says about itself in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ClientRecord {
    /// The label its application gave it (may be empty).
    pub label: String,
    /// The host it runs on (as the host names itself; may be empty).
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The version of the library it runs.
    pub version: String,
    /// How many leases its watchdog watched at the last heartbeat (locks, permits and jobs
    /// held by live guards).
    pub leases: u64,
}

/// `text` without control characters (a record is lines of text), cut to `max` bytes.
fn clean(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

impl ClientRecord {
    /// A record. The label is checked (at most [`MAX_LABEL_LEN`] bytes, no control
    /// characters: [`InvalidArgument::Setting`] otherwise); the host and version are taken
    /// as they are, control characters removed, cut to 255 bytes.
    pub fn new(
        label: &str,
        host: &str,
        pid: u32,
        version: &str,
        leases: u64,
    ) -> Result<Self, Error> {
        check_label(label)?;
        Ok(ClientRecord {
            label: label.to_owned(),
            host: clean(host, 255),
            pid,
            version: clean(version, 255),
            leases,
        })
    }

    /// The record as stored: `1`, version, host, pid, leases and label, one a line (the
    /// label last: it is the only free text).
    pub fn encode(&self) -> String {
        format!(
            "1\n{}\n{}\n{}\n{}\n{}",
            self.version, self.host, self.pid, self.leases, self.label
        )
    }

    /// A stored record (`None`: not one this version reads).
    pub fn decode(text: &str) -> Option<Self> {
        let mut lines = text.splitn(6, '\n');
        if lines.next()? != "1" {
            return None;
        }
        let version = lines.next()?.to_owned();
        let host = lines.next()?.to_owned();
        let pid = lines.next()?.parse().ok()?;
        let leases = lines.next()?.parse().ok()?;
        let label = lines.next()?.to_owned();
        Some(ClientRecord {
            label,
            host,
            pid,
            version,
            leases,
        })
    }
}

/// Checks a client label: at most [`MAX_LABEL_LEN`] bytes, no control characters.
pub fn check_label(label: &str) -> Result<(), Error> {
    if label.len() > MAX_LABEL_LEN || label.chars().any(char::is_control) {
        return Err(InvalidArgument::Setting(format!(
            "a client label is at most {MAX_LABEL_LEN} bytes without control characters, got {label:?}"
        ))
        .into());
    }
    Ok(())
}

/// A live client, as [`read`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// Its id: the first characters of every token it draws
    /// ([`CLIENT_ID_LEN`](super::CLIENT_ID_LEN) hex digits).
    pub id: String,
    /// What it said about itself at its last heartbeat (an entry this version cannot read
    /// has only `label` set, to the entry's text).
    pub record: ClientRecord,
    /// Its last heartbeat, server time in ms since the Unix epoch.
    pub heartbeat_ms: u64,
    /// How long ago its last heartbeat was, by the server's clock.
    pub since_heartbeat: Duration,
    /// How long its entry stays without another heartbeat.
    pub expires_in: Duration,
}

/// A heartbeat: the server time it was recorded at (ms).
#[derive(Debug, Clone, Copy, Default)]
pub struct Beat;

impl OpKind for Beat {
    type Output = u64;
    const CONTEXT: &'static str = "client heartbeat";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<u64, Error>> {
        Some(Ok(u64::try_from(reply.as_int()?).ok()?))
    }
}

/// Leaving: whether the client was registered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Leave;

impl OpKind for Leave {
    type Output = bool;
    const CONTEXT: &'static str = "leaving the client registry";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<bool, Error>> {
        Some(Ok(reply.as_int()? == 1))
    }
}

/// Reading the live clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadClients;

fn text(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) => String::from_utf8(b.clone()).ok(),
        Reply::Status(s) => Some(s.clone()),
        _ => None,
    }
}

impl OpKind for ReadClients {
    type Output = Vec<ClientInfo>;
    const CONTEXT: &'static str = "client registry";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Vec<ClientInfo>, Error>> {
        let [now, entries @ ..] = reply.as_array()? else {
            return None;
        };
        let now = u64::try_from(now.as_int()?).ok()?;
        let clients = entries
            .chunks(3)
            .map(|c| {
                let [id, until, entry] = c else { return None };
                let until = u64::try_from(until.as_int()?).ok()?;
                let entry = text(entry)?;
                let (beat, record) = entry.split_once('\n').unwrap_or(("0", &entry));
                let heartbeat_ms = beat.parse().unwrap_or(0);
                let record = ClientRecord::decode(record).unwrap_or_else(|| ClientRecord {
                    label: record.to_owned(),
                    ..Default::default()
                });
                Some(ClientInfo {
                    id: text(id)?,
                    record,
                    heartbeat_ms,
                    since_heartbeat: Duration::from_millis(now.saturating_sub(heartbeat_ms)),
                    expires_in: Duration::from_millis(until.saturating_sub(now)),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Ok(clients))
    }
}

fn target(keyspace: &Keyspace) -> Target {
    Target::new("client registry", keys(keyspace).to_vec())
}

/// A heartbeat of client `id` with `record`, its entry kept for `keep` (checked as a ttl:
/// 10 ms to 100 years), giving up at `deadline`.
pub fn beat(
    keyspace: &Keyspace,
    id: &str,
    keep: Duration,
    record: &ClientRecord,
    deadline: Instant,
) -> Result<ScriptOp<Beat>, Error> {
    let keep = crate::lease::validate_ttl("registry entry lifetime", keep)?;
    let [registry, heartbeats] = keys(keyspace);
    let call = ScriptCall::new(&BEAT)
        .keys(&[&registry, &heartbeats])
        .arg(id)
        .arg(keep.to_string())
        .arg(record.encode());
    Ok(ScriptOp::new(Beat, call, target(keyspace), None, deadline))
}

/// Client `id` leaves the registry, giving up at `deadline`.
pub fn leave(keyspace: &Keyspace, id: &str, deadline: Instant) -> ScriptOp<Leave> {
    let [registry, heartbeats] = keys(keyspace);
    let call = ScriptCall::new(&LEAVE)
        .keys(&[&registry, &heartbeats])
        .arg(id);
    ScriptOp::new(Leave, call, target(keyspace), None, deadline)
}

/// Reads the live clients, giving up at `deadline`: one read-only script.
pub fn read(keyspace: &Keyspace, deadline: Instant) -> ScriptOp<ReadClients> {
    let [registry, heartbeats] = keys(keyspace);
    let call = ScriptCall::new(&READ).keys(&[&registry, &heartbeats]);
    ScriptOp::new(ReadClients, call, target(keyspace), None, deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_labels_are_checked() {
        let r = ClientRecord::new("a label: with\tno newline", "h", 1, "0.1", 2);
        assert!(r.is_err(), "a tab is a control character");
        let r = ClientRecord::new("billing 7 / east", "host\nname", 42, "1.2.3", 9).unwrap();
        assert_eq!(r.host, "hostname");
        assert_eq!(ClientRecord::decode(&r.encode()), Some(r));
        assert!(ClientRecord::new(&"x".repeat(MAX_LABEL_LEN + 1), "", 0, "", 0).is_err());
        assert!(ClientRecord::decode("2\nwhatever").is_none());
        assert_eq!(clean("ééé", 5), "éé");
    }
}
