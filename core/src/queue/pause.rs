//! Pausing a queue, or one group of its jobs, and waiting for its jobs in flight to finish.
//!
//! ```text
//!   pause ──EVALSHA pause('pause', '*')──► HSETNX pauses '*' now ── every take script reads it:
//!            nothing is leased after the reply (due and expired jobs still become ready)
//!   resume ─EVALSHA pause('resume', '*')─► HDEL pauses '*' ── PUBLISH pushed '*': every idle taker
//!   paused_at ─EVALSHA_RO pause_state('*')─► HGET pauses '*' (read only)
//!
//!   Drain ──EVALSHA pause('drain')──► {0, -2} ──────────────────────────► Done(Ok(true))
//!     ▲                               {n live leases, ms to the first expiry}
//!     │                                 │ past the deadline ───────────► Done(Ok(false))
//!     │                                 ▼
//!     └──── an ack / nack announces ── Wait(until the first lease runs out, or the deadline;
//!           on the drain channel          woken on the drain channel)
//! ```
//!
//! The pause is a field of the queue's `paused` hash (`<prefix>:{<name>}:q:paused`): `*`
//! pauses the whole queue, `g:<group id>` one group (the value is the server's ms at the
//! pause). The take scripts (`dequeue.lua`, `ack_take.lua`, the batch take) read `*` inside
//! the script that would lease, so a take that the server runs after the pause's reply leases
//! nothing, whether it was sent before or after, and a taker blocked in its wait takes
//! nothing when it wakes. The group-take script reads `g:<group id>` for the groups it
//! would serve; jobs pushed without a group are not affected by a group's pause.
//!
//! Draining: while a drain waiter is recorded (the `drain` field, set by a [`Drain`] while jobs
//! are in flight, dropped by [`resume`] or when nothing is left), every ack and nack
//! announces on the drain channel, so the waiter counts again at once; without any
//! announcement it counts again when the first live lease would run out (a lease renewed by
//! its watchdog moves that time on; a lease that ran out is no longer in flight).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use redlease_core::keys::Keyspace;
//! use redlease_core::protocol::{Protocol, Step};
//! use redlease_core::queue::{QueueKeys, pause};
//! use redlease_core::reply::{Reply, Response};
//!
//! let keys = QueueKeys::new(&Keyspace::new("app").unwrap(), "mail").unwrap();
//! let now = Instant::now();
//! let mut drain = pause::Drain::new(&keys, Duration::from_secs(5), Duration::from_secs(1), now);
//! // It pauses and counts: two jobs in flight, the first lease runs out in 800 ms.
//! let Step::Send(batch) = drain.poll(now) else { panic!() };
//! let id = batch.requests[0].id;
//! drain.handle(Response::reply(id, Reply::Array(vec![Reply::Int(2), Reply::Int(800)])), now);
//! // It waits for an ack's announcement, or for the first lease to run out.
//! let Step::Wait(wait) = drain.poll(now) else { panic!() };
//! assert_eq!(wait.until, now + Duration::from_millis(800));
//! assert!(wait.wake_on.is_some());
//! // An ack announces: it counts again, and nothing is left.
//! drain.wake(now);
//! let Step::Send(batch) = drain.poll(now) else { panic!() };
//! let id = batch.requests[0].id;
//! drain.handle(Response::reply(id, Reply::Array(vec![Reply::Int(0), Reply::Int(-2)])), now);
//! assert!(matches!(drain.poll(now), Step::Done(Ok(true))));
//! ```

use std::time::{Duration, Instant};

use super::{MAX_ID_LEN, QueueKeys, scripts};
use crate::backoff::saturating_add;
use crate::error::{Error, InvalidArgument};
use crate::lease::{OpKind, ScriptOp};
use crate::protocol::{Protocol, Step, Wait, WakeOn};
use crate::reply::{Reply, Response};
use crate::script::ScriptCall;

/// What a pause applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PauseScope {
    /// The whole queue: no job is leased.
    Queue,
    /// One group: none of the group's jobs is leased (jobs without a group, and other
    /// groups' jobs, are). The id is 1 to [`MAX_ID_LEN`] bytes.
    Group(String),
}

impl PauseScope {
    /// The field of the `paused` hash: `*` or `g:<group id>`.
    fn field(&self) -> Result<String, Error> {
        match self {
            PauseScope::Queue => Ok("*".to_owned()),
            PauseScope::Group(id) if id.is_empty() || id.len() > MAX_ID_LEN => {
                Err(InvalidArgument::Setting(format!(
                    "a group id must be 1 to {MAX_ID_LEN} bytes, got {}",
                    id.len()
                ))
                .into())
            }
            // An id that no group can have (see groups::check_group) is refused too.
            PauseScope::Group(id) if id.contains(super::groups::SEPARATOR) => {
                super::groups::check_group(id).map(|()| String::new())
            }
            PauseScope::Group(id) => Ok(format!("g:{id}")),
        }
    }
}

