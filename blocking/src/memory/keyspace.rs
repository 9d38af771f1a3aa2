//! The data: strings, hashes, sorted sets and lists, each key with an optional expiry in
//! milliseconds on the server's (virtual) clock.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// A sorted-set score: an `f64` ordered with `total_cmp` (never NaN: parsing refuses it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Score(pub(crate) f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        // -0.0 and 0.0 are one score in Redis.
        let a = if self.0 == 0.0 { 0.0 } else { self.0 };
        let b = if other.0 == 0.0 { 0.0 } else { other.0 };
        a.total_cmp(&b)
    }
}

/// A sorted set: members ordered by (score, member bytes), as Redis orders them.
#[derive(Debug, Clone, Default)]
pub(crate) struct ZSet {
    pub(crate) order: BTreeSet<(Score, Vec<u8>)>,
    pub(crate) scores: HashMap<Vec<u8>, f64>,
}

impl ZSet {
    /// Sets `member`'s score; true if it was new.
    pub(crate) fn insert(&mut self, member: &[u8], score: f64) -> bool {
        match self.scores.insert(member.to_vec(), score) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                self.order.insert((Score(score), member.to_vec()));
                false
            }
            None => {
                self.order.insert((Score(score), member.to_vec()));
                true
            }
        }
    }

    /// Removes `member`; true if it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(old) => {
                self.order.remove(&(Score(old), member.to_vec()));
                true
            }
            None => false,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.scores.len()
    }
}

/// A value of one of the four types the scripts use.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    Str(Vec<u8>),
    Hash(HashMap<Vec<u8>, Vec<u8>>),
    ZSet(ZSet),
    List(VecDeque<Vec<u8>>),
}

impl Value {
    /// What `TYPE` answers.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::ZSet(_) => "zset",
            Value::List(_) => "list",
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::ZSet(z) => z.len() == 0,
            Value::List(l) => l.is_empty(),
        }
    }
}

/// A key's value and its expiry (Unix ms on the server's clock).
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) value: Value,
    pub(crate) expires_at: Option<i64>,
}

/// All keys of the one database.
#[derive(Debug, Clone, Default)]
pub(crate) struct Db {
    map: HashMap<Vec<u8>, Entry>,
    /// Counts changes (conservatively: every mutable access counts as one), so that a
    /// waiter can tell whether anything changed since its last answer.
    version: u64,
}

impl Db {
    /// Drops `key` if its expiry has passed (Redis: expired when `now > when`).
    fn expire_if_due(&mut self, key: &[u8], now_ms: i64) {
        if let Some(e) = self.map.get(key)
            && e.expires_at.is_some_and(|at| now_ms > at)
        {
            self.map.remove(key);
            self.version += 1;
        }
    }

    /// The live entry of `key`.
    pub(crate) fn get(&mut self, key: &[u8], now_ms: i64) -> Option<&Entry> {
        self.expire_if_due(key, now_ms);
        self.map.get(key)
    }

    /// The live entry of `key`, mutable.
    pub(crate) fn get_mut(&mut self, key: &[u8], now_ms: i64) -> Option<&mut Entry> {
        self.expire_if_due(key, now_ms);
        let entry = self.map.get_mut(key);
        if entry.is_some() {
            self.version += 1;
        }
        entry
    }

    /// Replaces `key` (value and expiry).
    pub(crate) fn set(&mut self, key: &[u8], value: Value, expires_at: Option<i64>) {
        self.map.insert(key.to_vec(), Entry { value, expires_at });
        self.version += 1;
    }

    /// Removes `key`; true if it was live.
    pub(crate) fn remove(&mut self, key: &[u8], now_ms: i64) -> bool {
        self.expire_if_due(key, now_ms);
        let removed = self.map.remove(key).is_some();
        self.version += u64::from(removed);
        removed
    }

    /// Removes `key` if its collection became empty (Redis never keeps an empty one).
    pub(crate) fn drop_if_empty(&mut self, key: &[u8]) {
        if self.map.get(key).is_some_and(|e| e.value.is_empty()) {
            self.map.remove(key);
            self.version += 1;
        }
    }

    /// How many changes were made (never goes back: see [`follow`](Self::follow)).
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Takes the place of `before` (a restart): counts on from its changes, plus one.
    pub(crate) fn follow(&mut self, before: &Db) {
        self.version = self.version.max(before.version) + 1;
    }

    /// Live keys.
    pub(crate) fn len(&mut self, now_ms: i64) -> usize {
        self.map
            .retain(|_, e| e.expires_at.is_none_or(|at| now_ms <= at));
        self.map.len()
    }

    /// Every live key, sorted.
    pub(crate) fn keys(&mut self, now_ms: i64) -> Vec<Vec<u8>> {
        self.len(now_ms);
        let mut keys: Vec<Vec<u8>> = self.map.keys().cloned().collect();
        keys.sort();
        keys
    }

    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.version += 1;
    }
}
