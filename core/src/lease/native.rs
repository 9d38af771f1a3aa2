//! A lock release by the server's own compare-and-delete instead of a script, where the
//! server has one (Valkey 9.0+ `DELIFEQ`, Redis 8.4+ `DELEX key IFEQ`): cheaper for the
//! server than an `EVALSHA`, with the same outcomes as [`ScriptOp::release`]. And a lock
//! extension by its compare-and-set (Valkey 8.1+, Redis 8.4+: `SET key token IFEQ token PX
//! ttl`), with the same outcomes as [`ScriptOp::extend`] ([`NativeExtend`]).
//!
//! ```text
//!  send [compare-and-delete, PUBLISH] ──► 1: released
//!               │
//!               └── 0 (not ours), an error reply (no such command, a wrong type), a
//!                   failure ──► the release script (ScriptOp::release), which says why
//! ```
//!
//! The announcement cannot ride in the same command: a `PUBLISH` (`SPUBLISH` for a shard
//! channel) goes in the same batch. When the delete finds the lock not ours, that message
//! wakes a waiter for nothing: it retries, as after any wake-up. A `0` is ambiguous (gone,
//! or another holder's), so the release script then runs as well: it changes nothing on a
//! lock that is not ours and answers which of the two it was. A reply lost after the delete
//! was sent in time counts as ours, as for the script ([`Release`]).

use std::time::{Duration, Instant};

use super::scripts::{EXTEND, RELEASE};
use super::{Extend, Lease, LeaseKind, LockKind, Release, ScriptOp};
use crate::command::{Command, Request, RequestId};
use crate::protocol::{Batch, Outstanding, Protocol, Step};
use crate::reply::{FailureKind, Reply, Response, TransportFailure};

/// A server's native compare-and-delete command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NativeDelete {
    /// Valkey 9.0+: `DELIFEQ key value`.
    DelIfEq,
    /// Redis 8.4+: `DELEX key IFEQ value`.
    DelExIfEq,
}

/// The ids of the native batch's two requests (the release script's own ids count up from
/// 0, so they never meet these).
const DELETE: RequestId = RequestId(u64::MAX - 1);
const ANNOUNCE: RequestId = RequestId(u64::MAX);

/// A lock release by a native compare-and-delete, falling back to the release script (see
/// the [module](self)).
#[derive(Debug)]
pub struct NativeRelease {
    /// The batch to send (taken when sent).
    batch: Option<Vec<Request>>,
    deadline: Instant,
    valid_until: Instant,
    sent_at: Option<Instant>,
    deleted: Option<Result<Reply, TransportFailure>>,
    announced: bool,
    /// The announcement's error reply (e.g. `NOPERM` for a user without the channel): the
    /// release happened, and fails as the script would (whose `PUBLISH` raises it).
    announce_error: Option<crate::reply::ErrorReply>,
    outstanding: Outstanding,
    /// The release script: after a `0`, an error reply or a failure, it decides.
    script: ScriptOp<Release>,
    on_script: bool,
    /// The server refused the native command itself (no such command, or not granted).
    refused: bool,
}

