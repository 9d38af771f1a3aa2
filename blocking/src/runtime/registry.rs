//! The registry of live clients, as a client takes part in it: its settings (made by the
//! builder) and its entry, whose heartbeat the watchdog's tick sends. Reading the registry
//! ([`Client::clients`](crate::Client::clients)) is the inspection API's.

use std::sync::Arc;
use std::time::Duration;

use redlease_core::inspect::registry::{self, ClientRecord};
use redlease_core::keys::Keyspace;
use redlease_core::{Error, InvalidArgument};

/// The default interval between two heartbeats of a registered client.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

/// How many heartbeat intervals a registry entry outlives its last heartbeat.
const KEEP_BEATS: u32 = 3;

/// The shortest heartbeat interval accepted.
const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// The longest heartbeat interval accepted.
const MAX_HEARTBEAT: Duration = Duration::from_secs(3600);

/// The registry settings of a [`ClientBuilder`].
#[derive(Debug, Clone, Default)]
pub(crate) struct RegistrySettings {
    /// `Some`: on (explicitly, or by a label); `None`: the default, off.
    pub(crate) on: Option<bool>,
    pub(crate) label: String,
    pub(crate) heartbeat: Option<Duration>,
}

/// A registered client's part of the registry: what its watchdog's tick sends.
#[derive(Debug)]
pub(crate) struct RegistryEntry {
    pub(crate) keyspace: Keyspace,
    /// The client's id (hex), the first characters of its tokens.
    pub(crate) id: String,
    /// How often it beats.
    pub(crate) every: Duration,
    /// How long an entry lives after a heartbeat.
    pub(crate) keep: Duration,
    /// The record, `leases` filled in at each heartbeat.
    record: ClientRecord,
}

impl RegistryEntry {
    /// The record with `leases` watched now.
    pub(crate) fn record(&self, leases: u64) -> ClientRecord {
        let mut record = self.record.clone();
        record.leases = leases;
        record
    }

    /// The first key of the registry (it names the node its calls go to on a Cluster).
    pub(crate) fn key(&self) -> String {
        let [registry, _] = registry::keys(&self.keyspace);
        registry
    }
}

/// The name this host gives itself (empty when it cannot be read without a system call
/// this crate does not make: `/proc/sys/kernel/hostname` on Linux, else `HOSTNAME` or
/// `COMPUTERNAME`).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

impl RegistrySettings {
    /// Checks the settings (at build time).
    pub(crate) fn check(&self) -> Result<(), Error> {
        registry::check_label(&self.label)?;
        if let Some(every) = self.heartbeat
            && !(MIN_HEARTBEAT..=MAX_HEARTBEAT).contains(&every)
        {
            return Err(InvalidArgument::Setting(format!(
                "the registry heartbeat must be {MIN_HEARTBEAT:?} to {MAX_HEARTBEAT:?}, got {every:?}"
            ))
            .into());
        }
        Ok(())
    }

    /// The registration of a client whose id is `id`, if the registry is on.
    pub(crate) fn registration(
        &self,
        keyspace: &Keyspace,
        id: &str,
    ) -> Result<Option<Arc<RegistryEntry>>, Error> {
        self.check()?;
        if self.on != Some(true) {
            return Ok(None);
        }
        let every = self.heartbeat.unwrap_or(DEFAULT_HEARTBEAT);
        let record = ClientRecord::new(
            &self.label,
            &host_name(),
            std::process::id(),
            env!("CARGO_PKG_VERSION"),
            0,
        )?;
        Ok(Some(Arc::new(RegistryEntry {
            keyspace: keyspace.clone(),
            id: id.to_owned(),
            every,
            keep: every * KEEP_BEATS,
            record,
        })))
    }
}
