//! HTTP responses as the transport's tests read them off a socket, byte for byte: no HTTP
//! client library stands between a test and what the server sent.

use std::io::{self, BufRead};

use serde_json::Value;

/// One HTTP response.
pub(crate) struct Reply {
    /// Interim (1xx) statuses sent before it, where the reader collects them.
    pub(crate) interim: Vec<u16>,
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("interim", &self.interim)
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &String::from_utf8_lossy(&self.body))
            .finish()
    }
}

impl Reply {
    /// The first field named `name` (case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON: `null` when empty, a string when it is not JSON.
    pub(crate) fn json(&self) -> Value {
        if self.body.trim_ascii().is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.body).into()))
    }

    /// The JSON-RPC error code of the body; panics if it carries none.
    pub(crate) fn code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error in {self:?}"))
    }

    pub(crate) fn is_json(&self) -> bool {
        self.header("Content-Type") == Some("application/json")
    }

    pub(crate) fn is_stream(&self) -> bool {
        self.header("Content-Type") == Some("text/event-stream")
    }

    /// Whether it says the connection ends after it.
    pub(crate) fn closes(&self) -> bool {
        self.header("Connection") == Some("close")
    }
}

/// Reads one response head (the status line and fields), interim or final.
pub(crate) fn read_head(conn: &mut impl BufRead) -> Reply {
    try_read_head(conn).unwrap()
}

/// [`read_head`], an I/O error returned rather than a panic.
pub(crate) fn try_read_head(conn: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        conn.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("not a header line: {line:?}"));
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Ok(Reply {
        interim: Vec::new(),
        status,
        headers,
        body: Vec::new(),
    })
}

/// Reads one response: its head, then the body its `Content-Length` frames, or everything
/// up to the end of the stream when it has none (an answer that closes the connection);
/// a 204 has none.
pub(crate) fn read_reply(conn: &mut impl BufRead) -> Reply {
    try_read_reply(conn).unwrap()
}

/// [`read_reply`], an I/O error returned rather than a panic.
pub(crate) fn try_read_reply(conn: &mut impl BufRead) -> io::Result<Reply> {
    let mut reply = try_read_head(conn)?;
    if reply.status == 204 {
        return Ok(reply); // no body, and no length to say so (RFC 9110 §8.6)
    }
    match reply.header("Content-Length") {
        Some(length) => {
            let length: usize = length
                .parse()
                .unwrap_or_else(|_| panic!("a length that is no number: {reply:?}"));
            reply.body = vec![0; length];
            conn.read_exact(&mut reply.body)?;
        }
        None => {
            let _ = conn.read_to_end(&mut reply.body);
        }
    }
    Ok(reply)
}