impl NativeRelease {
    /// Releases `lease` with `how`, giving up at `deadline`; `None` when the lease is not an
    /// exclusive lock released by the plain release script (other kinds keep their scripts),
    /// or one whose acquisition had an unanswered attempt (its release records the token
    /// as undone: [`Lease::unanswered`], which no native command does).
    pub fn new(lease: &Lease, how: NativeDelete, deadline: Instant) -> Option<Self> {
        if lease.kind != LeaseKind::Lock(LockKind::Lease)
            || lease.unanswered
            || !std::ptr::eq(lease.calls.release().script(), &RELEASE)
        {
            return None;
        }
        // EVALSHA sha 1 key token channel.
        let call = lease.calls.release().evalsha();
        let args = call.args();
        if args.len() != 6 || args.get(2) != Some(b"1".as_slice()) {
            return None;
        }
        let (Some(key), Some(token), Some(channel)) = (args.get(3), args.get(4), args.get(5))
        else {
            return None;
        };
        let delete = match how {
            NativeDelete::DelIfEq => Command::with_capacity("DELIFEQ", 2).arg(key).arg(token),
            NativeDelete::DelExIfEq => Command::with_capacity("DELEX", 3)
                .arg(key)
                .arg("IFEQ")
                .arg(token),
        };
        // As the script's notify(): '{shard}<name>' is a shard channel.
        let announce = match channel.strip_prefix(b"{shard}".as_slice()) {
            Some(shard) => Command::with_capacity("SPUBLISH", 2).arg(shard).arg("1"),
            None => Command::with_capacity("PUBLISH", 2).arg(channel).arg("1"),
        };
        let node = call.node();
        Some(NativeRelease {
            batch: Some(vec![
                Request {
                    id: DELETE,
                    command: delete.on(node),
                },
                Request {
                    id: ANNOUNCE,
                    command: announce.on(node),
                },
            ]),
            deadline,
            valid_until: lease.valid_until,
            sent_at: None,
            deleted: None,
            announced: false,
            announce_error: None,
            outstanding: Outstanding::default(),
            script: ScriptOp::release(lease, deadline),
            on_script: false,
            refused: false,
        })
    }

    /// Uses `valid_until` as the lease's validity for the lost-reply rule instead of the
    /// one it was acquired with (see [`ScriptOp::with_valid_until`]).
    pub fn with_valid_until(mut self, valid_until: Instant) -> Self {
        self.valid_until = valid_until;
        self.script = self.script.with_valid_until(valid_until);
        self
    }

    /// Whether the server refused the native command itself: it does not have it (a
    /// failover to an older server) or the user may not run it (ACL). The driver should stop
    /// choosing this machine for that server: each such release costs a second round trip.
    pub fn refused_natively(&self) -> bool {
        self.refused
    }

    fn next_step(&mut self, now: Instant) -> Step<()> {
        if self.on_script {
            return self.script.poll(now);
        }
        if let Some(requests) = self.batch.take() {
            self.sent_at = Some(now);
            return Step::Send(Batch::new(requests, self.deadline));
        }
        if !self.announced {
            return self.outstanding.step(now);
        }
        match self.deleted.take() {
            None => self.outstanding.step(now),
            Some(Ok(Reply::Int(1))) => match self.announce_error.take() {
                None => Step::Done(Ok(())),
                Some(e) => Step::Done(Err(crate::error::Error::Redis {
                    code: e.code,
                    message: e.message,
                })),
            },
            Some(other) => {
                // Not ours (or the reply was lost, or the server refused the command): the
                // script says exactly what happened.
                if let Err(TransportFailure {
                    kind: FailureKind::NoReply,
                    ..
                }) = other
                    && self.sent_at.is_some_and(|sent| sent < self.valid_until)
                {
                    self.script.note_lost_in_time();
                }
                self.on_script = true;
                self.script.poll(now)
            }
        }
    }
}

impl Protocol for NativeRelease {
    type Output = ();

    fn poll(&mut self, now: Instant) -> Step<()> {
        let step = self.next_step(now);
        if !self.on_script {
            self.outstanding.track(&step);
        }
        step
    }

    fn handle(&mut self, input: Response, now: Instant) {
        if self.on_script {
            return self.script.handle(input, now);
        }
        match input.id {
            DELETE if self.deleted.is_none() => {
                if let Ok(Reply::Error(e)) = &input.result {
                    self.refused =
                        e.is("NOPERM") || (e.is("ERR") && e.message.contains("unknown command"));
                }
                self.deleted = Some(input.result);
            }
            ANNOUNCE => {
                if let Ok(Reply::Error(e)) = input.result {
                    self.announce_error = Some(e);
                }
                self.announced = true;
            }
            _ => {}
        }
    }
}

/// The id of the native extension's request (the extend script's own ids count up from 0).
const SET_IF_EQUAL: RequestId = RequestId(u64::MAX - 2);

