//! The sans-IO core driven from tokio over the async `redis` crate, without the blocking
//! driver: a lease lock tried once, then waited for with a pub/sub wake-up while its holder
//! renews and releases it; a fair waiter dropped by a `select!` while in line, whose place
//! in line is given back at once; and a queue job pushed, taken and acked. Every conversion
//! between `redis` and the core goes through the crate `redlease-redis` (an async
//! application needs it and `redlease-core`, not the blocking `redlease`);
//! `docs/embedding.md` explains the driver loop below step by step.
//!
//! Runs against `REDIS_URL` when it is set (keys start with `tokio-embed:`); otherwise it
//! starts a throwaway redis-server on a free port and stops it at the end. Exits 0 when
//! everything behaved as described, else prints what went wrong and exits 1.
//!
//! ```text
//! cargo run --example tokio_embed
//! ```

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::BoxError;
use futures_util::StreamExt;
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSubStream};
use redlease_core::keys::Keyspace;
use redlease_core::lease::{Acquire, AcquireOptions, Acquisition, LockSpec, ScriptOp, Token, Undo};
use redlease_core::queue::{self, NewJob, Pushed, QueueKeys, QueueSettings, Take, TakeJob};
use redlease_core::{NodeId, Protocol, Response, Step, TransportFailure, WakeOn};
use redlease_redis as adapter;

/// The lease of the example lock.
const TTL: Duration = Duration::from_secs(30);
/// How long the waiter waits at most.
const WAIT: Duration = Duration::from_secs(10);
/// The waiter's retry pause: long, so that only the release message can wake it in time.
const RETRY: Duration = Duration::from_secs(5);
/// How soon after the release the waiter must hold the lock (the pub/sub promise; the
/// retry pause alone would take `RETRY`). Generous for a loaded machine.
const WOKEN_WITHIN: Duration = Duration::from_secs(2);
/// How long a plain command (release, extend, ack) may take.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return common::finish("tokio_embed", Err(e.into())),
    };
    common::finish("tokio_embed", runtime.block_on(run()))
}

async fn run() -> Result<(), BoxError> {
    let redis = common::redis("tokio_embed")?;
    let client = redis::Client::open(redis.url.as_str())?;
    // The async connection's default response timeout is 500 ms: shorter than a `WAIT` of
    // `min_replicas`, and not the machine's idea of a deadline. Turn it off and bound each
    // batch by its own deadline instead (see `send`).
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let keyspace = Keyspace::new("tokio-embed")?;

    lock(&client, &conn, &keyspace).await?;
    abandoned(&client, &conn, &keyspace).await?;
    jobs(&conn, &keyspace).await?;
    println!("tokio_embed: all steps behaved as expected");
    Ok(())
}

