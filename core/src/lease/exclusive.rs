//! The lease lock ([`LockKind::Lease`]): exclusive, `SET NX PX` semantics, with a fencing
//! token issued in the same script. `<stem>:lock` holds the owner's token, `<stem>:fence` the
//! counter.
//!
//! ```text
//!   Acquire ──acquire.lua──► fence ─────────────────────► Done(Acquired(lease))
//!      ▲                       {0,pttl}: try once ─────────► Done(Busy { holder_ttl })
//!      │                       {0,pttl}: waiting ─► Wait(backoff, at most the holder's ttl;
//!      └──── wake (any message on <stem>:released) or until ◄┘  one waiter per message)
//!   held: ScriptOp<Extend> (extend.lua, owner-checked) · ScriptOp<Release> (release.lua:
//!         owner-checked DEL + PUBLISH <stem>:released)
//! ```
//!
//! Unfenced ([`LockSpec::fenced`]`(false)`): the first attempt is a bare
//! `SET <stem>:lock <token> NX PX <ttl>`, no script; `OK` is a lease with fence 0, anything
//! else goes on with `acquire.lua` as above (its grant then reports fence 0 too).
//!
//! A walk through it: the lock is held by someone else, the waiter is woken by its release,
//! gets fence 8, and releases.
//!
//! ```
//! # use std::time::{Duration, Instant};
//! # use redlease_core::{Protocol, Reply, Response, Step};
//! # use redlease_core::keys::Keyspace;
//! # use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LockSpec, ScriptOp, Token};
//! // Answers the one request the machine sends as Redis would, and polls again.
//! fn answer<P: Protocol>(m: &mut P, now: Instant, reply: Reply) -> Step<P::Output> {
//!     let Step::Send(batch) = m.poll(now) else { panic!("expected a send") };
//!     m.handle(Response::reply(batch.requests[0].id, reply), now);
//!     m.poll(now)
//! }
//! let pair = |a, b| Reply::Array(vec![Reply::Int(a), Reply::Int(b)]);
//! let ks = Keyspace::default();
//! let spec = LockSpec::lease(&ks, "reports", Token::from_random([3; 16]), Duration::from_secs(30)).unwrap();
//! let options = AcquireOptions { wait: Some(Duration::from_secs(5)), ..Default::default() };
//! let now = Instant::now();
//! let mut acquire = Acquire::new(spec, &options, 1, now).unwrap();
//!
//! let Step::Wait(wait) = answer(&mut acquire, now, pair(0, 1200)) else { unreachable!() };
//! assert_eq!(wait.wake_on.unwrap().channel, "redlease:{reports}:released");
//! acquire.wake(now);
//! let Step::Done(Ok(Acquisition::Acquired(lease))) = answer(&mut acquire, now, Reply::Int(8))
//! else { unreachable!() };
//! assert_eq!((lease.fence, lease.attempts), (8, 2));
//!
//! let mut release = ScriptOp::release(&lease, now + Duration::from_secs(1));
//! assert!(matches!(answer(&mut release, now, Reply::Int(1)), Step::Done(Ok(()))));
//! ```

use std::time::Duration;

use super::scripts::*;
use super::spec::{ms, undoing};
use super::{LeaseCalls, LeaseKind, LockKind, LockSpec, Target, Token, validate_ttl};
use crate::error::Error;
use crate::keys::{Keyspace, LockKeys};
use crate::protocol::WakeOn;
use crate::script::ScriptCall;

