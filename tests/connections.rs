//! Connections as deployments have them: TLS (with a private CA and client certificates),
//! Unix sockets, connection settings (`ConnectionInfo`, pool sizes and lifetimes, client
//! names). Every server here is a real redis-server.
//!
//! TLS needs a redis-server built with TLS (Debian's is): `REDIS_TLS_SERVER` names it, else
//! the usual `REDIS_SERVER` / `PATH` one is used. Certificates are made by the `openssl` CLI.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use redlease::{Client, Error, InvalidArgument, lock::RedLock};
use redlease_suite::testkit::{await_condition, connection, server};
use redlease_suite::{RedisServer, RedisServerBuilder};

/// `CLIENT LIST` of `server`, one map per connection.
fn client_list(server: &RedisServer) -> Vec<std::collections::HashMap<String, String>> {
    let mut conn = connection(server);
    let text: String = redis::cmd("CLIENT").arg("LIST").query(&mut conn).unwrap();
    text.lines()
        .map(|line| {
            line.split(' ')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// Holds lock `name` with `holder`, makes `waiter` wait for it (which starts its pub/sub
/// listener), runs `check` while the waiter waits, then releases and expects the waiter to
/// get the lock.
fn contend(holder: &Client, waiter: &Client, name: &str, check: impl FnOnce()) {
    let guard = holder
        .lock(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        let name = name.to_owned();
        thread::spawn(move || {
            waiter
                .lock(&name)
                .wait(Duration::from_secs(20))
                .acquire()
                .map(|g| g.release())
        })
    };
    check();
    guard.release().unwrap();
    waiting.join().unwrap().unwrap().unwrap();
}

// ---------------------------------------------------------------- TLS

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Certificates made by `openssl` in a temporary directory (removed on drop): a CA, a server
/// certificate it signed (for `127.0.0.1` and `localhost`), a client certificate it signed,
/// and an unrelated CA.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn make() -> Certs {
        let dir = std::env::temp_dir().join(format!(
            "redlease-tls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let certs = Certs { dir };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        for ca in ["ca", "other-ca"] {
            certs.openssl(&[
                &["req", "-x509", "-nodes", "-days", "2", "-subj"][..],
                &[&format!("/CN=redlease test {ca}")],
                &ec,
                &[
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            ]);
        }
        std::fs::write(
            certs.dir.join("server.ext"),
            // clientAuth too: Sentinels and cluster nodes present it to each other.
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        std::fs::write(
            certs.dir.join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for leaf in ["server", "client"] {
            certs.openssl(&[
                &[
                    "req",
                    "-nodes",
                    "-subj",
                    &format!("/CN=redlease test {leaf}"),
                ],
                &ec,
                &[
                    "-keyout",
                    &format!("{leaf}.key"),
                    "-out",
                    &format!("{leaf}.csr"),
                ],
            ]);
            certs.openssl(&[&[
                "x509",
                "-req",
                "-days",
                "2",
                "-in",
                &format!("{leaf}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-extfile",
                &format!("{leaf}.ext"),
                "-out",
                &format!("{leaf}.crt"),
            ]]);
        }
        certs
    }

    fn openssl(&self, parts: &[&[&str]]) {
        let args: Vec<&str> = parts.concat();
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run openssl (needed to make test certificates): {e}")
            });
        assert!(
            out.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    fn pem(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.path(file)).unwrap()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A redis-server with a TLS port (clients must present a certificate of `certs`' CA) next
/// to the plain one the harness uses.
fn tls_server(certs: &Certs) -> (RedisServer, u16) {
    tls_server_with(certs, |b, _| b)
}

/// [`tls_server`], with more configuration (`extra` gets the TLS port).
fn tls_server_with(
    certs: &Certs,
    extra: impl Fn(RedisServerBuilder, u16) -> RedisServerBuilder,
) -> (RedisServer, u16) {
    let path = |f: &str| certs.path(f).to_string_lossy().into_owned();
    let binary = std::env::var_os("REDIS_TLS_SERVER").filter(|v| !v.is_empty());
    for _ in 0..5 {
        let port = free_port();
        let mut builder = RedisServer::builder()
            .config_args(&["tls-port", &port.to_string()])
            .config_args(&["tls-cert-file", &path("server.crt")])
            .config_args(&["tls-key-file", &path("server.key")])
            .config_args(&["tls-ca-cert-file", &path("ca.crt")])
            .config_args(&["tls-auth-clients", "yes"]);
        builder = extra(builder, port);
        if let Some(b) = &binary {
            builder = builder.binary(PathBuf::from(b));
        }
        match builder.start() {
            Ok(server) => return (server, port),
            Err(e) if e.to_string().contains("Address already in use") => continue,
            Err(e) => panic!(
                "cannot start a TLS redis-server (set REDIS_TLS_SERVER to a redis-server \
                 built with TLS, e.g. Debian's /usr/bin/redis-server): {e}"
            ),
        }
    }
    panic!("no free port for the TLS redis-server");
}

fn tls_client(certs: &Certs, port: u16) -> Client {
    Client::builder(format!("rediss://127.0.0.1:{port}/"))
        .tls_root_ca(certs.pem("ca.crt"))
        .tls_client_cert(certs.pem("client.crt"), certs.pem("client.key"))
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

#[test]
fn tls_pool_listener_and_redlock() {
    let certs = Certs::make();
    let (server, tls_port) = tls_server(&certs);
    let a = tls_client(&certs, tls_port);
    let b = tls_client(&certs, tls_port);
    let guard = a.lock("tls").acquire().unwrap();
    assert!(guard.fence() >= 1);
    guard.release().unwrap();

    // The waiter's listener subscribes over TLS: its connection sits on the TLS port.
    contend(&a, &b, "tls-contended", || {
        await_condition(Duration::from_secs(10), || {
            has_tls_listener(&server, tls_port)
        });
    });

    let red = RedLock::builder(&[format!("rediss://127.0.0.1:{tls_port}/")])
        .tls_root_ca(certs.pem("ca.crt"))
        .tls_client_cert(certs.pem("client.crt"), certs.pem("client.key"))
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let g = red.lock("tls-redlock").acquire().unwrap();
    assert_eq!(g.granted(), 1);
    g.release().unwrap();
    assert!(
        RedLock::builder(&[server.url()])
            .client_name("bad name")
            .build()
            .is_err()
    );
}

/// Whether `server` has a connection named `redlease` on its TLS port subscribed to a
/// channel (plain or shard): a pub/sub listener that came over TLS.
fn has_tls_listener(server: &RedisServer, tls_port: u16) -> bool {
    client_list(server).iter().any(|c| {
        let subscribed = |k: &str| c.get(k).is_some_and(|s| s != "0");
        c.get("laddr")
            .is_some_and(|l| l.ends_with(&format!(":{tls_port}")))
            && c.get("name").is_some_and(|n| n == "redlease")
            && (subscribed("sub") || subscribed("ssub"))
    })
}

#[test]
fn tls_through_sentinel() {
    let certs = Certs::make();
    let (master, master_tls) = tls_server(&certs);
    let path = |f: &str| certs.path(f).to_string_lossy().into_owned();
    // A Sentinel that clients reach over TLS and that reaches the master over TLS (so it
    // names the master's TLS port).
    let (sentinel, sentinel_tls) = tls_server_with(&certs, |b, _| {
        b.sentinel()
            .config_args(&["tls-replication", "yes"])
            .config_args(&["tls-cert-file", &path("server.crt")])
    });
    let _: () = redis::cmd("SENTINEL")
        .arg("MONITOR")
        .arg("svc")
        .arg("127.0.0.1")
        .arg(master_tls)
        .arg(1)
        .query(&mut connection(&sentinel))
        .unwrap();
    let client = Client::sentinel(&[format!("rediss://127.0.0.1:{sentinel_tls}/")], "svc")
        .tls_root_ca(certs.pem("ca.crt"))
        .tls_client_cert(certs.pem("client.crt"), certs.pem("client.key"))
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let waiter = client.clone();
    contend(&client, &waiter, "sentinel-tls", || {
        await_condition(Duration::from_secs(10), || {
            has_tls_listener(&master, master_tls)
        });
    });
    // The pooled connections reached the master on its TLS port too.
    assert!(client_list(&master).iter().any(|c| {
        c.get("laddr")
            .is_some_and(|l| l.ends_with(&format!(":{master_tls}")))
            && c.get("sub").is_some_and(|s| s == "0")
            && c.get("name").is_some_and(|n| n == "redlease")
    }));
}

#[test]
fn tls_on_a_cluster() {
    let certs = Certs::make();
    let path = |f: &str| certs.path(f).to_string_lossy().into_owned();
    // Three masters speaking TLS to clients and to each other (tls-cluster: the cluster
    // announces its TLS ports).
    let nodes: Vec<(RedisServer, u16)> = (0..3)
        .map(|_| {
            tls_server_with(&certs, |b, _| {
                b.config("cluster-enabled", "yes")
                    .config("cluster-config-file", "nodes.conf")
                    .config("cluster-node-timeout", "5000")
                    .config_args(&["cluster-port", &free_port().to_string()])
                    .config_args(&["tls-cluster", "yes"])
                    .config_args(&["tls-replication", "yes"])
            })
        })
        .collect();
    let cli = std::env::var_os("REDIS_TLS_SERVER")
        .map(|s| PathBuf::from(s).with_file_name("redis-cli"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("redis-cli"));
    let out = Command::new(cli)
        .args(["--tls", "--cacert", &path("ca.crt")])
        .args(["--cert", &path("client.crt"), "--key", &path("client.key")])
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|(_, p)| format!("127.0.0.1:{p}")))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "redis-cli --cluster create: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    await_condition(Duration::from_secs(20), || {
        nodes.iter().all(|(n, _)| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut connection(n))
                .is_ok_and(|i| i.contains("cluster_state:ok"))
        })
    });
    let seeds: Vec<String> = nodes
        .iter()
        .map(|(_, p)| format!("rediss://127.0.0.1:{p}/"))
        .collect();
    let client = Client::cluster(&seeds)
        .tls_root_ca(certs.pem("ca.crt"))
        .tls_client_cert(certs.pem("client.crt"), certs.pem("client.key"))
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    for name in ["a", "b", "c", "d"] {
        client.lock(name).acquire().unwrap().release().unwrap();
    }
    let waiter = client.clone();
    contend(&client, &waiter, "cluster-tls", || {
        await_condition(Duration::from_secs(10), || {
            nodes.iter().any(|(n, p)| has_tls_listener(n, *p))
        });
    });
}

#[test]
fn tls_with_the_wrong_ca_fails_clearly() {
    let certs = Certs::make();
    let (_server, tls_port) = tls_server(&certs);
    let client = Client::builder(format!("rediss://127.0.0.1:{tls_port}/"))
        .tls_root_ca(certs.pem("other-ca.crt"))
        .tls_client_cert(certs.pem("client.crt"), certs.pem("client.key"))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = client
        .lock("wrong-ca")
        .wait(Duration::from_millis(500))
        .acquire()
        .unwrap_err();
    let text = err.to_string();
    println!("with the wrong CA: {text}");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(
        text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
        "the error should say the server's certificate was not trusted: {text}"
    );

    // Without a client certificate the server (tls-auth-clients yes) refuses the client.
    let anonymous = Client::builder(format!("rediss://127.0.0.1:{tls_port}/"))
        .tls_root_ca(certs.pem("ca.crt"))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(
        anonymous
            .lock("anonymous")
            .wait(Duration::from_millis(500))
            .acquire()
            .is_err()
    );

    // A PEM that is no certificate fails at build time, naming the setting.
    let bad = Client::builder(format!("rediss://127.0.0.1:{tls_port}/"))
        .tls_root_ca(b"not a certificate".to_vec())
        .build()
        .unwrap_err();
    assert!(bad.to_string().contains("CA"), "{bad}");
    // Certificates for a plain URL are a mistake worth reporting.
    let plain = Client::builder("redis://127.0.0.1:1/")
        .tls_root_ca(certs.pem("ca.crt"))
        .build()
        .unwrap_err();
    assert!(plain.to_string().contains("rediss://"), "{plain}");
}

// ---------------------------------------------------------------- Unix sockets

fn unix_server() -> (RedisServer, PathBuf) {
    // Socket paths are limited to ~100 bytes: keep it short, in the temp dir.
    let path = std::env::temp_dir().join(format!(
        "rl-{}-{}.sock",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let server = RedisServer::builder()
        .config_args(&["unixsocket", &path.to_string_lossy()])
        .config_args(&["unixsocketperm", "700"])
        .start()
        .unwrap();
    (server, path)
}

fn is_unix_listener(c: &std::collections::HashMap<String, String>) -> bool {
    c.get("flags").is_some_and(|f| f.contains('U'))
        && c.get("sub").is_some_and(|s| s != "0")
        && c.get("name").is_some_and(|n| n == "redlease")
}

#[test]
fn unix_sockets_for_the_pool_and_the_listener() {
    let (server, path) = unix_server();
    for scheme in ["unix", "redis+unix"] {
        let url = format!("{scheme}://{}", path.display());
        let a = Client::open(url.as_str()).unwrap();
        let b = Client::open(&url).unwrap();
        let name = format!("unix-{scheme}");
        contend(&a, &b, &name, || {
            await_condition(Duration::from_secs(10), || {
                client_list(&server).iter().any(is_unix_listener)
            });
        });
        drop((a, b));
        // The listener's connection closes with its client.
        await_condition(Duration::from_secs(10), || {
            !client_list(&server).iter().any(is_unix_listener)
        });
    }
    let _ = std::fs::remove_file(&path);
}

// ---------------------------------------------------------------- RESP3

/// A URL asking for RESP3 (`?protocol=resp3`) keeps working as it did: the pool's
/// connections speak RESP3 (the `redis` crate's connections; the plain ones are the
/// library's own RESP2 connections), locks are taken, waited for and released.
#[test]
fn a_resp3_url_keeps_working() {
    let server = server();
    let url = format!("redis://127.0.0.1:{}/?protocol=resp3", server.port());
    let a = Client::builder(url.as_str())
        .client_name("resp3-pool")
        .build()
        .unwrap();
    let b = Client::open(url.as_str()).unwrap();
    contend(&a, &b, "resp3", || {});
    a.semaphore("resp3-permits", 2)
        .acquire()
        .unwrap()
        .release()
        .unwrap();
    let pool: Vec<_> = client_list(&server)
        .into_iter()
        .filter(|c| c.get("name").is_some_and(|n| n == "resp3-pool"))
        .collect();
    assert!(!pool.is_empty());
    // Redis 7.0+ and Valkey say each connection's protocol in CLIENT LIST; 6.2 does not,
    // there the locks above taken over the RESP3 URL are what this test shows.
    if pool.iter().any(|c| c.get("resp").is_some()) {
        assert!(
            pool.iter().all(|c| c.get("resp").is_some_and(|r| r == "3")),
            "{pool:?}"
        );
    }
}

// ---------------------------------------------------------------- settings

#[test]
fn connection_info_pool_settings_and_client_name() {
    let server = server();
    // A redis::ConnectionInfo, and (host, port), are accepted like URLs.
    let info = redis::IntoConnectionInfo::into_connection_info(server.url().as_str()).unwrap();
    let client = Client::builder(info)
        .client_name("billing-locks")
        .pool_size(4)
        .min_idle(2)
        .max_lifetime(Some(Duration::from_secs(60)))
        .idle_timeout(None)
        .build()
        .unwrap();
    // min_idle opens two named connections in the background, without any use.
    await_condition(Duration::from_secs(10), || {
        client_list(&server)
            .iter()
            .filter(|c| c.get("name").is_some_and(|n| n == "billing-locks"))
            .count()
            >= 2
    });
    client.lock("named").acquire().unwrap().release().unwrap();
    // A server that records the library (Redis 7.2+, Valkey) shows ours on the pool's
    // connections (`CLIENT SETINFO`, sent with the name).
    let named: Vec<_> = client_list(&server)
        .into_iter()
        .filter(|c| c.get("name").is_some_and(|n| n == "billing-locks"))
        .collect();
    if named.iter().any(|c| c.contains_key("lib-name")) {
        assert!(
            named
                .iter()
                .any(|c| c.get("lib-name").is_some_and(|n| n == "redlease")
                    && c.get("lib-ver").is_some_and(|v| !v.is_empty())),
            "{named:?}"
        );
    }

    let by_pair = Client::open(("127.0.0.1", server.port())).unwrap();
    by_pair.lock("pair").acquire().unwrap().release().unwrap();
    assert!(
        client_list(&server)
            .iter()
            .any(|c| c.get("name").is_some_and(|n| n == "redlease")),
        "the default client name is redlease"
    );

    let setting = |b: redlease::ClientBuilder| match b.build() {
        Err(Error::InvalidArgument(InvalidArgument::Setting(s))) => s,
        other => panic!("expected a setting error, got {other:?}"),
    };
    let url = server.url();
    assert!(setting(Client::builder(&url).pool_size(2).min_idle(3)).contains("min idle"));
    assert!(setting(Client::builder(&url).client_name("two words")).contains("client name"));
    assert!(
        setting(Client::builder(&url).max_lifetime(Some(Duration::ZERO))).contains("max lifetime")
    );
    assert!(
        setting(Client::builder(&url).idle_timeout(Some(Duration::from_millis(5))))
            .contains("idle timeout")
    );
    // A URL that does not parse: the error names it without its password.
    let bad = setting(Client::builder("redis://:hunter2@127.0.0.1:notaport/"));
    assert!(bad.contains("bad Redis URL"), "{bad}");
    assert!(!bad.contains("hunter2"), "{bad}");
}
