//! Rate limiters: GCRA on the server's clock (see [`redlease_core::rate`]).

use std::time::Duration;

use redlease_core::Error;
use redlease_core::backoff::saturating_add;
use redlease_core::rate::{self, RateLimiterSpec, Throttle};

use crate::api::client::Client;

pub use redlease_core::rate::{Decision, RateLimit};

impl Client {
    /// The rate limiter `name` (key `<prefix>:{<name>}:rate`): set its rate with
    /// [`RateLimiterBuilder::rate`] (and its burst), then [`build`](RateLimiterBuilder::build).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # fn main() -> Result<(), redlease::Error> {
    /// let client = redlease::Client::open("redis://127.0.0.1/")?;
    /// // 100 calls a second across the whole fleet, up to 20 at once.
    /// let limiter = client
    ///     .rate_limiter("partner-api")
    ///     .rate(100, Duration::from_secs(1))
    ///     .burst(20)
    ///     .build()?;
    /// let decision = limiter.try_acquire(1)?;
    /// if !decision.allowed {
    ///     println!("slow down: try again in {:?}", decision.retry_after);
    /// }
    /// // Or wait for it (at most 2 s; Timeout at once if it cannot come in time).
    /// limiter.acquire(1, Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn rate_limiter(&self, name: &str) -> RateLimiterBuilder<'_> {
        RateLimiterBuilder {
            client: self,
            name: name.to_owned(),
            rate: None,
            burst: None,
        }
    }
}

/// Settings of a [`RateLimiter`]; made by [`Client::rate_limiter`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct RateLimiterBuilder<'a> {
    client: &'a Client,
    name: String,
    rate: Option<(u64, Duration)>,
    burst: Option<u64>,
}

impl RateLimiterBuilder<'_> {
    /// `n` units per `period` (one unit every `period / n`, rounded up to the microsecond).
    /// Required. `n` at least 1 and at most one per microsecond; `period` 1 µs to
    /// [`MAX_WINDOW`](redlease_core::rate::MAX_WINDOW) (10 years), checked by
    /// [`build`](Self::build).
    pub fn rate(mut self, n: u64, period: Duration) -> Self {
        self.rate = Some((n, period));
        self
    }

    /// How many units may be taken at once from a full limiter: 1 to
    /// [`MAX_BURST`](redlease_core::rate::MAX_BURST), and refilled within
    /// [`MAX_WINDOW`](redlease_core::rate::MAX_WINDOW). Defaults to `n` of
    /// [`rate`](Self::rate) (one period's worth).
    pub fn burst(mut self, units: u64) -> Self {
        self.burst = Some(units);
        self
    }

    /// Checks the settings (a missing or zero rate, a zero period or burst, absurd values,
    /// an empty name: [`Error::InvalidArgument`]) and makes the limiter. Nothing is sent.
    pub fn build(self) -> Result<RateLimiter, Error> {
        let Some((n, period)) = self.rate else {
            return Err(redlease_core::InvalidArgument::Setting(format!(
                "rate limiter {:?}: no rate was set (call .rate(n, period))",
                self.name
            ))
            .into());
        };
        let limit = RateLimit::new(n, period, self.burst.unwrap_or(n))?;
        let spec = RateLimiterSpec::new(&self.client.shared().keyspace, &self.name, limit)?;
        Ok(RateLimiter {
            client: self.client.clone(),
            spec,
        })
    }
}

/// A rate limiter shared by every process that uses the same name and limit: GCRA on the
/// server's clock, one key (expiring once the limiter is full again). Made by
/// [`Client::rate_limiter`]; cheap to clone.
///
/// Every process must use the same rate and burst for one name: each decision applies the
/// limit its caller passes to the state the key holds.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    client: Client,
    spec: RateLimiterSpec,
}

impl RateLimiter {
    /// The limiter's name.
    pub fn name(&self) -> &str {
        self.spec.name()
    }

    /// Its limit.
    pub fn limit(&self) -> RateLimit {
        self.spec.limit()
    }

    fn deadline(&self) -> std::time::Instant {
        let shared = self.client.shared();
        saturating_add(shared.time.now(), shared.op_timeout)
    }

    /// Takes `cost` units if the limit allows it now: one round trip, never waits. A denial
    /// is an `Ok` [`Decision`] with `allowed: false` and its `retry_after`. `cost` is 0 to
    /// the burst (more could never be allowed: [`Error::InvalidArgument`]). A reply lost in
    /// transit is not resent ([`Error::Unavailable`]; the units may have been taken).
    pub fn try_acquire(&self, cost: u64) -> Result<Decision, Error> {
        self.client
            .run(rate::try_acquire(&self.spec, cost, self.deadline())?)
    }

    /// Takes `cost` units, waiting at most `wait` for them: when denied, it sleeps exactly
    /// until the `retry_after` the server gave (no polling) and asks again; when that is
    /// later than `wait` allows, it fails at once with [`Error::Timeout`] instead of
    /// sleeping in vain. `Duration::MAX` waits without a deadline. Returns the allowing
    /// [`Decision`].
    pub fn acquire(&self, cost: u64, wait: Duration) -> Result<Decision, Error> {
        let shared = self.client.shared();
        let machine = Throttle::new(&self.spec, cost, wait, shared.op_timeout, shared.time.now())?;
        self.client.run(machine)
    }

    /// What taking one unit would decide now, taking nothing: `remaining` is what could be
    /// taken at once, `reset_after` the time until the limiter is full.
    pub fn peek(&self) -> Result<Decision, Error> {
        self.client.run(rate::peek(&self.spec, self.deadline()))
    }

    /// Makes the limiter full again (deletes its key).
    pub fn reset(&self) -> Result<(), Error> {
        self.client.run(rate::reset(&self.spec, self.deadline()))
    }
}
