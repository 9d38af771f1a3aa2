//! `redlease`: the operator tool for redlease (a CLI and a small web dashboard).
//!
//! It reads what the library stores (queues, dead letters, locks, semaphores) and acts on it
//! through the library's own calls. It never uses `KEYS`; it shows at most the first eight
//! characters of an owner token (as many as a forced release needs) and never a password. Exit codes: 0 success (for `check`:
//! every threshold met), 1 a `check` threshold crossed, 2 bad usage or an error (Redis
//! unreachable, refused), 3 a `check` threshold whose number is not available.
#![forbid(unsafe_code)]

mod data;
mod drive;
mod layout;
mod prom;
mod render;
mod web;

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand};

use data::{DeadAction, DeadFilter, Source};
use redlease::queue::dead::DeathCause;

/// The operator tool for redlease: queues, dead letters, locks and semaphores on one Redis.
#[derive(Parser, Debug)]
#[command(
    name = "redlease",
    version,
    after_help = "Examples:\n  redlease --url redis://127.0.0.1:6379/ queues --watch\n  redlease dead jobs --limit 20 --json\n  redlease requeue jobs --reason-contains timeout --limit 100\n  redlease check --max-dead 100 --min-connections 1   (exit 1 when crossed)\n  redlease serve --listen 127.0.0.1:9645"
)]
struct Cli {
    /// The server (`REDIS_URL` when not given).
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        global = true
    )]
    url: String,
    /// The key prefix the applications use (`ClientBuilder::key_prefix`).
    #[arg(long, default_value = "redlease", global = true)]
    prefix: String,
    /// Machine-readable output (one JSON document per refresh).
    #[arg(long, global = true)]
    json: bool,
    /// Seconds to wait for the server.
    #[arg(long, default_value_t = 5.0, global = true)]
    timeout: f64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone, Copy)]
