//! How connections are made, for the pool, the pub/sub listener, Sentinel, Cluster and
//! RedLock alike: what a client may be opened with ([`ConnectionTarget`]), URLs with their
//! password hidden in errors, TLS settings, and the listener's own socket (plain TCP, Unix
//! socket or TLS) split into a reading and a writing half.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

/// What a client can be opened with: everything the `redis` crate's `IntoConnectionInfo`
/// takes (a URL as `&str` or `String`, a `redis::ConnectionInfo`, a `redis::ConnectionAddr`,
/// a `(host, port)` pair), and `&String`.
///
/// URLs: `redis://[[user]:password@]host[:port][/db]`, `rediss://...` for TLS (feature
/// `tls-rustls`, on by default), `unix:///path/to/redis.sock` or
/// `redis+unix:///path/to/redis.sock` (`?db=N&user=U&pass=P`) for a Unix socket.
pub trait ConnectionTarget: sealed::Sealed {
    /// The connection settings, or why there are none (an error message that never shows
    /// a password).
    #[doc(hidden)]
    fn connection_info(self) -> Result<ConnectionInfo, String>;
}

mod sealed {
    pub trait Sealed {}
}

fn parse_url(url: &str) -> Result<ConnectionInfo, String> {
    match tls_url(url) {
        Some(parsed) => parsed,
        None => url.into_connection_info().map_err(|e| bad_url(url, &e)),
    }
}

/// A `rediss://` (or `valkeys://`) URL, parsed without the `redis` crate's TLS support:
/// redlease's own connections (the pool, the listener, Sentinels, RedLock nodes) speak TLS
/// through its own rustls, so it does not turn on `redis/tls-rustls`, whose async
/// connectors fail to build beside a plain `redis/tokio-comp` or `smol-comp` (issue 27).
/// The rest of the URL is the `redis` crate's to read, as a plain one. `None`: not a TLS
/// URL.
fn tls_url(url: &str) -> Option<Result<ConnectionInfo, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let plain = match scheme.to_ascii_lowercase().as_str() {
        "rediss" => "redis",
        "valkeys" => "valkey",
        _ => return None,
    };
    if !cfg!(feature = "tls-rustls") {
        return Some(Err(format!(
            "bad Redis URL {:?}: TLS needs redlease's `tls-rustls` feature",
            redact_url(url)
        )));
    }
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    let insecure = match fragment {
        None | Some("") => false,
        Some("insecure") => true,
        Some(_) => {
            return Some(Err(format!(
                "bad Redis URL {:?}: only #insecure is supported as a URL fragment",
                redact_url(url)
            )));
        }
    };
    let parsed = format!("{plain}://{rest}")
        .into_connection_info()
        .map_err(|e| bad_url(url, &e))
        .and_then(|info| match info.addr().clone() {
            ConnectionAddr::Tcp(host, port) => Ok(info.set_addr(ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params: None,
            })),
            other => Err(format!(
                "bad Redis URL {:?}: not a TCP address ({other})",
                redact_url(url)
            )),
        });
    Some(parsed)
}

/// The error for a URL the `redis` crate refused, without its password.
pub(crate) fn bad_url(url: &str, e: &redis::RedisError) -> String {
    let hint = if (url.starts_with("rediss:") || url.starts_with("valkeys:"))
        && !cfg!(feature = "tls-rustls")
    {
        " (TLS needs redlease's `tls-rustls` feature)"
    } else {
        ""
    };
    format!("bad Redis URL {:?}: {e}{hint}", redact_url(url))
}

impl sealed::Sealed for &str {}
impl ConnectionTarget for &str {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        parse_url(self)
    }
}
impl sealed::Sealed for String {}
impl ConnectionTarget for String {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        parse_url(&self)
    }
}
impl sealed::Sealed for &String {}
impl ConnectionTarget for &String {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        parse_url(self)
    }
}
impl sealed::Sealed for ConnectionInfo {}
impl ConnectionTarget for ConnectionInfo {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        Ok(self)
    }
}
impl sealed::Sealed for ConnectionAddr {}
impl ConnectionTarget for ConnectionAddr {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        self.into_connection_info()
            .map_err(|e| format!("bad Redis address: {e}"))
    }
}
impl sealed::Sealed for (&str, u16) {}
impl ConnectionTarget for (&str, u16) {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        self.into_connection_info()
            .map_err(|e| format!("bad Redis address: {e}"))
    }
}
impl sealed::Sealed for (String, u16) {}
impl ConnectionTarget for (String, u16) {
    fn connection_info(self) -> Result<ConnectionInfo, String> {
        self.into_connection_info()
            .map_err(|e| format!("bad Redis address: {e}"))
    }
}

