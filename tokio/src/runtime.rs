//! The runtime seam: everything the driver needs from an async runtime.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// A boxed future the driver can hold.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the driver needs from a runtime: spawning its task, one sleep and the time. Tests can
/// put a virtual clock behind it; [`Tokio`] is the default.
pub trait Runtime: Send + Sync + 'static {
    /// Runs `task` in the background.
    fn spawn(&self, task: BoxFuture<()>);
    /// A future that completes at `at`.
    fn sleep_until(&self, at: Instant) -> BoxFuture<()>;
    /// The current time.
    fn now(&self) -> Instant;
}

/// The tokio runtime the client was built in (its [`Handle`](tokio::runtime::Handle)).
#[derive(Debug, Clone)]
pub struct Tokio(tokio::runtime::Handle);

impl Tokio {
    /// The runtime of the calling task, `None` outside one.
    pub fn current() -> Option<Tokio> {
        tokio::runtime::Handle::try_current().ok().map(Tokio)
    }
}

impl Runtime for Tokio {
    fn spawn(&self, task: BoxFuture<()>) {
        drop(self.0.spawn(task));
    }

    fn sleep_until(&self, at: Instant) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep_until(tokio::time::Instant::from_std(at)))
    }

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}