struct Watch {
    /// Refresh in place until interrupted.
    #[arg(long)]
    watch: bool,
    /// Seconds between refreshes with --watch.
    #[arg(long, default_value_t = 2.0)]
    interval: f64,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The server (version, mode, uptime) and its connections.
    Status(Watch),
    /// Every queue: depth by state, oldest age, rates per minute, paused, groups.
    Queues(Watch),
    /// The jobs of one state of a queue (ready, delayed, in_flight, dead), a page at a time.
    Jobs {
        /// The queue.
        queue: String,
        /// The state.
        #[arg(long, default_value = "ready")]
        state: String,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Where the previous page ended (its `next`).
        #[arg(long)]
        cursor: Option<String>,
        /// The queue's grouped jobs (pushed with a group) instead, each as GROUP/ID.
        #[arg(long)]
        grouped: bool,
    },
    /// The dead jobs of a queue, plain and grouped, oldest first (each grouped one with its
    /// group).
    Dead {
        /// The queue.
        queue: String,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One job of a queue, by id.
    Job {
        /// The queue.
        queue: String,
        /// The job's id.
        id: String,
    },
    /// Moves dead jobs back to ready.
    Requeue(DeadArgs),
    /// Deletes dead jobs for good.
    Delete(DeadArgs),
    /// Held locks of every kind (lease, reentrant, fair, read, write, legacy): holder (token
    /// prefix), time left, fence.
    Locks(Watch),
    /// Semaphores: permits, holders, waiters.
    Semaphores(Watch),
    /// Releases a lock held by the holder whose token starts with PREFIX.
    Release {
        /// The lock.
        lock: String,
        /// The start of the holder's token, as `locks` shows it.
        #[arg(long)]
        token_prefix: String,
        /// Do it (without it, only says what would be released).
        #[arg(long)]
        yes: bool,
    },
    /// Pauses a queue (no job is leased until `resume`; jobs in flight finish), or one
    /// group of its grouped jobs with --group.
    Pause(PauseArgs),
    /// Resumes a paused queue, or one paused group with --group.
    Resume(PauseArgs),
    /// Cancels a job: a waiting job will not run; a job in flight loses its lease and its
    /// holder is told. It goes to the dead list (cause `cancelled`).
    Cancel {
        /// The queue.
        queue: String,
        /// The job's id (as `jobs` shows it).
        id: String,
        /// The job's group (for a job pushed into a group).
        #[arg(long)]
        group: Option<String>,
        /// Why (kept as the dead job's reason).
        #[arg(long, default_value = "cancelled by an operator")]
        message: String,
        /// Do it (without it, only says what would be cancelled).
        #[arg(long)]
        yes: bool,
    },
    /// Exits 1 when a threshold is crossed (for cron or a Kubernetes probe), 3 when a number
    /// it needs is not available, 0 otherwise.
    Check {
        /// The oldest ready job may be at most this many seconds old.
        #[arg(long)]
        max_age: Option<f64>,
        /// Each queue may hold at most this many dead jobs.
        #[arg(long)]
        max_dead: Option<u64>,
        /// At least this many redlease connections (`client_name` starting with
        /// `redlease`) must be open: 1 means "some worker is alive".
        #[arg(long)]
        min_connections: Option<u64>,
        /// Only these queues (default: all).
        #[arg(long = "queue")]
        queues: Vec<String>,
    },
    /// The web dashboard.
    Serve(web::ServeArgs),
}

#[derive(Args, Debug)]
struct PauseArgs {
    /// The queue.
    queue: String,
    /// Only this group of the queue's grouped jobs.
    #[arg(long)]
    group: Option<String>,
    /// Do it (without it, only says what would be done).
    #[arg(long)]
    yes: bool,
}

#[derive(Args, Debug)]
struct DeadArgs {
    /// The queue.
    queue: String,
    /// Only these ids (of plain jobs, or with --group of that group's jobs).
    #[arg(long = "id")]
    ids: Vec<String>,
    /// Only the dead jobs of this group (jobs pushed with a group).
    #[arg(long)]
    group: Option<String>,
    /// Only jobs whose reason contains this text.
    #[arg(long)]
    reason_contains: Option<String>,
    /// Only jobs that died of this: failed, expired, timed_out or cancelled.
    #[arg(long, value_parser = parse_cause)]
    cause: Option<DeathCause>,
    /// Only jobs that died at least this long ago (by this machine's clock), as a number
    /// and a unit: 90s, 30m, 12h, 7d.
    #[arg(long, value_parser = parse_age)]
    older_than: Option<Duration>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Without another filter, act on every dead job (up to --limit).
    #[arg(long)]
    all: bool,
    /// With --id: look at this many of the oldest dead jobs (without ids, the whole list is
    /// paged through on the server).
    #[arg(long, default_value_t = 10_000)]
    scan: usize,
}

fn parse_cause(s: &str) -> Result<DeathCause, String> {
    DeathCause::parse(s).ok_or_else(|| {
        format!("not a cause of death: {s:?} (failed, expired, timed_out or cancelled)")
    })
}

/// `<n><unit>`, unit one of ms, s, m, h, d.
fn parse_age(s: &str) -> Result<Duration, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = s.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("not an age: {s:?} (a number and a unit: 90s, 30m, 12h, 7d)"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("not an age: {s:?} (units: ms, s, m, h, d)")),
    };
    n.checked_mul(ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("too long an age: {s:?}"))
}

/// An error and its exit code.
struct Failure(u8, String);

