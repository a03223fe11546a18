//! The connections of the exchanges under way, kept so that shutting the client down, or
//! abandoning a request nobody waits for any more, can shut them down and free the
//! threads blocked on them: every POST and `GET` stream (the session's, and those resuming
//! a POST's stream, which belong to its request) registers its connection here
//! (the session's closing `DELETE`, sent after they are all shut down, does not).

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::protocol::jsonrpc::RequestId;

/// Connections of exchanges under way, so that shutting the client down ends them all:
/// their threads would otherwise wait on servers that may never answer. Once closed, no
/// new exchange starts.
#[derive(Default)]
pub(super) struct OpenConnections {
    state: Mutex<OpenState>,
}

#[derive(Default)]
struct OpenState {
    next: u64,
    /// Each connection, with the request whose exchange it carries, if any.
    streams: HashMap<u64, (TcpStream, Option<RequestId>)>,
    closed: bool,
}

/// One connection's place in [`OpenConnections`], given up when dropped.
pub(super) struct OpenConnection {
    set: Arc<OpenConnections>,
    key: u64,
}

impl OpenConnections {
    /// Keeps `stream` among the open connections, as carrying request `owner`'s exchange.
    pub(super) fn add(
        self: &Arc<Self>,
        stream: &TcpStream,
        owner: Option<&RequestId>,
    ) -> io::Result<OpenConnection> {
        let copy = stream.try_clone()?;
        let mut state = self.state.lock();
        if state.closed {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the client is shutting down",
            ));
        }
        let key = state.next;
        state.next += 1;
        state.streams.insert(key, (copy, owner.cloned()));
        Ok(OpenConnection {
            set: self.clone(),
            key,
        })
    }

    pub(super) fn is_closed(&self) -> bool {
        self.state.lock().closed
    }

    /// Shuts every open connection down: a thread blocked on one sees it end at once.
    pub(super) fn close_all(&self) {
        let streams = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.streams)
        };
        for (stream, _) in streams.into_values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Shuts the connections of request `id`'s exchange down: nobody waits for its
    /// answer any more, so its thread ends as soon as they do.
    pub(super) fn abandon(&self, id: &RequestId) {
        let state = self.state.lock();
        for (stream, _) in state
            .streams
            .values()
            .filter(|(_, o)| o.as_ref() == Some(id))
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.set.state.lock().streams.remove(&self.key);
    }
}
