//! What happened in one run, as recorded facts: holds, acquisitions, writes to the fenced
//! resource, queue events. The checker reads only this.

use std::collections::{BTreeMap, HashSet};

use redlease_core::lease::{LeaseKind, LockKind};

/// Which kind of hold, as the checker groups them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// An exclusive lease lock.
    Lease,
    /// A reentrant lock.
    Reentrant,
    /// A fair lock.
    Fair,
    /// The read side of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
    /// A semaphore permit.
    Permit,
    /// A job taken from a queue.
    Job,
    /// A RedLock over several nodes.
    Red,
}

impl From<LeaseKind> for HoldKind {
    fn from(k: LeaseKind) -> Self {
        match k {
            LeaseKind::Lock(LockKind::Lease) => HoldKind::Lease,
            LeaseKind::Lock(LockKind::Reentrant) => HoldKind::Reentrant,
            LeaseKind::Lock(LockKind::Fair) => HoldKind::Fair,
            LeaseKind::Lock(LockKind::Read) => HoldKind::Read,
            LeaseKind::Lock(LockKind::Write) => HoldKind::Write,
            LeaseKind::Permit => HoldKind::Permit,
            LeaseKind::Job => HoldKind::Job,
        }
    }
}

impl HoldKind {
    /// Exclusive with every other hold of the same name but reads and permits.
    pub fn exclusive(self) -> bool {
        matches!(
            self,
            HoldKind::Lease
                | HoldKind::Reentrant
                | HoldKind::Fair
                | HoldKind::Write
                | HoldKind::Red
        )
    }
}

/// One granted hold of a lock, permit or job. Times are global µs.
#[derive(Debug, Clone)]
pub struct Hold {
    /// Who: client and task.
    pub client: usize,
    /// The task.
    pub task: usize,
    /// The lock's (or queue's) name.
    pub name: String,
    /// What kind.
    pub kind: HoldKind,
    /// The fence (delivery number for a job).
    pub fence: u64,
    /// Whether its acquisition issued a fence: false for an unfenced lease lock
    /// (`LockSpec::fenced(false)`, fence 0) and for RedLock; the fence properties skip it.
    pub fenced: bool,
    /// When the server ran the command that granted it (for RedLock: when the grant reached
    /// the client).
    pub granted: u64,
    /// When the holder learnt of it.
    pub received: u64,
    /// Until when the holder's own clock says it holds (updated by renewals).
    pub valid_until: u64,
    /// Acquired with `min_replicas`.
    pub replicated: bool,
    /// Renewed by its client's watchdog (which reports its loss).
    pub watched: bool,
    /// When the holder sent its release (it stops acting on the lease then).
    pub release_sent: Option<u64>,
    /// When the holder was told its lease is lost, and why.
    pub lost: Option<(u64, String)>,
    /// When the holder's watchdog sent each renewal.
    pub renewals_sent: Vec<u64>,
    /// The job id, for a job.
    pub job: Option<String>,
    /// The lease's token as the server knows it (a reentrant lock's: its op).
    pub token: String,
}

impl Hold {
    /// The end of the time the holder may act on it.
    pub fn end(&self) -> u64 {
        let mut end = self.valid_until;
        if let Some(r) = self.release_sent {
            end = end.min(r);
        }
        if let Some((l, _)) = &self.lost {
            end = end.min(*l);
        }
        end
    }
}

/// How an acquisition ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcqResult {
    /// Still running when the run ended.
    Running,
    /// Granted: the hold's index.
    Acquired(usize),
    /// Busy (trying once), timed out or failed: the error text.
    Failed(String),
}

/// One acquisition (a waiting or trying-once call). Times are global µs unless named local.
#[derive(Debug, Clone)]
pub struct Acq {
    /// Who.
    pub client: usize,
    /// The task.
    pub task: usize,
    /// The lock's name.
    pub name: String,
    /// What kind.
    pub kind: HoldKind,
    /// When it started, and the wait (µs, local clock), if it waits.
    pub started: u64,
    /// Start on the caller's clock.
    pub started_local: u64,
    /// How long it may wait (µs), `None`: trying once.
    pub wait: Option<u64>,
    /// How long one attempt may wait for its reply (µs).
    pub reply_timeout: u64,
    /// A waiter that stops asking for this long loses its place in line (µs).
    pub waiter_timeout: Option<u64>,
    /// The lease length (µs; 0 for RedLock).
    pub ttl: u64,
    /// When each acquisition attempt ran on the server.
    pub attempts: Vec<u64>,
    /// When an attempt ran that was granted, and the fence it returned (its reply may have
    /// been lost; a grant takes the waiter out of the line).
    pub grants: Vec<(u64, u64)>,
    /// When it ended, on the global and the caller's clock.
    pub ended: Option<(u64, u64)>,
    /// The outcome.
    pub result: AcqResult,
    /// Whether it issues a fence (false: an unfenced lease lock, whose first attempt is a
    /// bare `SET NX PX` and whose grants are recorded with fence 0; RedLock).
    pub fenced: bool,
}

