//! Running core machines yourself: the escape hatch below the primitives (declared after
//! them, so the API docs list it last).

use redlease_core::{Error, Protocol};

use crate::api::client::Client;

impl Client {
    /// Runs a core machine to completion over the pool: the whole driver. Nothing here
    /// knows which protocol it runs; every primitive of this crate goes through it.
    ///
    /// Each batch goes out on one pooled connection (pipelined) and every outcome is fed
    /// back; the connection returns to the pool before any wait, so a waiting acquisition
    /// holds no connection. A wait that names a channel is ended early by a message on it
    /// (through the client's pub/sub listener); otherwise, or while the listener is
    /// disconnected, it lasts until the machine's deadline. A batch that Redis refuses for
    /// the client's configuration (a wrong password) ends the run with
    /// [`Error::Configuration`].
    pub fn run<P: Protocol>(&self, machine: P) -> Result<P::Output, Error> {
        self.run_machine(machine)
    }
}