/// A lock extension by a native compare-and-set, falling back to the extend script:
///
/// ```text
///  send SET key token IFEQ token PX ttl ──► OK: extended (for ttl from the send)
///               │
///               └── nil (not ours: gone, or another holder's), an error reply (no IFEQ, a
///                   wrong type), a failure ──► the extend script (ScriptOp::extend), which
///                   says which
/// ```
///
/// Measured on Valkey 9.1 (server instructions per call under callgrind, networking
/// included): 18,089 for the `SET ... IFEQ`, 35,127 for the extend script's `EVALSHA`. A
/// `SET` that ran but whose reply was lost is harmless: the script then finds the lease ours
/// and extends it again.
#[derive(Debug)]
pub struct NativeExtend {
    /// The request to send (taken when sent).
    request: Option<Request>,
    deadline: Instant,
    ttl: Duration,
    sent_at: Option<Instant>,
    answer: Option<Result<Reply, TransportFailure>>,
    outstanding: Outstanding,
    /// The extend script: after a nil, an error reply or a failure, it decides.
    script: ScriptOp<Extend>,
    on_script: bool,
    /// The server refused the native command itself (no `IFEQ`, or not granted).
    refused: bool,
}

impl NativeExtend {
    /// Extends `lease` to `ttl` from the moment the server runs the command, giving up at
    /// `deadline` (as [`ScriptOp::extend`], whose errors it returns); `Ok(None)` when the
    /// lease is not an exclusive lock extended by the plain extend script (other kinds keep
    /// their scripts).
    pub fn new(
        lease: &Lease,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Option<Self>, crate::error::Error> {
        let script = ScriptOp::extend(lease, ttl, deadline)?;
        if lease.kind != LeaseKind::Lock(LockKind::Lease)
            || !std::ptr::eq(lease.calls.extend_script(), &EXTEND)
        {
            return Ok(None);
        }
        // EVALSHA sha 1 key token (the ttl is added per extension).
        let call = lease.calls.extend().evalsha();
        let args = call.args();
        if args.len() != 5 || args.get(2) != Some(b"1".as_slice()) {
            return Ok(None);
        }
        let (Some(key), Some(token)) = (args.get(3), args.get(4)) else {
            return Ok(None);
        };
        let ms = super::validate_ttl("ttl", ttl)?;
        let set = Command::with_capacity("SET", 6)
            .arg(key)
            .arg(token)
            .arg("IFEQ")
            .arg(token)
            .arg("PX")
            .int_arg(ms);
        Ok(Some(NativeExtend {
            request: Some(Request {
                id: SET_IF_EQUAL,
                command: set.on(call.node()),
            }),
            deadline,
            ttl,
            sent_at: None,
            answer: None,
            outstanding: Outstanding::default(),
            script,
            on_script: false,
            refused: false,
        }))
    }

    /// Whether the server refused the native command itself: it lacks `SET ... IFEQ` (a
    /// failover to an older server) or the user may not run it. The driver should stop
    /// choosing this machine for that server: each such extension costs a second round trip.
    pub fn refused_natively(&self) -> bool {
        self.refused
    }

    fn next_step(&mut self, now: Instant) -> Step<Instant> {
        if self.on_script {
            return self.script.poll(now);
        }
        if let Some(request) = self.request.take() {
            self.sent_at = Some(now);
            return Step::Send(Batch::new(vec![request], self.deadline));
        }
        match self.answer.take() {
            None => self.outstanding.step(now),
            Some(Ok(Reply::Status(ok))) if ok == "OK" => Step::Done(Ok(super::valid_until(
                self.sent_at.unwrap_or(now),
                self.ttl,
            ))),
            Some(_) => {
                // Not ours (or the reply was lost, or the server refused the command): the
                // script says exactly what happened.
                self.on_script = true;
                self.script.poll(now)
            }
        }
    }
}

impl Protocol for NativeExtend {
    type Output = Instant;

    fn poll(&mut self, now: Instant) -> Step<Instant> {
        let step = self.next_step(now);
        if !self.on_script {
            self.outstanding.track(&step);
        }
        step
    }