/// `url` with the password of its user info, and any `pass`/`password` query parameter,
/// replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
    crate::wire::redact::url(url)
}

/// The TLS settings of a client: a CA to trust instead of the platform's trust store, and a
/// client certificate for servers that ask for one (`tls-auth-clients yes`). Used for every
/// `rediss://` connection of the client (pool, listener, Sentinels and the master they
/// name, cluster nodes).
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// PEM certificates to trust.
    pub(crate) root_ca: Option<Vec<u8>>,
    /// PEM certificate chain and PEM private key.
    pub(crate) client_cert: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key (nor bulky certificates).
        f.debug_struct("TlsSettings")
            .field("root_ca", &self.root_ca.as_ref().map(|_| "<set>"))
            .field("client_cert", &self.client_cert.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Checks a `CLIENT SETNAME` name: 1 to 64 printable ASCII characters without spaces.
pub(crate) fn check_client_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "client name must be 1 to 64 printable ASCII characters without spaces, got {name:?}"
        ));
    }
    Ok(())
}

/// Whether `addr` is a TLS address.
pub(crate) fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
}

impl TlsSettings {
    fn is_set(&self) -> bool {
        self.root_ca.is_some() || self.client_cert.is_some()
    }

    /// Checks that the settings fit the addresses they will be used with.
    pub(crate) fn check(&self, tls: bool) -> Result<(), String> {
        if self.is_set() && !tls {
            return Err(
                "TLS certificates were given, but the Redis URL is not a rediss:// one".into(),
            );
        }
        if tls && !cfg!(feature = "tls-rustls") {
            return Err("rediss:// needs redlease's `tls-rustls` feature".into());
        }
        #[cfg(feature = "tls-rustls")]
        if tls {
            // Parse the PEM now, so that a bad file fails `build()`, not every connection.
            rustls_config(self)
                .map_err(|e| format!("bad TLS settings: {e}"))
                .map(drop)?;
        }
        Ok(())
    }

    /// A `redis` client for `info`, with these settings if it is a TLS address.
    pub(crate) fn client(&self, info: ConnectionInfo) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "redis-tls")]
        if is_tls(info.addr()) && self.is_set() {
            install_crypto_provider();
            return redis::Client::build_with_tls(info, self.certificates());
        }
        #[cfg(feature = "tls-rustls")]
        if is_tls(info.addr()) {
            install_crypto_provider();
        }
        redis::Client::open(info)
    }

    /// The settings in the `redis` crate's form.
    #[cfg(feature = "redis-tls")]
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client_cert
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_ca.clone(),
        }
    }
}

