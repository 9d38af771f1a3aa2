//! What every example shares: where its Redis comes from, and how it reports a failure.
//!
//! An example runs against `REDIS_URL` when it is set; otherwise it starts a throwaway
//! redis-server (through `redlease_suite::RedisServer`) on a free loopback port and stops it
//! on exit. With no redis-server on the machine, it runs on redlease's in-process server
//! (`MemoryServer::listen`, feature `memory`), whose clock a thread moves along with real
//! time, and says so (`REDIS_URL=memory` asks for it). A failure is printed in words (`Display`, not `Debug`), with a hint on how to
//! get a server when none could be found or reached.

use std::error::Error;
use std::process::ExitCode;

use redlease_suite::{HarnessError, RedisServer};

/// Any error an example may meet.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// The Redis an example talks to; a server it started lives (and runs) as long as this.
pub struct Redis {
    /// The URL to connect to.
    pub url: String,
    /// The server this example started (`None`: `REDIS_URL` was used).
    _server: Option<RedisServer>,
    /// The in-process server when no redis-server could be found.
    _memory: Option<InProcess>,
}

/// redlease's in-process server on a loopback port, its clock moved with real time by a
/// thread that stops when this is dropped.
struct InProcess {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pump: Option<std::thread::JoinHandle<()>>,
}

impl InProcess {
    fn start() -> Result<(InProcess, String), BoxError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let server = redlease::memory::MemoryServer::new();
        let url = server.listen()?;
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let pump = std::thread::spawn(move || {
            let clock = server.clock();
            let started = std::time::Instant::now();
            while !flag.load(Ordering::SeqCst) {
                // Keys expire in real time, as on a real server.
                let behind = started.elapsed().saturating_sub(clock.elapsed());
                clock.advance(behind);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        Ok((
            InProcess {
                stop,
                pump: Some(pump),
            },
            url,
        ))
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(pump) = self.pump.take() {
            let _ = pump.join();
        }
    }
}

/// `REDIS_URL` if set, else a throwaway redis-server of our own.
pub fn redis(example: &str) -> Result<Redis, BoxError> {
    let asked = std::env::var("REDIS_URL").ok();
    if asked.as_deref() == Some("memory") {
        let (memory, url) = InProcess::start()?;
        println!(
            "{example}: REDIS_URL=memory: running on redlease's in-process server (MemoryServer) at {url}"
        );
        return Ok(Redis {
            url,
            _server: None,
            _memory: Some(memory),
        });
    }
    if let Some(url) = asked {
        println!("{example}: using REDIS_URL={}", redacted(&url));
        return Ok(Redis {
            url,
            _server: None,
            _memory: None,
        });
    }
    let server = match RedisServer::start() {
        Ok(server) => server,
        Err(HarnessError::NotFound) => {
            let (memory, url) = InProcess::start()?;
            println!(
                "{example}: REDIS_URL not set and no redis-server found: running on redlease's \
                 in-process server (MemoryServer) at {url} (install redis-server or set \
                 REDIS_URL for a real one)"
            );
            return Ok(Redis {
                url,
                _server: None,
                _memory: Some(memory),
            });
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "{example}: REDIS_URL not set: started redis-server on port {} (stopped on exit)",
        server.port()
    );
    Ok(Redis {
        url: server.url(),
        _server: Some(server),
        _memory: None,
    })
}

/// Ends `main`: exit 0 on success; otherwise prints the error in words, with a hint when it
/// is about getting a server, and exits 1.
pub fn finish(example: &str, result: Result<(), BoxError>) -> ExitCode {
    let Err(e) = result else {
        return ExitCode::SUCCESS;
    };
    eprintln!("{example}: error: {e}");
    let mut shown = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !shown.contains(&text) {
            eprintln!("  caused by: {text}");
            shown = text;
        }
        source = s.source();
    }
    if let Some(hint) = hint(e.as_ref()) {
        eprintln!("{example}: {hint}");
    }
    ExitCode::FAILURE
}

/// How to fix an error that is about reaching Redis.
fn hint(e: &(dyn Error + 'static)) -> Option<String> {
    let using_url = std::env::var("REDIS_URL").ok();
    if let Some(h) = e.downcast_ref::<HarnessError>() {
        return Some(match h {
            HarnessError::NotFound | HarnessError::InvalidBinary { .. } => {
                "no redis-server to start: install it (apt-get install redis-server, or \
                 brew install redis), or point REDIS_SERVER at its binary, or set \
                 REDIS_URL=redis://host:port/ to use a running server"
                    .to_owned()
            }
            _ => "the throwaway redis-server did not start (see above); set \
                  REDIS_URL=redis://host:port/ to use a running server instead"
                .to_owned(),
        });
    }
    let unreachable = match e.downcast_ref::<redlease::Error>() {
        Some(redlease::Error::Unavailable { .. }) => true,
        Some(redlease::Error::Configuration { .. }) => {
            return using_url.map(|_| "fix the URL in REDIS_URL (see the error above)".to_owned());
        }
        Some(_) => false,
        None => e
            .downcast_ref::<redis::RedisError>()
            .is_some_and(|r| r.is_io_error() || r.is_connection_refusal()),
    };
    match (unreachable, using_url) {
        (true, Some(url)) => Some(format!(
            "is a Redis server running at REDIS_URL={}? Unset REDIS_URL to let the \
             example start its own redis-server",
            redacted(&url)
        )),
        _ => None,
    }
}

/// `url` with its password (if any) replaced by `***`, for printing.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}