/// The lease lock: try once, then a waiter woken by the release; the holder renews first.
async fn lock(
    client: &redis::Client,
    conn: &MultiplexedConnection,
    keyspace: &Keyspace,
) -> Result<(), BoxError> {
    let name = "report";
    let holder = acquire(
        conn,
        LockSpec::lease(keyspace, name, token()?, TTL)?,
        &AcquireOptions::default(),
        None,
        None,
    )
    .await?;
    let Acquisition::Acquired(holder) = holder else {
        return Err(format!("the lock {name:?} was busy at the start (a stale holder?)").into());
    };
    println!(
        "tokio_embed: holder acquired {name:?} with fence {}",
        holder.fence
    );

    // A second contender trying once finds it busy, with the holder's time left.
    let tried = acquire(
        conn,
        LockSpec::lease(keyspace, name, token()?, TTL)?,
        &AcquireOptions::default(),
        None,
        None,
    )
    .await?;
    let Acquisition::Busy { holder_ttl } = tried else {
        return Err("a second contender acquired a held lock".into());
    };
    println!("tokio_embed: a second try finds it busy (holder's ttl {holder_ttl:?})");

    // The waiter: subscribed to the release channel its machine names, woken by the release.
    let spec = LockSpec::lease(keyspace, name, token()?, TTL)?;
    let mut wakes = Wakes::subscribe(client, &spec.wake).await?;
    let options = AcquireOptions {
        wait: Some(WAIT),
        retry_initial: RETRY,
        retry_max: RETRY,
        ..AcquireOptions::default()
    };
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let waiter_conn = conn.clone();
    let waiter = tokio::spawn(async move {
        let out = acquire(
            &waiter_conn,
            spec,
            &options,
            Some(&mut wakes),
            Some(waiting_tx),
        )
        .await;
        out.map(|a| (a, Instant::now()))
    });
    // Wait until the waiter found the lock busy and is waiting (or it finished: see below).
    let _ = waiting_rx.await;

    // The holder renews its lease (as a watchdog would, every ttl/3) ...
    let extended = drive(
        conn,
        ScriptOp::extend(&holder, TTL, deadline())?,
        None,
        None,
    )
    .await?;
    println!(
        "tokio_embed: holder renewed; valid for {:?} more",
        extended.saturating_duration_since(Instant::now())
    );
    // ... then releases it: the release script publishes on the channel the waiter watches.
    // A renewed lease is released with its validity as renewed (`holder.valid_until` is
    // the acquisition's): a release whose reply is lost is then judged by it.
    let released_at = Instant::now();
    let release = ScriptOp::release(&holder, deadline()).with_valid_until(extended);
    drive(conn, release, None, None).await?;

    let (acquired, at) = waiter.await??;
    let Acquisition::Acquired(next) = acquired else {
        return Err("the waiter ended without the lock".into());
    };
    let after = at.saturating_duration_since(released_at);
    println!(
        "tokio_embed: the waiter got the lock {after:?} after the release, fence {}",
        next.fence
    );
    if next.fence <= holder.fence {
        return Err(format!(
            "fences must increase: {} after {}",
            next.fence, holder.fence
        )
        .into());
    }
    if after > WOKEN_WITHIN {
        return Err(format!(
            "the waiter took {after:?} after the release (more than {WOKEN_WITHIN:?}): the \
             release message did not wake it"
        )
        .into());
    }
    drive(conn, ScriptOp::release(&next, deadline()), None, None).await?;
    Ok(())
}

/// A fair lock's waiter dropped (by a `select!`; a `timeout` is the same) while it waits in
/// line: its place is given back at once (by the `UndoOnDrop` of `acquire`), so the next
/// waiter gets the lock as soon as the holder releases it, instead of waiting behind a
/// place nobody will take until the abandoned waiter's timeout.
async fn abandoned(
    client: &redis::Client,
    conn: &MultiplexedConnection,
    keyspace: &Keyspace,
) -> Result<(), BoxError> {
    let name = "printer";
    // Long enough that a place left behind would make the next waiter time out.
    let waiter_timeout = Duration::from_secs(30);
    let fair = || -> Result<LockSpec, BoxError> {
        Ok(LockSpec::fair(
            keyspace,
            name,
            token()?,
            TTL,
            waiter_timeout,
        )?)
    };
    let Acquisition::Acquired(holder) =
        acquire(conn, fair()?, &AcquireOptions::default(), None, None).await?
    else {
        return Err(format!("the fair lock {name:?} was busy at the start").into());
    };
    let waiting = AcquireOptions {
        wait: Some(WAIT),
        ..AcquireOptions::default()
    };

    // The first waiter joins the line, and is dropped by a `select!` once it waits there.
    let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
    let first = acquire(conn, fair()?, &waiting, None, Some(waiting_tx));
    let dropped = tokio::select! {
        _ = first => false,
        _ = waiting_rx => true,
    };
    if !dropped {
        return Err("the first fair waiter did not wait in line".into());
    }

    // The next waiter, behind it: woken by the release, it gets the lock well before the
    // abandoned place would have timed out.
    let spec = fair()?;
    let mut wakes = Wakes::subscribe(client, &spec.wake).await?;
    let next_conn = conn.clone();
    let (next_tx, next_rx) = tokio::sync::oneshot::channel();
    let next = tokio::spawn(async move {
        acquire(&next_conn, spec, &waiting, Some(&mut wakes), Some(next_tx)).await
    });
    let _ = next_rx.await;
    let released_at = Instant::now();
    drive(conn, ScriptOp::release(&holder, deadline()), None, None).await?;
    let Acquisition::Acquired(lease) = next.await?? else {
        return Err("the next fair waiter ended without the lock".into());
    };
    let after = released_at.elapsed();
    println!(
        "tokio_embed: an abandoned fair waiter left the line; the next got the lock {after:?} after the release"
    );
    if after >= waiter_timeout / 2 {
        return Err(format!("the next waiter waited {after:?}: the abandoned place stayed").into());
    }
    drive(conn, ScriptOp::release(&lease, deadline()), None, None).await?;
    Ok(())
}