/// Makes rustls use `ring` unless the application installed a provider: the `redis` crate
/// asks rustls for the process default, which is ambiguous (a panic) when another crate of
/// the application enables rustls' other provider too.
#[cfg(feature = "tls-rustls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err only means another thread installed one meanwhile: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The rustls configuration of the listener and the pool's own TLS connections, equal to
/// the one the `redis` crate builds for a client: the given CA (else the platform's trust
/// store, or webpki-roots with that feature) and the client certificate if any.
#[cfg(feature = "tls-rustls")]
pub(crate) fn rustls_config(tls: &TlsSettings) -> io::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let mut roots = rustls::RootCertStore::empty();
    match &tls.root_ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| io::Error::other(format!("the CA PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| io::Error::other(format!("the CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(io::Error::other("the CA PEM holds no certificate"));
            }
        }
        None => {
            #[cfg(feature = "tls-rustls-webpki-roots")]
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            #[cfg(not(feature = "tls-rustls-webpki-roots"))]
            for cert in rustls_native_certs::load_native_certs().certs {
                // A certificate rustls cannot use is skipped, as the redis crate's pool
                // would fail on it only if it were the one needed.
                let _ = roots.add(cert);
            }
        }
    }
    // The application's process-wide provider if it installed one (as the `redis` crate's
    // TLS connections did), else `ring`.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots);
    match &tls.client_cert {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| io::Error::other(format!("the client certificate PEM: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| io::Error::other(format!("the client key PEM: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| io::Error::other(format!("the client certificate: {e}")))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// The reading half of the listener's connection.
pub(crate) struct ReadHalf(Stream);

/// The writing half of the listener's connection.
pub(crate) struct WriteHalf(Stream);

enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
    #[cfg(feature = "tls-rustls")]
    Tls(TlsHalf),
}

/// One half of a TLS connection: the TLS state is shared (under a lock held only to
/// decrypt or encrypt, never while blocked on the socket), each half has its own socket
/// handle, so one thread can block reading while others write.
#[cfg(feature = "tls-rustls")]
struct TlsHalf {
    tls: std::sync::Arc<std::sync::Mutex<rustls::ClientConnection>>,
    sock: TcpStream,
    /// Bytes read from the socket that the TLS state has not taken yet.
    pending: Vec<u8>,
    taken: usize,
}

#[cfg(feature = "tls-rustls")]
impl TlsHalf {
    fn lock(&self) -> std::sync::MutexGuard<'_, rustls::ClientConnection> {
        // Every update of the TLS state is complete or an error that drops the connection.
        self.tls.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut tls = self.tls.lock().unwrap_or_else(|p| p.into_inner());
                match tls.reader().read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.taken < self.pending.len() {
                    let mut rest = &self.pending[self.taken..];
                    let before = rest.len();
                    tls.read_tls(&mut rest)?;
                    self.taken += before - rest.len();
                    tls.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    // Whatever TLS wants to answer (alerts, key updates).
                    while tls.wants_write() {
                        tls.write_tls(&mut &self.sock)?;
                    }
                    continue;
                }
            }
            self.pending.resize(16 * 1024, 0);
            let n = match self.sock.read(&mut self.pending) {
                Ok(n) => n,
                Err(e) => {
                    self.pending.clear();
                    self.taken = 0;
                    return Err(e);
                }
            };
            if n == 0 {
                return Ok(0);
            }
            self.pending.truncate(n);
            self.taken = 0;
        }
    }

    fn write_all(&self, data: &[u8]) -> io::Result<()> {
        let mut tls = self.lock();
        tls.writer().write_all(data)?;
        while tls.wants_write() {
            tls.write_tls(&mut &self.sock)?;
        }
        Ok(())
    }
}

impl Stream {
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(h) => h.sock.shutdown(Shutdown::Both),
        };
    }
}

impl ReadHalf {
    /// Reads what arrived; `Ok(0)` at the end of the stream; a timeout reads as
    /// `WouldBlock` or `TimedOut` (nothing is lost: bytes stay buffered).
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.0 {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(h) => h.read(buf),
        }
    }

    /// Sets how long one read may block.
    pub(crate) fn set_read_timeout(&self, d: Duration) -> io::Result<()> {
        match &self.0 {
            Stream::Tcp(s) => s.set_read_timeout(Some(d)),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(Some(d)),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(h) => h.sock.set_read_timeout(Some(d)),
        }
    }
}

impl WriteHalf {
    /// Writes all of `data` (encrypted first on TLS).
    pub(crate) fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match &mut self.0 {
            Stream::Tcp(s) => s.write_all(data),
            #[cfg(unix)]
            Stream::Unix(s) => s.write_all(data),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(h) => h.write_all(data),
        }
    }

    /// Sets how long one write may block.
    pub(crate) fn set_write_timeout(&self, d: Duration) -> io::Result<()> {
        match &self.0 {
            Stream::Tcp(s) => s.set_write_timeout(Some(d)),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(Some(d)),
            #[cfg(feature = "tls-rustls")]
            Stream::Tls(h) => h.sock.set_write_timeout(Some(d)),
        }
    }

    /// Closes the connection both ways (the reading half then reads the end of stream).
    pub(crate) fn shutdown(&self) {
        self.0.shutdown();
    }
}

