//! RedLock acquisition, quorum operations and tokens, on scripted replies.

use std::time::{Duration, Instant};

use super::*;
use crate::command::Request;
use crate::error::{Error, LossReason};
use crate::lease::{LockSpec, drift};
use crate::protocol::{Protocol, Step};
use crate::reply::{Reply, Response, TransportFailure};

mod acquisition {
    use super::*;
    use crate::keys::Keyspace;
    use crate::lease::Token;
    use crate::reply::ErrorReply;
    use crate::testing::origin;

    const TTL: Duration = Duration::from_secs(10);

    fn spec() -> LockSpec {
        LockSpec::lease(
            &Keyspace::default(),
            "red",
            Token::from_random([3; 16]),
            TTL,
        )
        .unwrap()
    }

    fn machine(wait: Option<Duration>, now: Instant) -> RedLockAcquire {
        let options = RedLockOptions {
            wait,
            ..RedLockOptions::new(5)
        };
        RedLockAcquire::new(spec(), options, 11, now).unwrap()
    }

    /// Sends one round and answers node i with `answers[i]`.
    fn round<P: Protocol>(
        m: &mut P,
        now: Instant,
        answers: &[Result<Reply, TransportFailure>],
    ) -> Vec<Request> {
        let Step::Send(batch) = m.poll(now) else {
            panic!("expected a batch")
        };
        for r in &batch.requests {
            let answer = answers[usize::from(r.command.node().0)].clone();
            m.handle(
                Response {
                    id: r.id,
                    result: answer,
                },
                now,
            );
        }
        batch.requests
    }

    fn granted() -> Result<Reply, TransportFailure> {
        Ok(Reply::Status("OK".into()))
    }

    fn busy() -> Result<Reply, TransportFailure> {
        Ok(Reply::Nil)
    }

    fn down() -> Result<Reply, TransportFailure> {
        Err(TransportFailure::not_sent("refused"))
    }