impl From<String> for Failure {
    fn from(e: String) -> Self {
        Failure(2, e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(Failure(code, message)) => {
            eprintln!("redlease: {message}");
            ExitCode::from(code)
        }
    }
}

fn run(cli: Cli) -> Result<u8, Failure> {
    if !(cli.timeout > 0.0 && cli.timeout < 3600.0) {
        return Err(Failure(
            2,
            "--timeout must be between 0 and 3600 seconds".into(),
        ));
    }
    let timeout = Duration::from_secs_f64(cli.timeout);
    if let Command::Serve(args) = cli.command {
        return web::serve(&cli.url, &cli.prefix, timeout, args)
            .map(|()| 0)
            .map_err(Failure::from);
    }
    let mut source = Source::open(&cli.url, &cli.prefix, timeout)?;
    let json = cli.json;
    match cli.command {
        Command::Status(w) => watch(w, json, &mut source, render::status),
        Command::Queues(w) => watch(w, json, &mut source, render::queues),
        Command::Locks(w) => watch(w, json, &mut source, render::locks),
        Command::Semaphores(w) => watch(w, json, &mut source, render::semaphores),
        Command::Jobs {
            queue,
            state,
            limit,
            cursor,
            grouped,
        } => {
            let state: redlease::inspect::JobStatus = state
                .parse()
                .map_err(|e: redlease::Error| Failure(2, e.to_string()))?;
            let cursor = cursor.map(redlease::inspect::JobCursor::from);
            let page = source.jobs(&queue, state, cursor.as_ref(), limit, grouped)?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "jobs": page.jobs.iter().map(data::job_json).collect::<Vec<_>>(),
                        "next": page.next.as_ref().map(|c| c.as_str()),
                    })
                );
            } else {
                println!("{}", render::jobs(&page));
            }
            Ok(0)
        }
        Command::Dead { queue, limit } => dead(&mut source, &queue, limit, json),
        Command::Job { queue, id } => match source.job(&queue, &id)? {
            Some(job) => {
                let v = data::job_json(&job);
                println!(
                    "{}",
                    if json {
                        v.to_string()
                    } else {
                        render::pretty(&v)
                    }
                );
                Ok(0)
            }
            None => Err(Failure(1, format!("no job {id:?} in queue {queue}"))),
        },
        Command::Requeue(a) => act(&mut source, a, DeadAction::Requeue, json),
        Command::Delete(a) => act(&mut source, a, DeadAction::Delete, json),
        Command::Release {
            lock,
            token_prefix,
            yes,
        } => {
            let shown = token_prefix.trim_end_matches('…');
            if shown.chars().count() < data::TOKEN_SHOWN {
                return Err(Failure(
                    2,
                    format!(
                        "--token-prefix needs the {} characters `locks` shows",
                        data::TOKEN_SHOWN
                    ),
                ));
            }
            match source.release_plan(&lock, shown)? {
                data::ReleasePlan::NotHeld => {
                    println!("{lock} is not held: nothing to release");
                    Ok(1)
                }
                data::ReleasePlan::OtherHolder(h) => {
                    println!("{lock} is held by {h}, not by {shown}…: nothing released");
                    Ok(1)
                }
                data::ReleasePlan::Matches(ttl) if !yes => {
                    let left =
                        ttl.map_or("n/a".to_owned(), |t| format!("{:.1}s", t as f64 / 1000.0));
                    println!(
                        "{lock} is held by {shown}… ({left} left): run again with --yes to release it"
                    );
                    Ok(0)
                }
                data::ReleasePlan::Matches(_) => {
                    if source.force_release(&lock, shown)? {
                        println!("{lock}: released the hold of {shown}…");
                        Ok(0)
                    } else {
                        println!("{lock} is no longer held by {shown}…: nothing released");
                        Ok(1)
                    }
                }
            }
        }
        Command::Pause(a) => pause(&mut source, a, true),
        Command::Resume(a) => pause(&mut source, a, false),
        Command::Cancel {
            queue,
            id,
            group,
            message,
            yes,
        } => {
            let what = match &group {
                Some(g) => format!("job {id} of group {g} of queue {queue}"),
                None => format!("job {id} of queue {queue}"),
            };
            if !yes {
                println!("would cancel {what}: run again with --yes to cancel it");
                return Ok(0);
            }
            match source.cancel(&queue, group.as_deref(), &id, &message)? {
                redlease::queue::Cancelled::NotFound => {
                    println!("no {what} waits or runs: nothing cancelled");
                    Ok(1)
                }
                redlease::queue::Cancelled::InFlight => {
                    println!("cancelled {what} (it was in flight: its holder is told)");
                    Ok(0)
                }
                _ => {
                    println!("cancelled {what} (it was waiting: it will not run)");
                    Ok(0)
                }
            }
        }
        Command::Check {
            max_age,
            max_dead,
            min_connections,
            queues,
        } => {
            let snapshot = source.snapshot()?;
            let verdict = render::check(&snapshot, max_age, max_dead, min_connections, &queues);
            if json {
                println!("{}", verdict.to_json());
            } else {
                for line in &verdict.lines {
                    println!("{line}");
                }
            }
            Ok(verdict.code)
        }
        Command::Serve(_) => Ok(0),
    }
}