/// A write that reached the fenced resource.
#[derive(Debug, Clone)]
pub struct Write {
    /// When it arrived.
    pub at: u64,
    /// The writer's hold.
    pub hold: usize,
    /// The fence it carried.
    pub fence: u64,
    /// Whether the resource accepted it.
    pub accepted: bool,
}

/// A job pushed (recorded when the push ran on the server, whatever its reply), or
/// nacked with a backoff.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The id.
    pub id: String,
    /// When the push (or nack) ran on the server (exact µs).
    pub ran: u64,
    /// Its delay (exact µs, as the caller asked): not due before `ran + delay`.
    pub delay: u64,
}

/// One hold on the server, as its own record shows it: `token` held `resource` on `node`
/// from `from` until `until` (global µs, on the server's clock).
#[derive(Debug, Clone)]
pub struct Span {
    /// The node.
    pub node: u16,
    /// The lock's name, or the job's id.
    pub resource: String,
    /// The holder's token (a reentrant lock's: the hold's op).
    pub token: String,
    /// From (the run of the command that made it).
    pub from: u64,
    /// Until: its expiry, or the run of the command that ended it.
    pub until: u64,
    /// The runner whose command made it (`None`: a fault, a restored snapshot).
    pub opened_by: Option<usize>,
    /// For a grouped job whose take booked its group's next rate slot ahead of time: that
    /// slot (global µs), from the server's record of the booking (`lua/group_take.lua`'s
    /// `<stem>s:<token>`), read when the span opened: when the job may start.
    pub booked: Option<u64>,
    /// That command was an unfenced lock's bare `SET NX PX` (it cannot check an undone
    /// record: documented).
    pub opened_by_set: bool,
    /// The runner whose command ended it before its expiry (`None`: it expired, or a fault).
    pub closed_by: Option<usize>,
}

/// What one runner (one machine) was for: kept after the machine finished, so that a late
/// copy of one of its commands can be judged.
#[derive(Debug, Clone, Default)]
pub struct RunnerInfo {
    /// The acquisition it ran, if any.
    pub acq: Option<usize>,
    /// The hold it released, acked or nacked, if any.
    pub settles: Option<usize>,
    /// When its machine finished (global µs).
    pub done: Option<u64>,
    /// When the first of its commands ran on a server (a `NOSCRIPT` answer is no run, nor
    /// an ack-and-take's untake of its next token).
    pub first_ran: Option<u64>,
    /// The token its commands carry (an acquisition's, a release's, a renewal's), if any.
    pub token: Option<String>,
    /// A second token it carries: an ack-and-take's next token (its untake, after an
    /// unanswered call, ends that token's hold).
    pub next_token: Option<String>,
}

/// An ack or nack the worker was told succeeded.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The job's hold (delivery).
    pub hold: usize,
    /// When the worker learnt it.
    pub at: u64,
    /// Ack (true) or nack.
    pub ack: bool,
}