fn call(keys: &QueueKeys, op: &str, field: &str) -> ScriptCall {
    let base: [&str; 3] = [&keys.paused, &keys.inflight, &keys.sibling_inflight];
    let call = ScriptCall::new(&scripts::PAUSE);
    // A group's resume names its group's keys too: it brings the group back to the ring.
    let call = match field.strip_prefix("g:") {
        Some(group) if op == "resume" => {
            let g = |part: &str| format!("{}{part}", keys.group_stem);
            let own = [
                g("aside"),
                g("ring"),
                g("turn"),
                g("blocked"),
                g("full"),
                g(&format!("r:{group}")),
            ];
            call.keys(&base)
                .keys(&own.iter().map(String::as_str).collect::<Vec<_>>())
        }
        _ => call.keys(&base),
    };
    call.arg(op)
        .arg(field)
        .arg(&keys.notify)
        .arg(&keys.drained_notify)
        .arg(&keys.sibling_notify)
}

/// A pause or a resume: yields whether it changed anything (`false`: already paused, or
/// not paused). After a lost reply the call is sent again (it is idempotent), and then says
/// `false` for what the first attempt did.
#[derive(Debug, Clone, Copy)]
pub struct Toggle;

impl OpKind for Toggle {
    type Output = bool;
    const CONTEXT: &'static str = "queue pause";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<bool, Error>> {
        match reply.as_int()? {
            1 => Some(Ok(true)),
            0 => Some(Ok(false)),
            _ => None,
        }
    }
}

/// Pauses `scope`: once the reply is in, no take leases a job of it (takes sent before
/// the reply included). Due and expired jobs still become ready; jobs in flight finish.
pub fn pause(
    keys: &QueueKeys,
    scope: &PauseScope,
    deadline: Instant,
) -> Result<ScriptOp<Toggle>, Error> {
    let call = call(keys, "pause", &scope.field()?);
    Ok(ScriptOp::new(Toggle, call, keys.target(), None, deadline))
}

/// Resumes `scope` and wakes every idle taker of the queue at once (a message on the
/// queue's wake channel that wakes all of them).
pub fn resume(
    keys: &QueueKeys,
    scope: &PauseScope,
    deadline: Instant,
) -> Result<ScriptOp<Toggle>, Error> {
    let call = call(keys, "resume", &scope.field()?);
    Ok(ScriptOp::new(Toggle, call, keys.target(), None, deadline))
}

/// Reads a pause: yields the server's Unix ms at the pause, `None` when not paused.
#[derive(Debug, Clone, Copy)]
pub struct PausedAt;

impl OpKind for PausedAt {
    type Output = Option<u64>;
    const CONTEXT: &'static str = "queue pause state";

    fn decide(&self, reply: &Reply, _: Instant, _: bool) -> Option<Result<Option<u64>, Error>> {
        match reply {
            Reply::Nil => Some(Ok(None)),
            Reply::Bulk(ms) => Some(Ok(Some(std::str::from_utf8(ms).ok()?.parse().ok()?))),
            _ => None,
        }
    }
}

/// When `scope` was paused (server ms), or `None`. A read-only script (sent as
/// `EVALSHA_RO`): a user whose keys are readable only may run it.
pub fn paused_at(
    keys: &QueueKeys,
    scope: &PauseScope,
    deadline: Instant,
) -> Result<ScriptOp<PausedAt>, Error> {
    let call = ScriptCall::new(&scripts::PAUSE_STATE)
        .keys(&[&keys.paused])
        .arg(&scope.field()?);
    Ok(ScriptOp::new(PausedAt, call, keys.target(), None, deadline))
}

/// One count of a drain: live leases, and the time until the first runs out.
#[derive(Debug, Clone, Copy)]
pub struct DrainCount;

impl OpKind for DrainCount {
    type Output = (u64, Option<Duration>);
    const CONTEXT: &'static str = "queue drain";

    fn decide(
        &self,
        reply: &Reply,
        _: Instant,
        _: bool,
    ) -> Option<Result<(u64, Option<Duration>), Error>> {
        match reply.as_array()? {
            [count, ms] => {
                let count = u64::try_from(count.as_int()?).ok()?;
                let first = match ms.as_int()? {
                    -2 if count == 0 => None,
                    ms if ms >= 1 && count > 0 => Some(Duration::from_millis(ms as u64)),
                    _ => return None,
                };
                Some(Ok((count, first)))
            }
            _ => None,
        }
    }
}

/// Pauses the whole queue and waits until no job is in flight (no live lease), or until a
/// deadline: yields `true` when nothing is in flight, `false` when the deadline came first
/// (the queue stays paused either way).
///
/// It never polls: it counts once, then waits for an ack or nack to announce on the drain
/// channel, or for the first live lease to run out, whichever comes first.
#[derive(Debug)]
pub struct Drain {
    call: ScriptCall,
    target: crate::lease::Target,
    wake_on: WakeOn,
    deadline: Option<Instant>,
    op_timeout: Duration,
    state: State,
}

