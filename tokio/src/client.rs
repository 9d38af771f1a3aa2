//! The client handle and its builder.

use std::sync::Arc;
use std::time::Duration;

use redlease_core::InvalidArgument;
use redlease_core::keys::Keyspace;
use tokio::sync::mpsc;

use crate::Error;
use crate::driver::{Command, Driver};
use crate::lock::Lock;
use crate::runtime::{Runtime, Tokio};

/// How long one call to Redis may take by default.
const DEFAULT_IO_TIMEOUT: Duration = Duration::from_secs(2);
/// The lease of a lock by default (renewed while its guard lives).
const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(30);

/// Configures a [`Client`]; made by [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ClientBuilder {
    url: String,
    prefix: Option<String>,
    io_timeout: Duration,
    lock_ttl: Duration,
}

impl ClientBuilder {
    /// The prefix of every key. Defaults to `redlease`.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Some(prefix.to_owned());
        self
    }

    /// How long one call to Redis may take (connecting, every batch of commands): past it
    /// the call fails with a timeout rather than waiting on. Defaults to 2 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// The lease of a lock acquired through this client; the driver renews it every third
    /// of it while the guard lives. Defaults to 30 s.
    pub fn lock_ttl(mut self, ttl: Duration) -> Self {
        self.lock_ttl = ttl;
        self
    }

    /// Checks the settings, connects (within the io timeout) and starts the client's
    /// driver task on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Core`] with an invalid argument for a bad prefix, ttl or io timeout;
    /// [`Error::Connect`] for a bad URL or a refused connection; [`Error::ConnectTimeout`];
    /// [`Error::NoRuntime`] when called outside a tokio runtime.
    pub async fn build(self) -> Result<Client, Error> {
        let runtime = Tokio::current().ok_or(Error::NoRuntime)?;
        self.build_on(Arc::new(runtime)).await
    }

    /// [`build`](Self::build) on another [`Runtime`].
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build).
    pub async fn build_on(self, runtime: Arc<dyn Runtime>) -> Result<Client, Error> {
        let keyspace = match &self.prefix {
            Some(p) => Keyspace::new(p)?,
            None => Keyspace::default(),
        };
        redlease_core::lease::validate_ttl("lock_ttl", self.lock_ttl)?;
        // TODO(core): the core checks ttls (`lease::validate_ttl`) but has no check for a
        // reply timeout; the blocking crate's builder has its own. One `limits` rule for it
        // should move to the core.
        if self.io_timeout < Duration::from_millis(1) || self.io_timeout > Duration::from_secs(3600)
        {
            return Err(redlease_core::Error::from(InvalidArgument::Setting(format!(
                "io_timeout must be between 1ms and 1h, got {:?}",
                self.io_timeout
            )))
            .into());
        }
        let redis = redis::Client::open(self.url.as_str()).map_err(Error::Connect)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let driver = Driver::connect(
            redis,
            Arc::clone(&runtime),
            self.io_timeout,
            rx,
            tx.downgrade(),
        )
        .await?;
        runtime.spawn(Box::pin(driver.run()));
        Ok(Client {
            shared: Arc::new(Shared {
                tx,
                keyspace,
                io_timeout: self.io_timeout,
                lock_ttl: self.lock_ttl,
                runtime,
            }),
        })
    }
}

/// A cheap, cloneable handle on one client: its driver task, connection and subscription.
/// The driver ends once every handle, lock and guard of the client is gone and what they
/// queued (releases) is done.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("keyspace", &self.shared.keyspace)
            .field("io_timeout", &self.shared.io_timeout)
            .finish_non_exhaustive()
    }
}

/// What the handles share.
pub(crate) struct Shared {
    pub(crate) tx: mpsc::UnboundedSender<Command>,
    pub(crate) keyspace: Keyspace,
    pub(crate) io_timeout: Duration,
    pub(crate) lock_ttl: Duration,
    pub(crate) runtime: Arc<dyn Runtime>,
}

impl Client {
    /// A builder for a client of the server at `url` (`redis://host:port/db`).
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            prefix: None,
            io_timeout: DEFAULT_IO_TIMEOUT,
            lock_ttl: DEFAULT_LOCK_TTL,
        }
    }

    /// The fenced lease lock `name` (its keys are `<prefix>:{<name>}:...`).
    ///
    /// # Errors
    ///
    /// [`Error::Core`] with an invalid argument for an empty or too long name.
    pub fn lock(&self, name: &str) -> Result<Lock, Error> {
        Lock::new(Arc::clone(&self.shared), name)
    }
}