    #[test]
    fn a_majority_grants_it_with_validity_from_the_send_time() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let sent = round(
            &mut m,
            t0,
            &[granted(), granted(), granted(), down(), down()],
        );
        assert_eq!(sent.len(), 5);
        let nodes: Vec<u16> = sent.iter().map(|r| r.command.node().0).collect();
        assert_eq!(nodes, [0, 1, 2, 3, 4], "one request per node, in one batch");
        let later = t0 + Duration::from_millis(30);
        let Step::Done(Ok(red)) = m.poll(later) else {
            panic!("acquired")
        };
        assert_eq!(red.granted, 3);
        assert_eq!(red.lease.fence, 0, "no fence across nodes");
        assert_eq!(red.lease.valid_until, t0 + TTL - drift(TTL));
    }

    #[test]
    fn without_a_majority_it_releases_everywhere_and_says_why() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &[granted(), granted(), down(), down(), down()]);
        let releases = round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        assert_eq!(
            releases.len(),
            5,
            "released on every node, also where it failed"
        );
        assert!(
            releases
                .iter()
                .all(|r| &r.command.args()[1] == super::super::RELEASE.sha1.as_bytes())
        );
        match m.poll(t0) {
            Step::Done(Err(Error::NoQuorum {
                nodes,
                needed,
                granted,
                busy,
                unreachable,
                ..
            })) => assert_eq!((nodes, needed, granted, busy, unreachable), (5, 3, 2, 0, 3)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn held_elsewhere_is_a_timeout_and_slow_quorums_are_not_trusted() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &[busy(), busy(), busy(), granted(), down()]);
        round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        assert!(matches!(m.poll(t0), Step::Done(Err(Error::Timeout { .. }))));

        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        // The answers came after the whole ttl: nothing left to hold.
        let late = t0 + TTL;
        round(&mut m, late, &vec![Ok(Reply::Int(1)); 5]);
        assert!(matches!(
            m.poll(late),
            Step::Done(Err(Error::Unavailable { .. }))
        ));
    }

    #[test]
    fn waiting_retries_after_a_random_delay_until_a_majority_grants_it() {
        let t0 = origin();
        let mut m = machine(Some(Duration::from_secs(1)), t0);
        round(&mut m, t0, &[busy(), busy(), busy(), granted(), granted()]);
        round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        let Step::Wait(w) = m.poll(t0) else {
            panic!("a pause")
        };
        assert!(w.until <= t0 + Duration::from_millis(100));
        let now = w.until;
        round(
            &mut m,
            now,
            &[granted(), granted(), granted(), busy(), busy()],
        );
        assert!(matches!(m.poll(now), Step::Done(Ok(_))));
    }

    #[test]
    fn acquisition_is_a_plain_set_nx_px_and_a_release_noscript_goes_to_its_node_only() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let sent = round(&mut m, t0, &[busy(), busy(), busy(), granted(), granted()]);
        let args: Vec<String> = sent[0]
            .command
            .args()
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        assert_eq!(args[0], "SET");
        assert_eq!(args[3..], ["NX", "PX", "10000"]);
        let noscript = Ok(Reply::Error(ErrorReply::new("NOSCRIPT", "x")));
        let ok = Ok(Reply::Int(1));
        // Undone on nodes 3 and 4 (the busy ones cannot hold it); node 3 lacks the script.
        let undone = round(
            &mut m,
            t0,
            &[ok.clone(), ok.clone(), ok.clone(), noscript, ok.clone()],
        );
        assert_eq!(undone.len(), 2);
        let again = round(&mut m, t0, &vec![ok; 5]);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].command.node(), NodeId(3));
        assert_eq!(again[0].command.name(), "EVAL");
        assert!(matches!(m.poll(t0), Step::Done(Err(Error::Timeout { .. }))));
    }

    /// Each node's answer to its `SET key token NX PX ttl`: `OK` grants it there, nil means
    /// another holder has it (busy), and an error reply (a key of the wrong type, an ACL
    /// user without `SET`) or any other reply grants nothing and counts with the nodes that
    /// did not answer. Without a majority the round is undone where the `SET` may have run:
    /// not on the nodes that answered nil or an error reply.
    #[test]
    fn each_nodes_set_reply_ok_grants_nil_is_busy_and_an_error_grants_nothing() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let wrongtype = Ok(Reply::Error(ErrorReply::new(
            "WRONGTYPE",
            "Operation against a key holding the wrong kind of value",
        )));
        let noperm = Ok(Reply::Error(ErrorReply::new(
            "NOPERM",
            "this user has no permissions to run the 'set' command",
        )));
        let sent = round(
            &mut m,
            t0,
            &[granted(), granted(), busy(), wrongtype, noperm],
        );
        let token = spec().token.as_str().to_owned();
        let key = spec().target.keys.first().unwrap().to_owned();
        for r in &sent {
            let words: Vec<String> = r
                .command
                .args()
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            assert_eq!(words, ["SET", &key, &token, "NX", "PX", "10000"]);
        }
        let releases = round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        let nodes: Vec<u16> = releases.iter().map(|r| r.command.node().0).collect();
        assert_eq!(
            nodes,
            [0, 1],
            "undone where granted, not where nil or an error"
        );
        match m.poll(t0) {
            Step::Done(Err(Error::NoQuorum {
                granted,
                busy,
                unreachable,
                ..
            })) => assert_eq!((granted, busy, unreachable), (2, 1, 2)),
            other => panic!("{other:?}"),
        }

        // A bulk reply (what `SET ... GET` would answer) is not a grant either: only `OK`.
        let mut m = machine(None, t0);
        let bulk = Ok(Reply::Bulk(token.clone().into_bytes()));
        round(
            &mut m,
            t0,
            &[granted(), granted(), bulk.clone(), bulk, busy()],
        );
        // A reply not understood may come from a `SET` that ran: undone there too.
        let undone = round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        let nodes: Vec<u16> = undone.iter().map(|r| r.command.node().0).collect();
        assert_eq!(nodes, [0, 1, 2, 3]);
        assert!(matches!(
            m.poll(t0),
            Step::Done(Err(Error::NoQuorum { granted: 2, .. }))
        ));
    }

    /// A node whose `SET` reply was lost may hold the key (the command may have run): it
    /// does not count towards the quorum, but the lease still spans it, so its release
    /// (and an extension, which counts it if the key is there) asks it too.
    #[test]
    fn a_lost_set_reply_does_not_count_but_the_release_asks_that_node_too() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let lost = Err(TransportFailure::no_reply("timed out"));
        round(&mut m, t0, &[granted(), granted(), granted(), lost, busy()]);
        let Step::Done(Ok(red)) = m.poll(t0) else {
            panic!("a majority granted it")
        };
        assert_eq!((red.granted, red.nodes, red.lease.fence), (3, 5, 0));
        let mut rel =
            QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50)).unwrap();
        let sent = round(&mut rel, t0, &vec![Ok(Reply::Int(1)); 5]);
        let nodes: Vec<u16> = sent.iter().map(|r| r.command.node().0).collect();
        assert_eq!(nodes, [0, 1, 2, 3, 4]);
        assert_eq!(rel.poll(t0).outcome().holding, 5);
    }

    /// The release round sends one command per node, built once and addressed to each:
    /// the same EVALSHA everywhere, each on its own node with its own request id; nodes that
    /// answer NOSCRIPT get the same EVAL. (Three lost replies: every node may hold the key.)
    #[test]
    fn a_release_round_sends_the_same_call_to_every_node() {
        let t0 = origin();
        let mut m = machine(None, t0);
        let lost = || Err(TransportFailure::no_reply("timed out"));
        round(&mut m, t0, &[lost(), lost(), lost(), granted(), granted()]);
        let words = |r: &Request| {
            r.command
                .args()
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
        };
        let noscript = Ok(Reply::Error(ErrorReply::new("NOSCRIPT", "x")));
        let ok = Ok(Reply::Int(1));
        let sent = round(
            &mut m,
            t0,
            &[
                ok.clone(),
                noscript.clone(),
                ok.clone(),
                noscript,
                ok.clone(),
            ],
        );
        assert_eq!(sent.len(), 5);
        let key = spec().target.keys.first().unwrap().to_owned();
        let token = spec().token.as_str().to_owned();
        let expected = release_command(&key, &token);
        assert_eq!(
            expected.args().to_vec(),
            [
                b"EVALSHA".to_vec(),
                RELEASE.sha1.as_bytes().to_vec(),
                b"1".to_vec(),
                key.clone().into_bytes(),
                token.clone().into_bytes(),
            ],
            "RedLock's own release: key and token, no release channel"
        );
        for (i, r) in sent.iter().enumerate() {
            assert_eq!(r.command.node(), NodeId(i as u16));
            assert_eq!(words(r), words(&sent[0]));
            assert_eq!(r.command.args().to_vec(), expected.args().to_vec());
        }
        let mut ids: Vec<_> = sent.iter().map(|r| r.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), 5, "one request id per node");
        let again = round(&mut m, t0, &vec![ok; 5]);
        let nodes: Vec<_> = again.iter().map(|r| r.command.node()).collect();
        assert_eq!(nodes, [NodeId(1), NodeId(3)]);
        assert_eq!(again[0].command.name(), "EVAL");
        assert_eq!(words(&again[0]), words(&again[1]));
        assert_eq!(
            again[0].command.args().to_vec(),
            [
                b"EVAL".to_vec(),
                RELEASE.source.as_bytes().to_vec(),
                b"1".to_vec(),
                key.into_bytes(),
                token.into_bytes(),
            ]
        );
        assert!(matches!(
            m.poll(t0),
            Step::Done(Err(Error::NoQuorum { granted: 2, .. }))
        ));
    }

    #[test]
    fn quorum_extension_and_release() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(red)) = m.poll(t0) else {
            panic!()
        };
        let ok = Ok(Reply::Int(1));
        let gone = Ok(Reply::Int(0));
        let taken = Ok(Reply::Int(-1));

        let mut ext =
            QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
        round(
            &mut ext,
            t0,
            &[ok.clone(), ok.clone(), ok.clone(), gone.clone(), down()],
        );
        assert_eq!(ext.poll(t0).done_ok(), Some(t0 + TTL - drift(TTL)));

        let mut ext =
            QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
        round(
            &mut ext,
            t0,
            &[ok.clone(), ok.clone(), gone.clone(), down(), down()],
        );
        let outcome = ext.poll(t0).outcome();
        assert!(matches!(
            outcome.result,
            Err(Error::NoQuorum { granted: 2, .. })
        ));
        assert_eq!((outcome.holding, outcome.lost), (2, false), "2 unknown");

        let mut rel =
            QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50)).unwrap();
        round(
            &mut rel,
            t0,
            &[gone.clone(), ok.clone(), down(), down(), down()],
        );
        assert!(rel.poll(t0).outcome().result.is_ok());

        let mut rel =
            QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50)).unwrap();
        round(
            &mut rel,
            t0,
            &[
                taken.clone(),
                gone.clone(),
                gone.clone(),
                gone.clone(),
                gone,
            ],
        );
        assert!(matches!(
            rel.poll(t0).outcome().result,
            Err(Error::NotOwner {
                reason: LossReason::Taken,
                ..
            })
        ));
    }

    /// A release with native compare-and-deletes on some nodes: those nodes get theirs
    /// (`DELIFEQ` on Valkey, `DELEX ... IFEQ` on Redis 8.4) in the same batch as the
    /// others' script; a `0` (gone, or another's) or a refusal sends the script to that node
    /// only, and the outcome counts as the script's would. A refusal is reported.
    #[test]
    fn a_release_uses_native_deletes_where_given_and_the_script_where_they_cannot_say() {
        use crate::lease::NativeDelete::{DelExIfEq, DelIfEq};
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(red)) = m.poll(t0) else {
            panic!()
        };
        let key = red.lease.target.keys.first().unwrap_or_default().to_owned();
        let token = red.lease.token.as_str().to_owned();
        let words = |r: &Request| -> Vec<String> {
            r.command
                .args()
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        };
        let native = [None, Some(DelIfEq), Some(DelIfEq), Some(DelExIfEq), None];
        let mut rel = QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50))
            .unwrap()
            .with_native_release(&native);
        let ok = Ok(Reply::Int(1));
        let refused = Ok(Reply::Error(ErrorReply::new(
            "ERR",
            "unknown command 'DELIFEQ'",
        )));
        let sent = round(
            &mut rel,
            t0,
            &[
                ok.clone(),
                ok.clone(),
                refused,
                Ok(Reply::Int(0)),
                ok.clone(),
            ],
        );
        let first: Vec<Vec<String>> = sent.iter().map(words).collect();
        let script = words(&Request {
            id: sent[0].id,
            command: release_command(&key, &token),
        });
        assert_eq!(first[0], script);
        assert_eq!(first[1], ["DELIFEQ", key.as_str(), token.as_str()]);
        assert_eq!(first[2], ["DELIFEQ", key.as_str(), token.as_str()]);
        assert_eq!(first[3], ["DELEX", key.as_str(), "IFEQ", token.as_str()]);
        assert_eq!(first[4], script);
        // Node 2 refused, node 3 deleted nothing: the script asks both, nothing else.
        let again = round(
            &mut rel,
            t0,
            &[ok.clone(), ok.clone(), ok, Ok(Reply::Int(-1)), down()],
        );
        let nodes: Vec<u16> = again.iter().map(|r| r.command.node().0).collect();
        assert_eq!(nodes, [2, 3]);
        assert!(again.iter().all(|r| words(r) == script));
        assert_eq!(rel.native_refused().collect::<Vec<_>>(), [2]);
        let outcome = rel.poll(t0).outcome();
        assert!(outcome.result.is_ok());
        assert_eq!(
            (outcome.holding, outcome.lost),
            (4, false),
            "node 3 was another's"
        );

        // An extension ignores it; nodes without a native command keep the script.
        let ext = QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50))
            .unwrap()
            .with_native_release(&native);
        let mut ext = ext;
        let sent = round(&mut ext, t0, &vec![Ok(Reply::Int(1)); 5]);
        assert!(sent.iter().all(|r| r.command.name() == "EVALSHA"));
    }

    /// A failed round is undone with each node's native compare-and-delete where the driver
    /// named one, the script elsewhere; a node where it deletes nothing (another holder's
    /// key) is done (nobody reads the undoing's answers), a node that refuses it is asked
    /// with the script, and gets the script in later rounds too.
    #[test]
    fn a_failed_round_is_undone_with_native_deletes_where_given() {
        use crate::lease::NativeDelete::{DelExIfEq, DelIfEq};
        let t0 = origin();
        let native = [None, Some(DelIfEq), Some(DelIfEq), Some(DelExIfEq), None];
        let mut m = machine(Some(Duration::from_secs(1)), t0).with_native_release(&native);
        let words = |r: &Request| -> Vec<String> {
            r.command
                .args()
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        };
        let key = spec().target.keys.first().unwrap().to_owned();
        let token = |sent: &[Request]| words(&sent[0])[2].clone();

        // Lost replies on nodes 0-2: every node may hold the key, every node is undone.
        let lost = || Err(TransportFailure::no_reply("timed out"));
        let sent = round(&mut m, t0, &[lost(), lost(), lost(), granted(), granted()]);
        let first = token(&sent);
        let refused = Ok(Reply::Error(ErrorReply::new(
            "ERR",
            "unknown command 'DELIFEQ'",
        )));
        let released = round(
            &mut m,
            t0,
            &[
                Ok(Reply::Int(-1)),
                refused,
                Ok(Reply::Int(0)),
                Ok(Reply::Int(1)),
                Ok(Reply::Int(1)),
            ],
        );
        let script = words(&Request {
            id: released[0].id,
            command: release_command(&key, &first),
        });
        let release_words: Vec<Vec<String>> = released.iter().map(words).collect();
        assert_eq!(release_words[0], script);
        assert_eq!(release_words[1], ["DELIFEQ", key.as_str(), first.as_str()]);
        assert_eq!(release_words[2], ["DELIFEQ", key.as_str(), first.as_str()]);
        assert_eq!(
            release_words[3],
            ["DELEX", key.as_str(), "IFEQ", first.as_str()]
        );
        assert_eq!(release_words[4], script);
        // Node 1 refused: the script asks it, and only it (node 2's 0 is final).
        let again = round(&mut m, t0, &vec![Ok(Reply::Int(-1)); 5]);
        let nodes: Vec<u16> = again.iter().map(|r| r.command.node().0).collect();
        assert_eq!(nodes, [1]);
        assert!(again.iter().all(|r| words(r) == script));
        let Step::Wait(w) = m.poll(t0) else {
            panic!("a pause")
        };
        assert_eq!(m.native_refused().collect::<Vec<_>>(), [1]);

        // The next attempt: node 1 gets the script, node 2 still its DELIFEQ (busy node 4
        // nothing).
        let sent = round(
            &mut m,
            w.until,
            &[lost(), lost(), lost(), granted(), busy()],
        );
        let second = token(&sent);
        assert_ne!(first, second);
        let released = round(&mut m, w.until, &vec![Ok(Reply::Int(1)); 5]);
        let names: Vec<String> = released
            .iter()
            .map(|r| r.command.name().to_owned())
            .collect();
        assert_eq!(names, ["EVALSHA", "EVALSHA", "DELIFEQ", "DELEX"]);
        assert_eq!(
            words(&released[2]),
            ["DELIFEQ", key.as_str(), second.as_str()]
        );
        assert!(matches!(m.poll(w.until), Step::Wait(_)));
    }

    /// A failed round is undone only where our key may be: a node that answered this
    /// round's `SET NX PX` with nil (another holder's key) or an error reply did not run
    /// it and cannot hold this attempt's fresh token, so it gets no command at all; a node
    /// that granted, or whose reply was lost, may hold it and is undone. When no node may
    /// hold it there is no undo round: the machine goes straight on (here: to its pause).
    #[test]
    fn a_failed_round_is_undone_only_on_the_nodes_that_may_hold_the_key() {
        let t0 = origin();
        let mut m = machine(Some(Duration::from_secs(1)), t0);
        let lost = Err(TransportFailure::no_reply("timed out"));
        round(&mut m, t0, &[granted(), busy(), granted(), lost, busy()]);
        let undone = round(&mut m, t0, &vec![Ok(Reply::Int(1)); 5]);
        let nodes: Vec<u16> = undone.iter().map(|r| r.command.node().0).collect();
        assert_eq!(
            nodes,
            [0, 2, 3],
            "the 2 that granted and the 1 lost, in one batch"
        );
        assert!(undone.iter().all(|r| r.command.name() == "EVALSHA"));
        let Step::Wait(w) = m.poll(t0) else {
            panic!("a pause")
        };

        // Every node busy or refusing: nothing to undo, no batch before the pause.
        let now = w.until;
        let noperm = Ok(Reply::Error(ErrorReply::new("NOPERM", "no 'set'")));
        round(&mut m, now, &[busy(), busy(), busy(), noperm, busy()]);
        let Step::Wait(w) = m.poll(now) else {
            panic!("a pause, with no undo batch")
        };

        // Every node failing without a reply: each may hold it, each is undone.
        let now = w.until;
        let lost = Err(TransportFailure::no_reply("timed out"));
        round(&mut m, now, &vec![lost; 5]);
        let undone = round(&mut m, now, &vec![Ok(Reply::Int(0)); 5]);
        assert_eq!(undone.len(), 5);
        assert!(matches!(m.poll(now), Step::Wait(_)));

        // Trying once and finding every node busy: the error at once, no undo batch.
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![busy(); 5]);
        assert!(matches!(m.poll(t0), Step::Done(Err(Error::Timeout { .. }))));
    }

    /// A passing error on a native delete (a node still loading, busy, out of memory) sends
    /// the script to that node, but only a refusal of the command itself (not known, no
    /// right to it) makes the driver stop choosing it there.
    #[test]
    fn only_a_refusal_of_the_command_turns_a_nodes_native_delete_off() {
        use crate::lease::NativeDelete::DelIfEq;
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(red)) = m.poll(t0) else {
            panic!()
        };
        let native = [Some(DelIfEq); 5];
        let mut rel = QuorumOp::new(&red, QuorumAction::Release, Duration::from_millis(50))
            .unwrap()
            .with_native_release(&native);
        let error = |code: &str, message: &str| Ok(Reply::Error(ErrorReply::new(code, message)));
        round(
            &mut rel,
            t0,
            &[
                error("LOADING", "Redis is loading the dataset in memory"),
                error("BUSY", "Redis is busy running a script"),
                error(
                    "NOPERM",
                    "this user has no permissions to run the 'delifeq' command",
                ),
                error("ERR", "unknown command 'DELIFEQ'"),
                Ok(Reply::Int(1)),
            ],
        );
        let again = round(&mut rel, t0, &vec![Ok(Reply::Int(1)); 4]);
        let nodes: Vec<u16> = again.iter().map(|r| r.command.node().0).collect();
        assert_eq!(
            nodes,
            [0, 1, 2, 3],
            "every node that did not delete asks the script"
        );
        assert_eq!(rel.native_refused().collect::<Vec<_>>(), [2, 3]);
    }

    #[test]
    fn bad_options_are_refused() {
        let t0 = origin();
        assert!(RedLockAcquire::new(spec(), RedLockOptions::new(0), 1, t0).is_err());
        let slow = RedLockOptions {
            node_timeout: TTL,
            ..RedLockOptions::new(3)
        };
        assert!(RedLockAcquire::new(spec(), slow, 1, t0).is_err());
        let fair = LockSpec::fair(
            &Keyspace::default(),
            "f",
            Token::from_random([1; 16]),
            TTL,
            TTL,
        )
        .unwrap();
        assert!(RedLockAcquire::new(fair, RedLockOptions::new(3), 1, t0).is_err());
    }

    #[test]
    fn granted_counts_only_nodes_that_still_hold_the_key() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(mut red)) = m.poll(t0) else {
            panic!()
        };
        assert_eq!((red.granted, red.has_quorum()), (5, true));
        let ok = Ok(Reply::Int(1));
        let gone = Ok(Reply::Int(0));
        let extend = |red: &RedLease, now: Instant, answers: &[Result<Reply, TransportFailure>]| {
            let mut ext =
                QuorumOp::new(red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
            let sent = round(&mut ext, now, answers);
            // Only the extend script, on every node: nothing writes the key back.
            assert!(
                sent.iter().all(|r| r.command.name() == "EVALSHA"),
                "{sent:?}"
            );
            ext.poll(now).outcome()
        };

        // Node 4 restarted empty: the extension holds (4 of 5) and granted says 4.
        let t1 = t0 + Duration::from_secs(1);
        let outcome = extend(
            &red,
            t1,
            &[ok.clone(), ok.clone(), ok.clone(), ok.clone(), gone.clone()],
        );
        assert_eq!((outcome.holding, outcome.lost), (4, false));
        red.apply(outcome, t1).unwrap();
        assert_eq!(red.granted, 4);
        assert_eq!(red.lease.valid_until, t1 + TTL - drift(TTL));

        // Two more restarted: 2 of 5 still ours, a quorum is impossible: lost at once.
        let t2 = t1 + Duration::from_secs(1);
        let outcome = extend(
            &red,
            t2,
            &[
                ok.clone(),
                ok.clone(),
                gone.clone(),
                gone.clone(),
                gone.clone(),
            ],
        );
        assert_eq!((outcome.holding, outcome.lost), (2, true));
        assert!(red.apply(outcome, t2).is_err());
        assert_eq!((red.granted, red.has_quorum()), (2, false));
        assert_eq!(red.lease.remaining(t2), Duration::ZERO, "reported lost now");
    }

    #[test]
    fn an_extension_with_unanswered_nodes_keeps_the_old_validity() {
        let t0 = origin();
        let mut m = machine(None, t0);
        round(&mut m, t0, &vec![granted(); 5]);
        let Step::Done(Ok(mut red)) = m.poll(t0) else {
            panic!()
        };
        let before = red.lease.valid_until;
        let ok = Ok(Reply::Int(1));
        let gone = Ok(Reply::Int(0));
        let t1 = t0 + Duration::from_secs(1);
        let mut ext =
            QuorumOp::new(&red, QuorumAction::Extend(TTL), Duration::from_millis(50)).unwrap();
        round(&mut ext, t1, &[ok.clone(), ok, gone, down(), down()]);
        let outcome = ext.poll(t1).outcome();
        assert!(!outcome.lost, "2 held + 2 unknown could still be 3");
        assert!(red.apply(outcome, t1).is_err());
        assert_eq!(red.granted, 2);
        assert_eq!(
            red.lease.valid_until, before,
            "unknown: the old grant's validity stands"
        );
    }

    trait DoneOk {
        fn done_ok(self) -> Option<Instant>;
        fn outcome(self) -> QuorumOutcome;
    }

    impl DoneOk for Step<QuorumOutcome> {
        fn done_ok(self) -> Option<Instant> {
            self.outcome().result.ok()
        }

        fn outcome(self) -> QuorumOutcome {
            match self {
                Step::Done(Ok(outcome)) => outcome,
                other => panic!("expected an outcome, got {other:?}"),
            }
        }
    }
}