    fn handle(&mut self, input: Response, now: Instant) {
        if self.on_script {
            return self.script.handle(input, now);
        }
        if input.id == SET_IF_EQUAL && self.answer.is_none() {
            if let Ok(Reply::Error(e)) = &input.result {
                self.refused = e.is("NOPERM")
                    || (e.is("ERR")
                        && (e.message.contains("syntax") || e.message.contains("unknown command")));
            }
            self.answer = Some(input.result);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::{Error, LossReason};
    use crate::keys::Keyspace;
    use crate::lease::{LockSpec, Token, valid_until};
    use crate::reply::ErrorReply;
    use crate::testing::origin;

    const TTL: Duration = Duration::from_secs(10);

    fn lease(spec: LockSpec, now: Instant) -> Lease {
        Lease {
            kind: spec.kind,
            target: spec.target,
            token: spec.token,
            fence: 3,
            ttl: TTL,
            acquired_at: now,
            valid_until: valid_until(now, TTL),
            attempts: 1,
            unanswered: false,
            calls: spec.calls,
            data: Vec::new(),
        }
    }

    fn lock(keyspace: &Keyspace, now: Instant) -> Lease {
        let token = Token::from_random([1; 16]);
        lease(LockSpec::lease(keyspace, "job", token, TTL).unwrap(), now)
    }

    fn args(c: &Command) -> Vec<String> {
        c.args()
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    /// The batch the machine sends first.
    fn first_batch(m: &mut NativeRelease, now: Instant) -> Vec<Request> {
        match m.poll(now) {
            Step::Send(batch) => batch.requests,
            other => panic!("{other:?}"),
        }
    }

    fn answer(m: &mut NativeRelease, now: Instant, delete: Result<Reply, TransportFailure>) {
        m.handle(
            Response {
                id: DELETE,
                result: delete,
            },
            now,
        );
        m.handle(Response::reply(ANNOUNCE, Reply::Int(0)), now);
    }

    #[test]
    fn deletes_and_announces_in_one_batch() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeRelease::new(&lease, NativeDelete::DelIfEq, now + TTL).unwrap();
        let sent = first_batch(&mut m, now);
        let token = lease.token.as_str().to_owned();
        assert_eq!(args(&sent[0].command)[0], "DELIFEQ");
        assert_eq!(args(&sent[0].command)[2], token);
        assert_eq!(args(&sent[1].command)[0], "PUBLISH");
        assert_eq!(args(&sent[1].command)[2], "1");
        // Waiting for both answers.
        m.handle(Response::reply(DELETE, Reply::Int(1)), now);
        assert!(matches!(m.poll(now), Step::Wait(_)));
        m.handle(Response::reply(ANNOUNCE, Reply::Int(0)), now);
        assert!(matches!(m.poll(now), Step::Done(Ok(()))));
    }

    /// A user without the channel: the lock is released, and the release fails as the
    /// script's refused `PUBLISH` makes it fail (an error reply, not success).
    #[test]
    fn a_refused_announcement_fails_the_release_after_the_delete() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeRelease::new(&lease, NativeDelete::DelIfEq, now + TTL).unwrap();
        first_batch(&mut m, now);
        m.handle(Response::reply(DELETE, Reply::Int(1)), now);
        let refused = ErrorReply::parse("NOPERM No permissions to access a channel");
        m.handle(Response::reply(ANNOUNCE, Reply::Error(refused)), now);
        match m.poll(now) {
            Step::Done(Err(Error::Redis { code, .. })) => assert_eq!(code, "NOPERM"),
            other => panic!("{other:?}"),
        }
        assert!(!m.refused_natively(), "the delete itself was granted");
    }

    #[test]
    fn redis_uses_delex_and_shard_channels_spublish() {
        let now = origin();
        let ks = Keyspace::default().with_sharded_pubsub(true);
        let lease = lock(&ks, now);
        let mut m = NativeRelease::new(&lease, NativeDelete::DelExIfEq, now + TTL).unwrap();
        let sent = first_batch(&mut m, now);
        assert_eq!(args(&sent[0].command)[0], "DELEX");
        assert_eq!(args(&sent[0].command)[2], "IFEQ");
        assert_eq!(args(&sent[1].command)[0], "SPUBLISH");
        assert!(!args(&sent[1].command)[1].starts_with('{'));
    }

    #[test]
    fn not_ours_asks_the_script_why() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeRelease::new(&lease, NativeDelete::DelIfEq, now + TTL).unwrap();
        first_batch(&mut m, now);
        answer(&mut m, now, Ok(Reply::Int(0)));
        assert!(!m.refused_natively());
        let Step::Send(batch) = m.poll(now) else {
            panic!("the script")
        };
        let call = &batch.requests[0];
        assert_eq!(args(&call.command)[0], "EVALSHA");
        assert_eq!(args(&call.command)[1], RELEASE.sha1);
        m.handle(Response::reply(call.id, Reply::Int(-1)), now);
        match m.poll(now) {
            Step::Done(Err(Error::NotOwner { reason, .. })) => {
                assert_eq!(reason, LossReason::Taken)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_server_without_the_command_gets_the_script() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeRelease::new(&lease, NativeDelete::DelIfEq, now + TTL).unwrap();
        first_batch(&mut m, now);
        let unknown = ErrorReply::parse("ERR unknown command 'DELIFEQ', with args beginning with:");
        answer(&mut m, now, Ok(Reply::Error(unknown)));
        assert!(m.refused_natively());
        let Step::Send(batch) = m.poll(now) else {
            panic!("the script")
        };
        let call = &batch.requests[0];
        assert_eq!(args(&call.command)[1], RELEASE.sha1);
        m.handle(Response::reply(call.id, Reply::Int(1)), now);
        assert!(matches!(m.poll(now), Step::Done(Ok(()))));
    }

    #[test]
    fn a_lost_reply_sent_in_time_counts_as_released() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeRelease::new(&lease, NativeDelete::DelIfEq, now + TTL).unwrap();
        first_batch(&mut m, now);
        answer(&mut m, now, Err(TransportFailure::no_reply("timed out")));
        let Step::Send(batch) = m.poll(now) else {
            panic!("the script")
        };
        let call = &batch.requests[0];
        // The retry finds the key gone: our lost delete did it.
        m.handle(Response::reply(call.id, Reply::Int(0)), now);
        assert!(matches!(m.poll(now), Step::Done(Ok(()))));
    }

    #[test]
    fn a_lost_reply_sent_within_the_renewed_validity_counts_as_released() {
        // Acquired for 10 s, renewed to 60 s; the delete is sent at 30 s and its reply lost.
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let at = now + TTL * 3;
        let renewed = now + TTL * 6;
        for (valid_until, released) in [(None, false), (Some(renewed), true)] {
            let m = NativeRelease::new(&lease, NativeDelete::DelIfEq, at + TTL).unwrap();
            let mut m = match valid_until {
                Some(v) => m.with_valid_until(v),
                None => m,
            };
            first_batch(&mut m, at);
            answer(&mut m, at, Err(TransportFailure::no_reply("timed out")));
            let Step::Send(batch) = m.poll(at) else {
                panic!("the script")
            };
            let call = &batch.requests[0];
            m.handle(Response::reply(call.id, Reply::Int(0)), at);
            match m.poll(at) {
                Step::Done(Ok(())) => assert!(released),
                Step::Done(Err(Error::NotOwner { reason, .. })) => {
                    assert!(!released);
                    assert_eq!(reason, LossReason::Expired);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn only_plain_leases_are_released_natively() {
        let now = origin();
        let ks = Keyspace::default();
        let token = Token::from_random([2; 16]);
        let reentrant = LockSpec::reentrant(&ks, "job", "c1:7", token.clone(), TTL).unwrap();
        assert!(NativeRelease::new(&lease(reentrant, now), NativeDelete::DelIfEq, now).is_none());
        let fair = LockSpec::fair(&ks, "job", token, TTL, TTL).unwrap();
        assert!(NativeRelease::new(&lease(fair, now), NativeDelete::DelIfEq, now).is_none());
    }

    /// The batch a native extension sends first.
    fn first_request(m: &mut NativeExtend, now: Instant) -> Request {
        match m.poll(now) {
            Step::Send(mut batch) => batch.requests.remove(0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn extends_by_set_if_equal_valid_from_the_send() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let ttl = Duration::from_secs(30);
        let mut m = NativeExtend::new(&lease, ttl, now + TTL).unwrap().unwrap();
        let sent = first_request(&mut m, now);
        let token = lease.token.as_str().to_owned();
        let key = args(&lease.calls.extend().evalsha())[3].clone();
        assert_eq!(
            args(&sent.command),
            ["SET", key.as_str(), &token, "IFEQ", &token, "PX", "30000"]
        );
        let later = now + Duration::from_millis(5);
        assert!(matches!(m.poll(later), Step::Wait(_)));
        m.handle(Response::reply(sent.id, Reply::Status("OK".into())), later);
        match m.poll(later) {
            Step::Done(Ok(valid)) => assert_eq!(valid, valid_until(now, ttl)),
            other => panic!("{other:?}"),
        }
        assert!(!m.refused_natively());
    }

    #[test]
    fn not_set_asks_the_script_why() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeExtend::new(&lease, TTL, now + TTL).unwrap().unwrap();
        let sent = first_request(&mut m, now);
        m.handle(Response::reply(sent.id, Reply::Nil), now);
        let script = first_request(&mut m, now);
        assert_eq!(args(&script.command)[0], "EVALSHA");
        assert_eq!(args(&script.command)[1], EXTEND.sha1);
        m.handle(Response::reply(script.id, Reply::Int(0)), now);
        match m.poll(now) {
            Step::Done(Err(Error::NotOwner { reason, .. })) => {
                assert_eq!(reason, LossReason::Expired)
            }
            other => panic!("{other:?}"),
        }
        assert!(!m.refused_natively());
    }

    #[test]
    fn a_server_without_ifeq_gets_the_script_and_is_noted() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeExtend::new(&lease, TTL, now + TTL).unwrap().unwrap();
        let sent = first_request(&mut m, now);
        let refused = ErrorReply::parse("ERR syntax error");
        m.handle(Response::reply(sent.id, Reply::Error(refused)), now);
        assert!(m.refused_natively());
        let script = first_request(&mut m, now);
        assert_eq!(args(&script.command)[1], EXTEND.sha1);
        m.handle(Response::reply(script.id, Reply::Int(1)), now);
        assert!(matches!(m.poll(now), Step::Done(Ok(_))));
    }

    #[test]
    fn a_lost_reply_gets_the_script_which_finds_the_lease_ours() {
        let now = origin();
        let lease = lock(&Keyspace::default(), now);
        let mut m = NativeExtend::new(&lease, TTL, now + TTL).unwrap().unwrap();
        let sent = first_request(&mut m, now);
        m.handle(
            Response {
                id: sent.id,
                result: Err(TransportFailure::no_reply("timed out")),
            },
            now,
        );
        let script = first_request(&mut m, now);
        m.handle(Response::reply(script.id, Reply::Int(1)), now);
        assert!(matches!(m.poll(now), Step::Done(Ok(_))));
    }

    #[test]
    fn only_plain_leases_are_extended_natively_and_a_bad_ttl_is_refused() {
        let now = origin();
        let ks = Keyspace::default();
        let token = Token::from_random([2; 16]);
        let reentrant = LockSpec::reentrant(&ks, "job", "c1:7", token.clone(), TTL).unwrap();
        let m = NativeExtend::new(&lease(reentrant, now), TTL, now + TTL).unwrap();
        assert!(m.is_none());
        let fair = LockSpec::fair(&ks, "job", token, TTL, TTL).unwrap();
        assert!(
            NativeExtend::new(&lease(fair, now), TTL, now)
                .unwrap()
                .is_none()
        );
        let plain = lock(&ks, now);
        assert!(NativeExtend::new(&plain, Duration::ZERO, now).is_err());
    }
}
