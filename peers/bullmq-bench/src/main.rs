//! redlease's queue against BullMQ's Rust port (`bullmq-official` 1.4.4, tokio) on one
//! redis-server, side by side: 20,000 jobs of 16 bytes pushed first, then processed by one
//! busy worker, and by 4 (redlease: `Queue::work(4, ..)`; bullmq: one `Worker` with
//! concurrency 4). Handlers only record the job id; every job must be processed exactly
//! once (checked). Rounds interleave the peers so that the machine's drift hits both alike.
//! Completed jobs are not kept by either (bullmq: `remove_on_complete`), as redlease does.
//!
//! ```text
//! cargo run --release                      # starts redis-server on a free port
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --release
//! ROUNDS=5 JOBS=50000 cargo run --release
//! ```
//!
//! Prints one line per run and a summary: `peer <config> redlease_jobs_per_s=<n>
//! bullmq_jobs_per_s=<n> ratio=<redlease/bullmq>` (medians over the rounds).

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bullmq::types::RemoveOnFinish;
use bullmq::{BulkJob, Queue, QueueOptions, Worker, WorkerOptions};

type Seen = Arc<Mutex<HashMap<String, u32>>>;

/// A throwaway redis-server (killed on drop).
struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start redis-server");
    let url = format!("redis://127.0.0.1:{port}/");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Server(child, url)
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn payload(i: usize) -> String {
    format!("job-{i:012}")
}

fn check_once(seen: &Seen, jobs: usize, who: &str) {
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), jobs, "{who}: {} distinct jobs of {jobs}", seen.len());
    let twice = seen.values().filter(|n| **n != 1).count();
    assert_eq!(twice, 0, "{who}: {twice} jobs processed more than once");
}

/// Jobs per second of `workers` redlease workers over `jobs` jobs pushed beforehand.
fn redlease_round(url: &str, name: &str, jobs: usize, workers: usize) -> f64 {
    let client = redlease::Client::open(url).expect("redlease client");
    let queue = client.queue(name).expect("redlease queue");
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        queue
            .push_many(chunk.iter().map(|i| payload(*i)))
            .expect("redlease push");
    }
    let seen: Seen = Arc::default();
    let started = Instant::now();
    let pool = queue.work(workers, {
        let seen = seen.clone();
        move |job: &redlease::Job| -> Result<(), String> {
            let id = String::from_utf8_lossy(job.payload()).into_owned();
            *seen.lock().unwrap().entry(id).or_default() += 1;
            Ok(())
        }
    }).unwrap();
    while pool.report().acked < jobs as u64 {
        assert!(started.elapsed() < Duration::from_secs(300), "redlease: too slow");
        std::thread::sleep(Duration::from_micros(200));
    }
    let elapsed = started.elapsed();
    let report = pool.stop();
    assert_eq!(report.acked, jobs as u64, "redlease: {report:?}");
    check_once(&seen, jobs, "redlease");
    jobs as f64 / elapsed.as_secs_f64()
}

/// Jobs per second of one bullmq worker with `concurrency` over `jobs` jobs pushed
/// beforehand.
async fn bullmq_round(url: &str, name: &str, jobs: usize, concurrency: usize) -> f64 {
    let mut qopts = QueueOptions::default();
    qopts.connection.url = url.to_owned();
    let queue = Queue::with_options(name, qopts).await.expect("bullmq queue");
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1000) {
        let batch = chunk
            .iter()
            .map(|i| BulkJob::new("job", payload(*i)))
            .collect();
        queue.add_bulk(batch).await.expect("bullmq add_bulk");
    }
    let seen: Seen = Arc::default();
    let mut wopts = WorkerOptions::default();
    wopts.connection.url = url.to_owned();
    wopts.concurrency = concurrency;
    wopts.remove_on_complete = Some(RemoveOnFinish::Bool(true));
    let started = Instant::now();
    let worker = Worker::with_options(
        name,
        {
            let seen = seen.clone();
            move |job: bullmq::Job, _| {
                let seen = seen.clone();
                async move {
                    let id = job.data().as_str().unwrap_or_default().to_owned();
                    *seen.lock().unwrap().entry(id).or_default() += 1;
                    Ok(serde_json::Value::Null)
                }
            }
        },
        wopts,
    )
    .await
    .expect("bullmq worker");
    loop {
        let done = seen.lock().unwrap().values().map(|n| *n as usize).sum::<usize>();
        if done >= jobs {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "bullmq: too slow");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let elapsed = started.elapsed();
    worker.close(5_000).await.expect("bullmq close");
    queue.close().await;
    check_once(&seen, jobs, "bullmq");
    jobs as f64 / elapsed.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let jobs = env_or("JOBS", 20_000);
    let rounds = env_or("ROUNDS", 3);
    let server = match std::env::var("REDIS_URL") {
        Ok(url) => Server(Command::new("true").spawn().expect("true"), url),
        Err(_) => start_server(),
    };
    let url = server.1.clone();
    println!("peers: {jobs} jobs of 16 bytes, {rounds} interleaved rounds, redis at {url}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut results: HashMap<(usize, &str), Vec<f64>> = HashMap::new();
    for round in 0..rounds {
        for workers in [1, 4] {
            // Alternate who goes first.
            let order: [&str; 2] = if round % 2 == 0 {
                ["redlease", "bullmq"]
            } else {
                ["bullmq", "redlease"]
            };
            for peer in order {
                let name = format!("peer-{peer}-{workers}-{round}-{}", std::process::id());
                let rate = match peer {
                    "redlease" => redlease_round(&url, &name, jobs, workers),
                    _ => runtime.block_on(bullmq_round(&url, &name, jobs, workers)),
                };
                println!("round {round} workers={workers} {peer} jobs_per_s={rate:.0}");
                results.entry((workers, peer)).or_default().push(rate);
            }
        }
    }
    for workers in [1, 4] {
        let r = median(results[&(workers, "redlease")].clone());
        let b = median(results[&(workers, "bullmq")].clone());
        println!(
            "peer workers_{workers} redlease_jobs_per_s={r:.0} bullmq_jobs_per_s={b:.0} ratio={:.3}",
            r / b
        );
    }
}
