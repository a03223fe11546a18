//! Who sent a request, when the embedder says ([`HttpOptions::authenticate`]), and the
//! store's view of it: tasks bound to an identity live in a store session of its own
//! (`auth:<identity>`), so every task operation of another identity finds no such task.
//!
//! [`HttpOptions::authenticate`]: super::HttpOptions::authenticate

use std::sync::Arc;

use super::conn::TurnedAway;
use super::wire::Head;
use super::State;
use crate::model::SessionId;
use crate::protocol::jsonrpc::RpcError;
use crate::server::listen::listen_limit;
use crate::server::Connection;

/// The hook that tells who sent a request: see
/// [`HttpOptions::authenticate`](super::HttpOptions::authenticate).
pub type Authenticate = Arc<dyn Fn(&RequestHead<'_>) -> Result<String, Unauthorized> + Send + Sync>;

/// What an [`Authenticate`] hook sees of a request: its method, target and header fields.
/// Its body has not been read yet: it is read only once the hook lets the request through.
pub struct RequestHead<'a>(pub(super) &'a Head);

impl RequestHead<'_> {
    /// The request method: `POST`, `GET`, `DELETE`, or another one that is then answered
    /// with 405 (never `OPTIONS`, which is answered without asking the hook).
    pub fn method(&self) -> &str {
        &self.0.method
    }

    /// The request target as sent (`/mcp`, perhaps with a query).
    pub fn target(&self) -> &str {
        &self.0.target
    }

    /// The value of the header field named `name` (compared case-insensitively),
    /// surrounding whitespace trimmed; `None` if the request has no such field, or more
    /// than one. A repeated field is ambiguous, and taking either one would let a client
    /// choose: a proxy in front that appends its own field (an identity it vouches for,
    /// say) rather than replacing the client's leaves the client's first.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.0.single_field(name).ok().flatten()
    }

    /// The token of an `Authorization: Bearer <token>` field (the scheme compared
    /// case-insensitively, RFC 9110 §11.1), if the request has one (and only one
    /// `Authorization` field, see [`header`](Self::header)).
    pub fn bearer_token(&self) -> Option<&str> {
        let (scheme, token) = self.header("Authorization")?.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    }
}

impl std::fmt::Debug for RequestHead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may hold credentials: names only.
        let names: Vec<&str> = self.0.fields.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("RequestHead")
            .field("method", &self.method())
            .field("target", &self.target())
            .field("header_names", &names)
            .finish()
    }
}

/// The refusal of a request by an [`Authenticate`] hook: HTTP 401 (no valid credentials)
/// or 403 (valid ones that do not allow using the server), with a JSON-RPC error body
/// carrying `message`, and the `WWW-Authenticate` field if one is given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unauthorized {
    status: u16,
    message: String,
    challenge: Option<String>,
}

impl Unauthorized {
    /// HTTP 401: the request has no credentials, or ones that are not valid. RFC 9110 has a
    /// 401 name how to authenticate: give the challenge with
    /// [`with_challenge`](Self::with_challenge).
    pub fn new(message: impl Into<String>) -> Unauthorized {
        Unauthorized {
            status: 401,
            message: message.into(),
            challenge: None,
        }
    }

    /// HTTP 403: the credentials are valid but do not allow this (an insufficient scope).
    pub fn forbidden(message: impl Into<String>) -> Unauthorized {
        Unauthorized {
            status: 403,
            ..Unauthorized::new(message)
        }
    }

    /// Sends `challenge` as the answer's `WWW-Authenticate` field, e.g. `Bearer
    /// resource_metadata="https://mcp.example/.well-known/oauth-protected-resource"`, as
    /// MCP's authorization specification has servers point clients at their authorization
    /// server.
    pub fn with_challenge(mut self, challenge: impl Into<String>) -> Unauthorized {
        self.challenge = Some(challenge.into());
        self
    }

    /// The HTTP status it is answered with (401 or 403).
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The `WWW-Authenticate` value it is answered with, if any.
    pub fn challenge(&self) -> Option<&str> {
        self.challenge.as_deref()
    }
}