mod token_tests {
    use super::*;
    use crate::keys::Keyspace;
    use crate::lease::Token;
    use crate::testing::origin;

    #[test]
    fn each_attempt_after_a_full_release_uses_a_new_token() {
        let t0 = origin();
        let spec = LockSpec::lease(
            &Keyspace::default(),
            "t",
            Token::from_random([5; 16]),
            Duration::from_secs(10),
        )
        .unwrap();
        let options = RedLockOptions {
            wait: Some(Duration::from_secs(1)),
            ..RedLockOptions::new(3)
        };
        let mut m = RedLockAcquire::new(spec, options, 1, t0).unwrap();
        let mut tokens = Vec::new();
        let mut now = t0;
        for round in 0..2 {
            let Step::Send(b) = m.poll(now) else {
                panic!("acquire")
            };
            tokens.push(String::from_utf8(b.requests[0].command.args()[2].to_vec()).unwrap());
            for r in &b.requests {
                // Lost: the `SET` may have run, so the attempt is undone.
                let lost = TransportFailure::no_reply("timed out");
                m.handle(Response::failed(r.id, lost), now);
            }
            let Step::Send(rel) = m.poll(now) else {
                panic!("release")
            };
            // The release names the same token as its attempt.
            assert_eq!(
                String::from_utf8(rel.requests[0].command.args()[4].to_vec()).unwrap(),
                tokens[round]
            );
            for r in &rel.requests {
                m.handle(Response::reply(r.id, Reply::Int(0)), now);
            }
            let Step::Wait(w) = m.poll(now) else {
                panic!("pause")
            };
            now = w.until;
        }
        assert_ne!(tokens[0], tokens[1]);
        assert!(tokens[1].starts_with(&tokens[0]));
    }
}

mod release_script {
    use super::*;

    #[test]
    fn its_digest_matches_its_source_and_it_announces_nothing() {
        let digest = sha1_smol::Sha1::from(RELEASE.source).digest().to_string();
        assert_eq!(digest, RELEASE.sha1);
        crate::script::tests::check_prelude(&RELEASE);
        assert!(
            !RELEASE.source.contains("PUBLISH'"),
            "no RedLock waiter listens for a release"
        );
    }
}