/// The queue: push a job, take it (a `Take::Taken` names its id, payload and delivery
/// number), renew its lease, ack it; then a take finds the queue `Take::Empty`.
async fn jobs(conn: &MultiplexedConnection, keyspace: &Keyspace) -> Result<(), BoxError> {
    let keys = QueueKeys::new(keyspace, "emails")?;
    let settings = QueueSettings::default();
    let id = format!("welcome-{}", std::process::id());
    let job = NewJob {
        id: id.clone(),
        payload: b"hello".to_vec(),
    };
    let pushed = drive(
        conn,
        queue::push(&keys, &[job], 0, Duration::ZERO, deadline())?,
        None,
        None,
    )
    .await?;
    if pushed != [Pushed::Queued(id.clone())] {
        return Err(format!("push answered {pushed:?}").into());
    }

    let take = |options: &AcquireOptions| -> Result<TakeJob, BoxError> {
        let now = Instant::now();
        Ok(TakeJob::new(
            &keys,
            token()?,
            &settings,
            options,
            seed()?,
            now,
        )?)
    };
    let taken = drive(conn, take(&AcquireOptions::default())?, None, None).await?;
    let Take::Taken(job) = taken else {
        return Err("the queue was empty right after a push".into());
    };
    println!(
        "tokio_embed: took job {:?} ({:?}), delivery {}",
        job.id,
        String::from_utf8_lossy(&job.payload),
        job.delivery
    );
    if job.id != id || job.payload != b"hello" || job.delivery != 1 {
        return Err(format!("took {:?} delivery {}, pushed {id:?}", job.id, job.delivery).into());
    }
    // A long job renews its lease (its visibility timeout) like a lock.
    drive(
        conn,
        job.extend(settings.visibility, deadline())?,
        None,
        None,
    )
    .await?;
    drive(conn, job.ack(&keys, deadline()), None, None).await?;
    println!("tokio_embed: acked {:?}", job.id);

    // Empty: a take that tries once says when the next job is due (`None`: nothing at all
    // is scheduled, neither a delayed job nor another lease).
    match drive(conn, take(&AcquireOptions::default())?, None, None).await? {
        Take::Empty { next_due_in: None } => Ok(()),
        other => Err(format!("after the ack the queue should be empty, got {other:?}").into()),
    }
}