#[derive(Debug)]
enum State {
    Counting(Box<ScriptOp<DrainCount>>),
    Waiting(Instant),
    Done,
}

impl Drain {
    /// A drain of the queue `keys` waiting at most `wait` from `now` (a wait too long for
    /// an `Instant`, such as `Duration::MAX`, means no deadline); each count's reply is
    /// awaited at most `op_timeout`.
    pub fn new(keys: &QueueKeys, wait: Duration, op_timeout: Duration, now: Instant) -> Self {
        let mut drain = Drain {
            call: call(keys, "drain", "*"),
            target: keys.target(),
            wake_on: WakeOn::any(&keys.drained),
            deadline: now.checked_add(wait),
            op_timeout,
            state: State::Done,
        };
        drain.state = drain.count(now);
        drain
    }

    fn count(&self, now: Instant) -> State {
        let reply_by = saturating_add(now, self.op_timeout);
        State::Counting(Box::new(ScriptOp::new(
            DrainCount,
            self.call.clone(),
            self.target.clone(),
            None,
            reply_by,
        )))
    }

    fn counted(&mut self, live: u64, first: Option<Duration>, now: Instant) -> Step<bool> {
        if live == 0 {
            self.state = State::Done;
            return Step::Done(Ok(true));
        }
        if self.deadline.is_some_and(|d| now >= d) {
            self.state = State::Done;
            return Step::Done(Ok(false));
        }
        // A live count has a first expiry (the script says so); an hour otherwise.
        let first = first.unwrap_or(Duration::from_secs(3600));
        let mut until = saturating_add(now, first);
        if let Some(deadline) = self.deadline {
            until = until.min(deadline);
        }
        self.state = State::Waiting(until);
        self.wait(until)
    }

    fn wait(&self, until: Instant) -> Step<bool> {
        Step::Wait(Wait {
            until,
            wake_on: Some(self.wake_on.clone()),
            unchanged_until: Some(until),
        })
    }
}

impl Protocol for Drain {
    type Output = bool;

    fn poll(&mut self, now: Instant) -> Step<bool> {
        if let State::Waiting(until) = self.state {
            if now < until {
                return self.wait(until);
            }
            self.state = self.count(now);
        }
        let State::Counting(op) = &mut self.state else {
            return Step::Done(Err(Error::Finished));
        };
        match op.poll(now) {
            Step::Done(Ok((live, first))) => self.counted(live, first, now),
            Step::Done(Err(e)) => {
                self.state = State::Done;
                Step::Done(Err(e))
            }
            Step::Send(batch) => Step::Send(batch),
            Step::Wait(wait) => Step::Wait(wait),
        }
    }

    fn handle(&mut self, response: Response, now: Instant) {
        if let State::Counting(op) = &mut self.state {
            op.handle(response, now);
        }
    }

    fn wake(&mut self, now: Instant) {
        if let State::Waiting(_) = self.state {
            self.state = self.count(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Keyspace;

    fn keys() -> QueueKeys {
        QueueKeys::new(&Keyspace::new("t").unwrap(), "q").unwrap()
    }

    #[test]
    fn a_group_id_is_checked_and_named_in_its_own_field() {
        assert_eq!(PauseScope::Queue.field().unwrap(), "*");
        assert_eq!(PauseScope::Group("acme".into()).field().unwrap(), "g:acme");
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert!(matches!(
            PauseScope::Group(String::new()).field(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            PauseScope::Group(long).field(),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_drain_past_its_deadline_says_false_and_a_bad_count_is_unexpected() {
        let now = crate::testing::origin();
        let k = keys();
        let mut drain = Drain::new(&k, Duration::from_millis(100), Duration::from_secs(1), now);
        let Step::Send(batch) = drain.poll(now) else {
            panic!("no count sent")
        };
        let id = batch.requests[0].id;
        drain.handle(
            Response::reply(id, Reply::Array(vec![Reply::Int(1), Reply::Int(5000)])),
            now,
        );
        // The wait ends at the deadline, not at the lease's expiry.
        let Step::Wait(wait) = drain.poll(now) else {
            panic!("no wait")
        };
        assert_eq!(wait.until, now + Duration::from_millis(100));
        let later = now + Duration::from_millis(100);
        let Step::Send(batch) = drain.poll(later) else {
            panic!("no count at the deadline")
        };
        let id = batch.requests[0].id;
        drain.handle(
            Response::reply(id, Reply::Array(vec![Reply::Int(1), Reply::Int(4900)])),
            later,
        );
        assert!(matches!(drain.poll(later), Step::Done(Ok(false))));

        let mut drain = Drain::new(&k, Duration::from_secs(1), Duration::from_secs(1), now);
        let Step::Send(batch) = drain.poll(now) else {
            panic!("no count sent")
        };
        let id = batch.requests[0].id;
        drain.handle(Response::reply(id, Reply::Int(7)), now);
        assert!(matches!(
            drain.poll(now),
            Step::Done(Err(Error::UnexpectedReply { .. }))
        ));
    }
}
