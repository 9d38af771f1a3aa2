//! Which Redis Cluster master owns a key, so that the watchdog can batch renewals by node
//! (a frozen master then stalls only its own batch). A hint, not a route: commands are
//! still routed (and redirected) by the cluster connection; a stale table only groups a
//! lease with the wrong node's batch until the next refresh.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;

/// How long a slot table is trusted before the next renewal batch asks again.
const REFRESH: Duration = Duration::from_secs(5);

/// The cluster's slot ranges and their masters, as `CLUSTER SLOTS` last said.
#[derive(Debug, Default)]
pub(crate) struct SlotTable {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    /// `(first slot, last slot, master address)`.
    ranges: Vec<(u16, u16, String)>,
    fetched: Option<Instant>,
}

impl SlotTable {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The address of the master owning `key`'s slot; empty when not known (yet).
    pub(crate) fn node_of(&self, key: &str) -> String {
        let slot = slot(key.as_bytes());
        self.table()
            .ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, addr)| addr.clone())
            .unwrap_or_default()
    }

    /// Every master's address, sorted, once each.
    pub(crate) fn masters(&self) -> Vec<String> {
        let mut masters: Vec<String> = self
            .table()
            .ranges
            .iter()
            .map(|(_, _, addr)| addr.clone())
            .collect();
        masters.sort();
        masters.dedup();
        masters
    }

    /// Whether the table should be fetched again.
    pub(crate) fn is_stale(&self) -> bool {
        self.table().fetched.is_none_or(|t| t.elapsed() >= REFRESH)
    }

    /// Takes a `CLUSTER SLOTS` reply (ignored if it is not one).
    pub(crate) fn update(&self, reply: &Value) {
        let Value::Array(entries) = reply else { return };
        let mut ranges = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Array(fields) = entry else { return };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return;
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
                Some(Value::SimpleString(h)) => h.clone(),
                _ => return,
            };
            let (Some(Value::Int(port)), Ok(first), Ok(last)) =
                (master.get(1), u16::try_from(*first), u16::try_from(*last))
            else {
                return;
            };
            ranges.push((first, last, format!("{host}:{port}")));
        }
        let mut table = self.table();
        table.ranges = ranges;
        table.fetched = Some(Instant::now());
    }
}

/// The cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the
/// first `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"foo"), 12182);
        // The CRC16/XMODEM check value.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"redlease:{job}:lock"), slot(b"job"));
        assert_eq!(slot(b"a{}b"), crc16(b"a{}b") % 16384);
    }

    #[test]
    fn a_cluster_slots_reply_maps_keys_to_masters() {
        let table = SlotTable::default();
        assert!(table.is_stale());
        assert_eq!(table.node_of("foo"), "");
        let node = |first: i64, last: i64, port: i64| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![
                    Value::BulkString(b"127.0.0.1".to_vec()),
                    Value::Int(port),
                ]),
            ])
        };
        table.update(&Value::Array(vec![
            node(0, 8191, 7000),
            node(8192, 16383, 7001),
        ]));
        assert!(!table.is_stale());
        assert_eq!(table.node_of("foo"), "127.0.0.1:7001");
        assert_eq!(
            table.node_of("{a}"),
            format!("127.0.0.1:{}", 7000 + u16::from(slot(b"a") > 8191))
        );
    }
}
