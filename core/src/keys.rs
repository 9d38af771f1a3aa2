//! Key names: every key of one primitive instance shares one cluster hash tag,
//! `<prefix>:{<name>}:<part>`, so multi-key scripts work on Redis Cluster.

use crate::error::{Error, InvalidArgument};

/// The longest name or prefix accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "redlease";

/// A validated key prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyspace {
    prefix: String,
    sharded: bool,
}

impl Keyspace {
    /// Validates `prefix`: not empty, at most [`MAX_NAME_LEN`] bytes, and without `{` or `}`
    /// (which would move the cluster hash tag into the prefix and put every primitive in one slot).
    pub fn new(prefix: &str) -> Result<Self, Error> {
        if prefix.is_empty() {
            return Err(InvalidArgument::EmptyPrefix.into());
        }
        if prefix.len() > MAX_NAME_LEN {
            return Err(InvalidArgument::NameTooLong {
                len: prefix.len(),
                max: MAX_NAME_LEN,
            }
            .into());
        }
        if prefix.contains(['{', '}']) {
            return Err(InvalidArgument::Setting(format!(
                "the key prefix {prefix:?} must not contain '{{' or '}}' (the name is the cluster hash tag)"
            ))
            .into());
        }
        Ok(Keyspace {
            prefix: prefix.to_owned(),
            sharded: false,
        })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Announces releases on shard channels (`SPUBLISH`, Redis 7 Cluster): a message reaches
    /// only the subscribers of the key's shard instead of being broadcast to every node.
    pub fn with_sharded_pubsub(mut self, sharded: bool) -> Self {
        self.sharded = sharded;
        self
    }

    /// Whether releases are announced on shard channels.
    pub fn sharded_pubsub(&self) -> bool {
        self.sharded
    }

    /// How scripts are told to announce on `channel`: the channel itself, or marked
    /// `{shard}<channel>` for `SPUBLISH` (no channel of ours starts with a brace).
    pub fn notify_arg(&self, channel: &str) -> String {
        if self.sharded {
            cat(&["{shard}", channel])
        } else {
            channel.to_owned()
        }
    }

    /// Checks a primitive's name and returns the stem `<prefix>:{<name>}` its keys share.
    /// A name is 1 to [`MAX_NAME_LEN`] bytes and does not start with `}` (which would leave
    /// an empty hash tag `{}`, so the keys would not share a cluster slot); any other bytes,
    /// braces included, are fine: the hash tag is then `name` up to its first `}`, which
    /// every key of the primitive still shares.
    pub fn stem(&self, name: &str) -> Result<String, Error> {
        if name.is_empty() {
            return Err(InvalidArgument::EmptyName.into());
        }
        if name.len() > MAX_NAME_LEN {
            return Err(InvalidArgument::NameTooLong {
                len: name.len(),
                max: MAX_NAME_LEN,
            }
            .into());
        }
        if name.starts_with('}') {
            // `{}...` is an empty hash tag: Redis Cluster would then hash each whole key, put
            // the primitive's keys in different slots and fail its scripts with CROSSSLOT.
            return Err(InvalidArgument::Setting(format!(
                "the name {name:?} must not start with '}}': keys are `<prefix>:{{<name>}}:<part>` and an empty hash tag `{{}}` would spread them over cluster slots"
            ))
            .into());
        }
        Ok(cat(&[&self.prefix, ":{", name, "}"]))
    }
}

/// `parts` joined: one allocation of the exact size (key names are built for every
/// acquisition; `format!` costs several times as much).
pub(crate) fn cat(parts: &[&str]) -> String {
    let mut s = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        s.push_str(p);
    }
    s
}

impl Default for Keyspace {
    fn default() -> Self {
        Keyspace {
            prefix: DEFAULT_PREFIX.to_owned(),
            sharded: false,
        }
    }
}

/// The keys of one lease lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// The lock's name as the caller gave it.
    pub name: String,
    /// The lock key: a string holding the owner's token, with the lease as its expiry.
    pub lock: String,
    /// The fencing counter: raised by every successful acquisition (to at least the server
    /// clock in µs); never expires.
    pub fence: String,
    /// The pub/sub channel a release is announced on.
    pub channel: String,
    /// The channel as passed to scripts (see [`Keyspace::notify_arg`]).
    pub notify: String,
}

impl LockKeys {
    /// The keys of lock `name` in `keyspace`.
    pub fn new(keyspace: &Keyspace, name: &str) -> Result<Self, Error> {
        let stem = keyspace.stem(name)?;
        let channel = cat(&[&stem, ":released"]);
        Ok(LockKeys {
            name: name.to_owned(),
            lock: cat(&[&stem, ":lock"]),
            fence: cat(&[&stem, ":fence"]),
            notify: keyspace.notify_arg(&channel),
            channel,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The part of `key` Redis Cluster hashes: between the first `{` and the next `}`, if
    /// not empty; else the whole key.
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn keys_share_the_name_as_hash_tag() {
        let keys = LockKeys::new(&Keyspace::default(), "orders").unwrap();
        assert_eq!(keys.lock, "redlease:{orders}:lock");
        assert_eq!(keys.fence, "redlease:{orders}:fence");
        assert_eq!(keys.channel, "redlease:{orders}:released");
    }

    #[test]
    fn bad_names_and_prefixes_are_rejected() {
        let ks = Keyspace::default();
        assert_eq!(
            LockKeys::new(&ks, ""),
            Err(Error::InvalidArgument(InvalidArgument::EmptyName))
        );
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            LockKeys::new(&ks, &long),
            Err(Error::InvalidArgument(InvalidArgument::NameTooLong { .. }))
        ));
        assert_eq!(
            Keyspace::new(""),
            Err(Error::InvalidArgument(InvalidArgument::EmptyPrefix))
        );
        assert!(Keyspace::new("app{x}").is_err());
        // An empty hash tag would spread the keys over cluster slots (CROSSSLOT).
        let e = LockKeys::new(&ks, "}x").unwrap_err().to_string();
        assert!(e.contains("must not start with '}'"), "{e}");
        assert!(ks.stem("}").is_err());
        // Braces elsewhere keep a non-empty tag that every key shares.
        for name in ["a}b", "{a", "a{b}", "x}"] {
            let keys = LockKeys::new(&ks, name).unwrap();
            assert_eq!(hash_tag(&keys.lock), hash_tag(&keys.fence), "{name}");
            assert!(!hash_tag(&keys.lock).is_empty(), "{name}");
        }
        assert_eq!(Keyspace::new("app").unwrap().stem("a").unwrap(), "app:{a}");
    }
}