fn watch(
    w: Watch,
    json: bool,
    source: &mut Source,
    view: fn(&data::Snapshot) -> String,
) -> Result<u8, Failure> {
    if !(w.interval >= 0.1 && w.interval < 86_400.0) {
        return Err(Failure(
            2,
            "--interval must be between 0.1 and 86400 seconds".into(),
        ));
    }
    loop {
        let snapshot = source.snapshot()?;
        let out = if json {
            snapshot.to_json().to_string()
        } else {
            view(&snapshot)
        };
        let mut stdout = std::io::stdout().lock();
        if w.watch && !json {
            // Home and clear: the view is redrawn in place.
            let _ = write!(stdout, "\x1b[H\x1b[2J");
        }
        let _ = writeln!(stdout, "{out}");
        let _ = stdout.flush();
        if !w.watch {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_secs_f64(w.interval));
    }
}

fn pause(source: &mut Source, a: PauseArgs, pause: bool) -> Result<u8, Failure> {
    let what = match &a.group {
        Some(g) => format!("group {g} of queue {}", a.queue),
        None => format!("queue {}", a.queue),
    };
    let verb = if pause { "pause" } else { "resume" };
    let was = source.is_paused(&a.queue, a.group.as_deref())?;
    if was == pause {
        println!(
            "{what} is {} already: nothing to do",
            if pause { "paused" } else { "not paused" }
        );
        return Ok(0);
    }
    if !a.yes {
        println!("would {verb} {what}: run again with --yes to {verb} it");
        return Ok(0);
    }
    source.set_paused(&a.queue, a.group.as_deref(), pause)?;
    println!("{what}: {}", if pause { "paused" } else { "resumed" });
    Ok(0)
}

fn dead(source: &mut Source, queue: &str, limit: usize, json: bool) -> Result<u8, Failure> {
    let jobs = source.dead(queue, limit)?;
    if json {
        let v: Vec<_> = jobs.iter().map(data::dead_json).collect();
        println!("{}", serde_json::Value::from(v));
    } else {
        println!("{}", render::dead(&jobs));
    }
    Ok(0)
}

fn act(source: &mut Source, a: DeadArgs, action: DeadAction, json: bool) -> Result<u8, Failure> {
    if a.ids.is_empty()
        && a.group.is_none()
        && a.reason_contains.is_none()
        && a.cause.is_none()
        && a.older_than.is_none()
        && !a.all
    {
        return Err(Failure(
            2,
            "say which dead jobs: --id ID (repeatable), --group GROUP, --reason-contains TEXT, --cause CAUSE, --older-than AGE, or --all".into(),
        ));
    }
    let died_before = match a.older_than {
        None => None,
        Some(age) => Some(
            SystemTime::now()
                .checked_sub(age)
                .ok_or_else(|| Failure(2, "--older-than reaches before 1970".into()))?,
        ),
    };
    let filter = DeadFilter {
        ids: a.ids,
        group: a.group,
        reason_contains: a.reason_contains,
        cause: a.cause,
        died_before,
        limit: a.limit,
        scan: a.scan,
    };
    let done = source.act_on_dead(&a.queue, &filter, action)?;
    let verb = match action {
        DeadAction::Requeue => "requeued",
        DeadAction::Delete => "deleted",
    };
    if json {
        println!("{}", serde_json::json!({ verb: done }));
    } else {
        println!(
            "{verb} {} job(s){}{}",
            done.len(),
            if done.is_empty() { "" } else { ": " },
            done.join(" ")
        );
    }
    Ok(0)
}