impl LockSpec {
    /// An exclusive lease lock: `<stem>:lock` holds the token, `<stem>:fence` the counter.
    pub fn lease(
        keyspace: &Keyspace,
        name: &str,
        token: Token,
        ttl: Duration,
    ) -> Result<Self, Error> {
        validate_ttl("ttl", ttl)?;
        let keys = LockKeys::new(keyspace, name)?;
        let undone = crate::keys::cat(&[&keyspace.stem(name)?, ":undone"]);
        // The three calls on a held lease share one set of keys and arguments: extend and
        // inspect take the release's key and token, without its channel.
        let release = ScriptCall::new(&RELEASE)
            .key(&keys.lock)
            .owner_arg(&token)
            .arg(&keys.notify)
            .compact();
        Ok(LockSpec {
            kind: LeaseKind::Lock(LockKind::Lease),
            acquire: ScriptCall::new(&ACQUIRE)
                .keys(&[&keys.lock, &keys.fence, &undone])
                .owner_arg(&token)
                .arg(ms(ttl)),
            calls: LeaseCalls::new(
                release.clone(),
                release.sharing(&EXTEND, 1),
                release.sharing(&INSPECT, 1),
            ),
            cancel: None,
            undo: Some(undoing(release, &undone)),
            queued: false,
            wake: WakeOn::any(&keys.channel),
            notify: keys.notify.clone(),
            fenced: true,
            target: Target {
                name: keys.name.clone().into(),
                keys: vec![keys.lock, keys.fence].into(),
            },
            token,
            ttl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held lease's three calls keep one copy of the lock's key and token between them,
    /// also once bound to another acquisition's token; each sends what it always sent.
    #[test]
    fn the_calls_on_a_lease_share_one_set_of_keys() {
        let ks = Keyspace::default();
        let ttl = Duration::from_secs(30);
        let spec = LockSpec::lease(&ks, "orders", Token::new("tok-a").unwrap(), ttl).unwrap();
        let bound = spec.with_token(Token::new("tok-b").unwrap()).unwrap();
        for calls in [&spec.calls, &bound.calls, &spec.clone().compact().calls] {
            // Kept as the release plus two (script, item count) pairs.
            assert_eq!(calls.shapes(), ["shares"; 2]);
            assert!(calls.extend().shares_parts_with(calls.release()));
            assert!(calls.inspect().shares_parts_with(calls.release()));
        }
        assert!(
            bound
                .calls
                .release()
                .shares_parts_with(spec.calls.release())
        );
        let wire = |call: &ScriptCall| {
            call.evalsha()
                .args()
                .skip(2)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        };
        let lock = "redlease:{orders}:lock";
        assert_eq!(
            wire(bound.calls.release()),
            [
                "1",
                lock,
                "tok-b",
                &ks.notify_arg("redlease:{orders}:released")
            ]
        );
        assert_eq!(wire(&bound.calls.extend()), ["1", lock, "tok-b"]);
        assert_eq!(wire(&bound.calls.inspect()), ["1", lock, "tok-b"]);
        assert_eq!(bound.calls.extend().script().name, EXTEND.name);
        assert_eq!(bound.calls.inspect().script().name, INSPECT.name);
        // Every held lease keeps its calls: one call and two small pairs, not three calls.
        let call = std::mem::size_of::<ScriptCall>();
        assert!(std::mem::size_of::<LeaseCalls>() <= call + 32, "{call}");
    }

    /// Calls built apart whose items are a prefix of the release's are kept as views of it
    /// too (read, write and reentrant locks), and send what they were built to send.
    #[test]
    fn calls_built_apart_that_read_a_prefix_of_the_release_share_it() {
        let ks = Keyspace::default();
        let (ttl, wait) = (Duration::from_secs(30), Duration::from_secs(5));
        let token = || Token::new("tok-a").unwrap();
        let specs = [
            LockSpec::read(&ks, "r", token(), ttl).unwrap(),
            LockSpec::write(&ks, "w", token(), ttl, wait).unwrap(),
            LockSpec::reentrant(&ks, "re", "owner-1", token(), ttl).unwrap(),
        ];
        for spec in &specs {
            assert_eq!(spec.calls.shapes(), ["shares"; 2], "{:?}", spec.kind);
            let key = spec
                .calls
                .release()
                .evalsha()
                .args()
                .nth(3)
                .unwrap()
                .to_vec();
            for call in [spec.calls.extend(), spec.calls.inspect()] {
                let args: Vec<Vec<u8>> = call.evalsha().args().map(<[u8]>::to_vec).collect();
                assert_eq!(args[2..4], [b"1".to_vec(), key.clone()]);
                assert_eq!(args.len(), 5, "{:?}", spec.kind);
            }
        }
    }
}