/// Everything recorded in one run.
#[derive(Debug, Default)]
pub struct History {
    /// Human-readable lines `(global µs, text)`, for failure reports.
    pub log: Vec<(u64, String)>,
    /// Granted holds.
    pub holds: Vec<Hold>,
    /// Acquisitions.
    pub acqs: Vec<Acq>,
    /// Writes to the fenced resource.
    pub writes: Vec<Write>,
    /// Permit counts in force: `(since, permits)`, in time order.
    pub permits: Vec<(u64, u64)>,
    /// When a release of a lock of this name ran on the server and freed it.
    pub freed: Vec<(String, u64)>,
    /// Jobs pushed.
    pub pushed: Vec<Pushed>,
    /// Pushes whose outcome is unknown (no reply): their ids.
    pub maybe_pushed: Vec<String>,
    /// Successful acks and nacks (as the worker was told).
    pub settled: Vec<Settled>,
    /// Deliveries (holds) whose ack ran on the server and removed the job.
    pub acks_ran: Vec<usize>,
    /// When a node came back with an older copy of its data (a restart from a snapshot, a
    /// failover): global µs, in order.
    pub restored: Vec<u64>,
    /// When each ack that removed a job ran: (job id, global µs), in order.
    pub acks_ran_at: Vec<(String, u64)>,
    /// Jobs queued by a push with a dedup id (until done: one live job per dedup id):
    /// (dedup id, job id, when the push ran), in order.
    pub dedup_queued: Vec<(String, String, u64)>,
    /// Ids on the dead list when the run ended.
    pub dead: Vec<String>,
    /// When the run ended (global µs).
    pub end: u64,
    /// When the last fault struck (global µs).
    pub faults_end: u64,
    /// The run was stopped after too many events (a livelock).
    pub runaway: bool,
    /// Machines that ended reporting a broken protocol contract: (when, what).
    pub broken: Vec<(u64, String)>,
    /// Jobs nacked with a backoff: not due again before `ran + delay`.
    pub nacked: Vec<Pushed>,
    /// The server's record of holds.
    pub spans: Vec<Span>,
    /// Each runner's purpose, by runner id.
    pub runners: Vec<RunnerInfo>,
    /// Acquisition attempts that ran after their machine had finished: (runner, when, a bare
    /// `SET NX PX`).
    pub late_attempts: Vec<(usize, u64, bool)>,
    /// The primitive's holds are recorded by the server's record (`held-on-server` applies).
    pub recorded: bool,
    /// How many server nodes (RedLock: a hold needs a majority).
    pub nodes: u16,
    /// Releases, acks and nacks the caller was told succeeded: (runner, hold).
    pub settle_ok: Vec<(usize, usize)>,
    /// Renewals the watchdog counted as a success: (hold, when the answering call ran).
    pub renewed: Vec<(usize, u64)>,
    /// The queue's pauses and resumes as they ran on the server: (how many spans the
    /// server's record held then, when, a pause (true) or a resume).
    pub pauses: Vec<(usize, u64, bool)>,
    /// Take attempts (takes and acks-and-takes) that ran while the queue was paused.
    pub takes_while_paused: u64,
    /// The rate limits the run set on a queue's groups: (`None`: every group, each on its
    /// own; `Some("!")`: the whole set of groups, emission interval µs, burst).
    pub group_rates: Vec<(Option<String>, u64, u64)>,
    /// Rate-limited answers (group defers) that ran on the server and took the job back.
    pub defers: Vec<Defer>,
    /// Watched deliveries of jobs pushed with a timeout: (hold, timeout + grace in µs, the
    /// time from its take after which its watchdog no longer renews it).
    pub job_limits: Vec<(usize, u64)>,
    /// Jobs the push scripts that ran pushed, by their own answer (one '1' per job pushed,
    /// a duplicate '0'; a push with a dedup id answering `{1, id}`), and the occurrences
    /// the schedule scripts that ran added to the payloads: what the `pushed` counter must
    /// hold.
    pub pushed_ran: u64,
    /// Takes given back by the untake script (it answered 1): each uncounts its `taken`.
    pub given_back: u64,
    /// The queue's per-minute counters when the run ended, summed over the minutes by event
    /// (`acked_taken` added to `acked` and `taken`, as `Queue::counts` reads them); `None`
    /// when the run's queue does not count.
    pub counted: Option<BTreeMap<String, i64>>,
    /// Changes of a queue's group limits as they ran on the server (and the limits set
    /// before the workers started, at 0), in order.
    pub group_limits: Vec<LimitSet>,
    /// Cancels that ran on the server and found their job (waiting: 1, in flight: 2):
    /// (job id, when, the job forgotten rather than sent to the dead list, the answer).
    pub cancels_ran: Vec<(String, u64, bool, i64)>,
    /// The runners of cancels (a cancel ends another token's hold by design).
    pub cancel_runners: HashSet<usize>,
    /// Dead jobs requeued, as the requeues ran on the server: (job id, when).
    pub requeued: Vec<(String, u64)>,
    /// When a drain's count ran on the server and answered that nothing was in flight:
    /// (how many spans the server's record held then, when).
    pub drained_at: Vec<(usize, u64)>,
    /// Where each job of the queue was on the server when the run ended (node 0's keys):
    /// job id -> its places (`ready`, `delayed`, `group-ready`, `in-flight`, `leased`,
    /// `dead`, `payload`); `None` when not read (not a queue run).
    pub final_jobs: Option<BTreeMap<String, Vec<&'static str>>>,
    /// Group takes that ran and found nothing to lease (not paused): (how many spans the
    /// server's record held then, when, each group's ready jobs just after it and whether
    /// the group was rate-blocked or paused then).
    pub idle_takes: Vec<(usize, u64, Vec<GroupState>)>,
    /// The command (in [`History::commands`]'s count) each of `idle_takes` was.
    pub idle_seq: Vec<u64>,
    /// How many commands ran on the servers (a `NOSCRIPT` answer included), in order.
    pub commands: u64,
    /// How many times a schedule's pending occurrence was observed (after a command ran:
    /// one per schedule in the hash).
    pub schedule_checks: u64,
    /// Observations at which a schedule's pending occurrence was not runnable, or another
    /// occurrence of it, never delivered, waited.
    pub schedule_gaps: Vec<ScheduleGap>,
    /// Occurrences cancelled and skipped: (id, when the cancel was started, when the
    /// advance past it was over).
    pub skip_windows: Vec<(String, u64, u64)>,
    /// Schedules upserted on a queue's grouped keys: (when, refused with `InvalidArgument`).
    pub grouped_schedules: Vec<(u64, bool)>,
    /// Jobs keep-latest pushes queued, as the pushes ran (answered `{1, id}`): (job, when,
    /// parked behind the job in flight holding the dedup id).
    pub follow_ups: Vec<(String, u64, bool)>,
    /// The follow-ups still parked when the run ended (node 0's keys): (follow-up, the job
    /// holding its dedup id then).
    pub parked_at_end: Vec<(String, Option<String>)>,
    /// Follow-ups dropped by a later keep-latest push that found the job they followed
    /// waiting again (answered `Replaced` with that job: it carries the latest payload), as
    /// the pushes ran: (follow-up, when).
    pub superseded: Vec<(String, u64)>,
    /// Keep-latest pushes run again (a retry or a copy) after their job was taken, answered
    /// `Queued` with that very job, parked behind itself (a library defect: when it ends,
    /// it is made ready again): (job, when). Not judged by the job properties.
    pub self_follow_ups: Vec<(String, u64)>,
}

