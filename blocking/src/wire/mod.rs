//! The wire: bytes to and from one server. It owns RESP encoding and parsing, the
//! connection targets and URLs a client accepts, socket and TLS set-up, the pool's own
//! RESP connection, and the redaction of secrets in what is shown. It may use only
//! observe: everything that talks to a server (transport, the in-process server, the
//! driver) builds on it.

pub(crate) mod connect;
#[cfg(test)]
pub(crate) mod fuzz;
pub(crate) mod redact;
pub(crate) mod resp;
pub(crate) mod server;
pub(crate) mod stream;