/// Who sent a request: `None` when the server has no [`Authenticate`] hook.
pub(super) type Identity = Option<Arc<str>>;

/// The identity the hook finds in `head`, or the refusal of the request (with the
/// `WWW-Authenticate` value to send, if any). A hook that panics refuses the request
/// rather than taking the connection's reader down with it.
pub(super) fn identify(state: &State, head: &Head) -> Result<Identity, TurnedAway> {
    let Some(hook) = &state.options.authenticate else {
        return Ok(None);
    };
    let verdict =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&RequestHead(head))));
    match verdict {
        Ok(Ok(identity)) => Ok(Some(identity.into())),
        Ok(Err(refusal)) => {
            // A field value with a line break would write header fields of its own.
            let challenge = refusal.challenge.filter(|c| {
                let clean = !c.chars().any(|ch| ch.is_control() && ch != '\t');
                if !clean {
                    log::error!("WWW-Authenticate value with a control character not sent");
                }
                clean
            });
            Err(TurnedAway {
                status: refusal.status,
                error: RpcError::invalid_request(refusal.message),
                fields: challenge
                    .map(|c| ("WWW-Authenticate", c))
                    .into_iter()
                    .collect(),
            })
        }
        Err(_) => {
            log::error!("the HTTP authentication hook panicked; the request is refused");
            Err(TurnedAway {
                status: 500,
                error: RpcError::internal("authentication failed"),
                fields: Vec::new(),
            })
        }
    }
}

/// The store session that tasks created by `identity` over 2026-07-28 belong to. The
/// prefix keeps it apart from 2025-11-25 sessions' ids, which are UUIDs the server made.
fn store_session(identity: &str) -> SessionId {
    SessionId::new(format!("auth:{identity}"))
}

/// The connection that serves `identity`'s 2026-07-28 requests (the shared one when
/// nobody is identified): one per identity, made when first needed, so its tasks and
/// subscriptions are its own. Once more identities than
/// [`max_sessions`](super::HttpOptions::max_sessions) have one, those nothing uses (no
/// request in progress, no subscription open) are dropped: they keep nothing the store
/// does not, and one is made again when needed.
pub(super) fn stateless_connection(state: &State, identity: &Identity) -> Arc<Connection> {
    let Some(identity) = identity else {
        return state.stateless.clone();
    };
    let session = store_session(identity);
    let mut connections = state.identified.lock();
    if let Some(connection) = connections.get(session.as_str()) {
        return connection.clone();
    }
    if connections.len() >= state.options.max_sessions {
        connections.retain(|_, connection| Arc::strong_count(connection) > 1);
    }
    let connection = state.server.connect_stateless(
        state.unread.clone(),
        Some(session.clone()),
        listen_limit(state.options.max_connections),
    );
    connections.insert(session.as_str().into(), connection.clone());
    connection
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> Head {
        Head {
            method: "POST".into(),
            target: "/mcp".into(),
            version: super::super::wire::Version::Http11,
            fields: fields
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_bearer_token_is_read_whatever_the_scheme_case() {
        for (field, token) in [
            ("Bearer abc", Some("abc")),
            ("bearer  abc ", Some("abc")),
            ("BEARER abc", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearer ", None),
            ("Bearerabc", None),
        ] {
            let head = head(&[("authorization", field)]);
            assert_eq!(RequestHead(&head).bearer_token(), token, "{field:?}");
        }
        assert_eq!(RequestHead(&head(&[])).bearer_token(), None);
        let twice = head(&[
            ("Authorization", "Bearer abc"),
            ("authorization", "Bearer def"),
        ]);
        assert_eq!(RequestHead(&twice).bearer_token(), None);
        assert_eq!(RequestHead(&twice).header("Authorization"), None);
    }

    #[test]
    fn a_request_head_shows_no_header_value_when_printed() {
        let head = head(&[("Authorization", "Bearer secret")]);
        let printed = format!("{:?}", RequestHead(&head));
        assert!(printed.contains("Authorization"), "{printed}");
        assert!(!printed.contains("secret"), "{printed}");
    }
}