/// Opens the listener's connection to `addr`: TCP (with `connect_timeout` per address),
/// a Unix socket, or TLS over TCP with `tls` (handshake bounded by `connect_timeout` too).
/// Reads and writes time out after `connect_timeout` until the caller changes it.
pub(crate) fn open_split(
    addr: &ConnectionAddr,
    tls: &TlsSettings,
    connect_timeout: Duration,
) -> io::Result<(ReadHalf, WriteHalf)> {
    let _ = tls;
    match addr {
        ConnectionAddr::Tcp(host, port) => {
            let s = connect_tcp(host, *port, connect_timeout)?;
            let w = s.try_clone()?;
            Ok((ReadHalf(Stream::Tcp(s)), WriteHalf(Stream::Tcp(w))))
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => {
            let s = UnixStream::connect(path)?;
            s.set_read_timeout(Some(connect_timeout))?;
            s.set_write_timeout(Some(connect_timeout))?;
            let w = s.try_clone()?;
            Ok((ReadHalf(Stream::Unix(s)), WriteHalf(Stream::Unix(w))))
        }
        #[cfg(feature = "tls-rustls")]
        ConnectionAddr::TcpTls {
            host,
            port,
            insecure: false,
            ..
        } => {
            let config = std::sync::Arc::new(rustls_config(tls)?);
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| io::Error::other(format!("TLS server name {host:?}: {e}")))?;
            let mut conn = rustls::ClientConnection::new(config, name)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let mut sock = connect_tcp(host, *port, connect_timeout)?;
            while conn.is_handshaking() {
                conn.complete_io(&mut sock)?;
            }
            let w = sock.try_clone()?;
            let tls = std::sync::Arc::new(std::sync::Mutex::new(conn));
            Ok((
                ReadHalf(Stream::Tls(TlsHalf {
                    tls: tls.clone(),
                    sock,
                    pending: Vec::new(),
                    taken: 0,
                })),
                WriteHalf(Stream::Tls(TlsHalf {
                    tls,
                    sock: w,
                    pending: Vec::new(),
                    taken: 0,
                })),
            ))
        }
        other => Err(io::Error::other(format!(
            "the pub/sub listener cannot connect to {other:?}"
        ))),
    }
}

/// Connects to `host:port` (each address it resolves to in turn, `timeout` for each), with
/// TCP_NODELAY, reads and writes timing out after `timeout` until the caller changes it.
pub(crate) fn connect_tcp(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                stream.set_read_timeout(Some(timeout))?;
                stream.set_write_timeout(Some(timeout))?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_in_errors_hide_passwords() {
        assert_eq!(
            redact_url("redis://user:s3cret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact_url("rediss://:s3cret@host"), "rediss://:***@host");
        assert_eq!(redact_url("redis://s3cret@host/"), "redis://***@host/");
        assert_eq!(
            redact_url("unix:///run/redis.sock?db=1&pass=s3cret"),
            "unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(redact_url("redis://host:1/"), "redis://host:1/");
        let e = "redis://:s3cret@host:notaport/"
            .connection_info()
            .err()
            .unwrap_or_default();
        assert!(e.contains("bad Redis URL"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    /// `rediss://` URLs are read without the `redis` crate's TLS (which redlease's default
    /// features no longer turn on: issue 27).
    #[cfg(feature = "tls-rustls")]
    #[test]
    fn tls_urls_parse_without_the_redis_crates_tls() {
        let info = "rediss://app:s3cret@cache.example:6380/2"
            .connection_info()
            .unwrap();
        match info.addr() {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => {
                assert_eq!(
                    (host.as_str(), *port, *insecure),
                    ("cache.example", 6380, false)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(info.redis_settings().db(), 2);
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("s3cret"));
        let valkey = "VALKEYS://cache.example".connection_info().unwrap();
        assert!(matches!(
            valkey.addr(),
            ConnectionAddr::TcpTls { port: 6379, .. }
        ));
        let insecure = "rediss://h/#insecure".connection_info().unwrap();
        assert!(matches!(
            insecure.addr(),
            ConnectionAddr::TcpTls { insecure: true, .. }
        ));
        let e = "rediss://:s3cret@h/#other".connection_info().unwrap_err();
        assert!(e.contains("#insecure") && !e.contains("s3cret"), "{e}");
        let e = "rediss://:s3cret@h:notaport/"
            .connection_info()
            .unwrap_err();
        assert!(e.contains("bad Redis URL") && !e.contains("s3cret"), "{e}");
        // Plain URLs are the `redis` crate's as before.
        assert!(matches!(
            "redis://h:1/".connection_info().unwrap().addr(),
            ConnectionAddr::Tcp(..)
        ));
    }

    /// Runs in a build without default features (`cargo test -p redlease
    /// --no-default-features`).
    #[cfg(not(feature = "tls-rustls"))]
    #[test]
    fn rediss_without_the_tls_feature_names_the_feature() {
        let e = "rediss://:s3cret@host/"
            .connection_info()
            .err()
            .unwrap_or_default();
        assert!(e.contains("`tls-rustls` feature"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn tls_settings_debug_hides_the_key() {
        let tls = TlsSettings {
            root_ca: Some(b"CA".to_vec()),
            client_cert: Some((b"CERT".to_vec(), b"PRIVATE KEY s3cret".to_vec())),
        };
        let printed = format!("{tls:?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(!printed.contains("CERT"), "{printed}");
    }
}