/// A schedule whose pending occurrence was not alone and runnable after a command.
#[derive(Debug, Clone)]
pub struct ScheduleGap {
    /// When (global µs).
    pub at: u64,
    /// The pending occurrence (`sched:<name>:<due>`).
    pub pending: String,
    /// Whether it was delayed, ready or in flight.
    pub runnable: bool,
    /// Other occurrences of the schedule, never delivered, waiting.
    pub others: Vec<String>,
}

/// A group as a take found it: its id, its ready jobs, whether it was rate-blocked or
/// paused.
pub type GroupState = (String, u64, bool);

/// A change of a queue's group limits, as it ran on the server.
#[derive(Debug, Clone)]
pub struct LimitSet {
    /// How many spans the server's record held then (later spans were opened after it).
    pub spans: usize,
    /// When it ran (global µs).
    pub at: u64,
    /// How many commands had run on the servers before it ([`History::commands`]).
    pub seq: u64,
    /// `None`: the defaults of every group; `Some(g)`: group `g`'s own.
    pub group: Option<String>,
    /// The concurrency set (`None`: a group's own limits cleared, back to the defaults).
    pub concurrency: Option<u32>,
}

/// A rate-limited answer as it ran on the server: the job's deliveries counted toward its
/// max deliveries (deliveries less base, read on the server) just before and just after.
#[derive(Debug, Clone)]
pub struct Defer {
    /// When it ran (global µs).
    pub at: u64,
    /// The job.
    pub id: String,
    /// Counted deliveries before (the deferred delivery included).
    pub before: i64,
    /// Counted deliveries after.
    pub after: i64,
}

impl History {
    /// Adds a log line.
    pub fn note(&mut self, at: u64, text: String) {
        self.log.push((at, text));
    }
}