/// Acquires `spec` with `options`, waiting on `wakes` if given (`waiting` is told the first
/// time it waits). Cancel-safe: dropped before it finished (a `timeout`, a `select!` that
/// chose another branch), it gives back what an attempt already sent may have taken.
async fn acquire(
    conn: &MultiplexedConnection,
    spec: LockSpec,
    options: &AcquireOptions,
    wakes: Option<&mut Wakes>,
    waiting: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<Acquisition, BoxError> {
    let undo = UndoOnDrop(Some((conn.clone(), spec.clone())));
    let machine = Acquire::new(spec, options, seed()?, Instant::now())?;
    let out = drive(conn, machine, wakes, waiting).await;
    // Finished, either way: an acquisition that ends by itself cleans up after itself.
    undo.disarm();
    Ok(out?)
}

/// Runs [`Undo`] on a spawned task when dropped armed: the machine was dropped with an
/// attempt that may have run on the server (the lock granted to this token, a place taken
/// in a line). Spawned on the same multiplexed connection, the undo reaches Redis after
/// anything the dropped attempt sent; one on another connection would be safe too (the
/// undo records the token, and a late attempt then takes nothing).
struct UndoOnDrop(Option<(MultiplexedConnection, LockSpec)>);

impl UndoOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for UndoOnDrop {
    fn drop(&mut self) {
        if let Some((conn, spec)) = self.0.take() {
            tokio::spawn(async move {
                let undo = Undo::new(&spec, deadline());
                if let Err(e) = drive(&conn, undo, None, None).await {
                    // What it may hold then ends with its ttl (a place in a line with its
                    // waiter timeout): never two holders, only a later next one.
                    eprintln!("tokio_embed: an abandoned acquisition could not be undone: {e}");
                }
            });
        }
    }
}

/// The driver loop: poll the machine, carry out its step, feed outcomes back, until done.
/// `waiting` is told the first time the machine waits.
async fn drive<P: Protocol>(
    conn: &MultiplexedConnection,
    mut machine: P,
    mut wakes: Option<&mut Wakes>,
    mut waiting: Option<tokio::sync::oneshot::Sender<()>>,
) -> Result<P::Output, redlease_core::Error> {
    if let Some(w) = wakes.as_deref_mut()
        && w.fresh
    {
        // Subscribed just now: a release published before the subscription took effect
        // was missed, so the machine must look again (the release-before-subscribe race).
        w.fresh = false;
        machine.wake(Instant::now());
    }
    loop {
        match machine.poll(Instant::now()) {
            Step::Send(batch) => {
                // One multiplexed connection: every batch goes on the same connection, so
                // `batch.same_connection` holds by construction.
                for response in send(conn, &batch).await {
                    machine.handle(response, Instant::now());
                }
            }
            Step::Wait(wait) => {
                if let Some(tx) = waiting.take() {
                    let _ = tx.send(());
                }
                let until = tokio::time::Instant::from_std(wait.until);
                match (wakes.as_deref_mut(), &wait.wake_on) {
                    (Some(w), Some(on)) => {
                        tokio::select! {
                            () = tokio::time::sleep_until(until) => {}
                            woken = w.next_for(on) => if woken {
                                machine.wake(Instant::now());
                            } else {
                                // The subscription ended: wait for the machine's own time.
                                tokio::time::sleep_until(until).await;
                            },
                        }
                    }
                    _ => tokio::time::sleep_until(until).await,
                }
            }
            Step::Done(result) => return result,
        }
    }
}

/// Sends `batch` and returns one response per request, in order: each command bounded by the
/// batch's deadline (a timeout is "no reply": the command may have run).
async fn send(conn: &MultiplexedConnection, batch: &redlease_core::Batch) -> Vec<Response> {
    let mut conn = conn.clone();
    let deadline = tokio::time::Instant::from_std(batch.deadline);
    let mut responses = Vec::with_capacity(batch.requests.len());
    for r in &batch.requests {
        if r.command.node() != NodeId::PRIMARY {
            let failure = TransportFailure::not_sent("this driver talks to one node");
            responses.push(Response::failed(r.id, failure));
            continue;
        }
        let cmd = adapter::command(&r.command);
        let sent = tokio::time::timeout_at(deadline, conn.req_packed_command(&cmd)).await;
        responses.push(match sent {
            Ok(outcome) => adapter::response(r.id, outcome),
            Err(_) => Response::failed(
                r.id,
                TransportFailure::no_reply("the batch deadline passed"),
            ),
        });
    }
    responses
}

/// A pub/sub subscription to one release channel.
struct Wakes {
    stream: PubSubStream,
    /// Subscribed, and no machine has been woken since (see `drive`).
    fresh: bool,
}

impl Wakes {
    /// Subscribes to `on.channel` on a connection of its own (`SUBSCRIBE`; a keyspace
    /// with sharded pub/sub would need `SSUBSCRIBE`).
    async fn subscribe(client: &redis::Client, on: &WakeOn) -> Result<Self, BoxError> {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&on.channel).await?;
        Ok(Wakes {
            stream: pubsub.into_on_message(),
            fresh: true,
        })
    }

    /// The next message that concerns a waiter of `on`: `true` to wake it, `false` when the
    /// subscription ended (the machine then waits until its own `until`).
    async fn next_for(&mut self, on: &WakeOn) -> bool {
        while let Some(msg) = self.stream.next().await {
            if on.concerns(msg.get_channel_name(), msg.get_payload_bytes()) {
                return true;
            }
        }
        false
    }
}

/// A fresh owner token: 16 random bytes from the OS. Tokens must be unguessable and unique
/// among all clients of a lock (a token another client can reproduce lets it release or
/// extend your lease): never derive them from a pid, a clock or a counter.
fn token() -> Result<Token, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(Token::from_random(bytes))
}

/// A seed for the retry jitter (random too, so that contenders do not retry in step).
fn seed() -> Result<u64, getrandom::Error> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// The deadline of a plain command.
fn deadline() -> Instant {
    Instant::now() + OP_TIMEOUT
}
