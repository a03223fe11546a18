//! `HttpOptions::authenticate`: requests it refuses get 401 or 403 with its challenge, and
//! the tasks of each identity are out of every other identity's reach, over both protocol
//! revisions, event routing included.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use mcp_task_store::server::{Authenticate, HttpOptions, HttpServer, RequestHead, Unauthorized};
use mcp_task_store::{SessionId, TaskId, TaskStore};
use serde_json::{json, Value};

use crate::fixtures::demo_http_server;
use crate::http::{meta_2026, next_event, send, try_listen_with};
use crate::raw_http::{read_head, read_reply, Reply};

const CHALLENGE: &str =
    r#"Bearer resource_metadata="https://mcp.example/.well-known/oauth-protected-resource""#;

/// Tokens `<name>-token` for alice, bob and carol; `reader-token` is valid but may not use
/// the server; `boom-token` makes the hook panic.
fn hook() -> Authenticate {
    Arc::new(|head: &RequestHead<'_>| match head.bearer_token() {
        Some(token @ ("alice-token" | "bob-token" | "carol-token")) => {
            Ok(token.trim_end_matches("-token").to_owned())
        }
        Some("reader-token") => Err(Unauthorized::forbidden("this token may not use tools")),
        Some("boom-token") => panic!("the hook broke"),
        Some("inject-token") => {
            Err(Unauthorized::new("no").with_challenge("Bearer\r\nX-Injected: yes"))
        }
        _ => Err(Unauthorized::new("a bearer token is required").with_challenge(CHALLENGE)),
    })
}

fn start(max_sessions: usize) -> (HttpServer, Arc<dyn TaskStore>) {
    demo_http_server(HttpOptions {
        authenticate: Some(hook()),
        max_sessions,
        ..HttpOptions::default()
    })
}

fn bearer(who: &str) -> String {
    format!("Bearer {who}-token")
}

/// A JSON POST as `who` (no credentials for `None`).
fn post_as(addr: SocketAddr, who: Option<&str>, headers: &[(&str, &str)], body: &Value) -> Reply {
    let authorization = who.map(bearer);
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend(authorization.as_deref().map(|a| ("Authorization", a)));
    all.extend_from_slice(headers);
    send(addr, "POST", &all, body.to_string().as_bytes())
}

fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
}

/// Opens a 2025-11-25 session as `who`; returns its id.
fn initialize_as(addr: SocketAddr, who: &str) -> String {
    let reply = post_as(addr, Some(who), &[], &initialize());
    assert_eq!(reply.status, 200, "{}", reply.json());
    reply.header("Mcp-Session-Id").unwrap().to_owned()
}

/// A 2026-07-28 request as `who`, its routing headers set; `name` is the tool or task.
fn call_2026(addr: SocketAddr, who: &str, method: &str, name: &str, mut params: Value) -> Reply {
    params["_meta"] = meta_2026(true);
    post_as(
        addr,
        Some(who),
        &[("Mcp-Method", method), ("Mcp-Name", name)],
        &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
}

/// Starts a long 2026-07-28 task as `who`; returns its id.
fn start_task_as(addr: SocketAddr, who: &str) -> String {
    let task = call_2026(
        addr,
        who,
        "tools/call",
        "sleep_required",
        json!({"name": "sleep_required", "arguments": {"ms": 600_000}}),
    );
    task.json()["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task in {}", task.json()))
        .to_owned()
}

/// What `method` on task `id` gets as `who`: the JSON-RPC answer without its id.
fn task_request(addr: SocketAddr, who: &str, method: &str, id: &str) -> Value {
    let mut params = json!({"taskId": id});
    if method == "tasks/update" {
        params["inputResponses"] = json!({});
    }
    let mut answer = call_2026(addr, who, method, id, params).json();
    answer.as_object_mut().unwrap().remove("id");
    answer
}

/// Opens a task subscription as `who`; returns the stream, its acknowledgement read.
fn listen_as(addr: SocketAddr, who: &str, task_ids: Value) -> (BufReader<TcpStream>, Value) {
    let authorization = bearer(who);
    let credentials = [("Authorization", authorization.as_str())];
    let mut events = try_listen_with(addr, &credentials, "L", task_ids)
        .unwrap_or_else(|answer| panic!("not an event stream but {answer}"));
    let ack = next_event(&mut events);
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let listed = ack["params"]["notifications"]["taskIds"].clone();
    (events, listed)
}

#[test]
fn a_request_the_hook_refuses_gets_401_or_403_with_its_challenge() {
    let (http, _) = start(1024);
    let addr = http.local_addr();

    let anonymous = post_as(addr, None, &[], &ping());
    assert_eq!((anonymous.status, anonymous.code()), (401, -32600));
    assert_eq!(anonymous.header("WWW-Authenticate"), Some(CHALLENGE));
    let message = anonymous.json()["error"]["message"].to_string();
    assert!(message.contains("a bearer token is required"), "{message}");
    let reader = post_as(addr, Some("reader"), &[], &ping());
    assert_eq!((reader.status, reader.code()), (403, -32600));
    assert_eq!(reader.header("WWW-Authenticate"), None);
    // Every method that reaches MCP is checked, whatever else is wrong with it.
    assert_eq!(send(addr, "GET", &[], b"").status, 401);
    assert_eq!(
        send(addr, "DELETE", &[("Mcp-Session-Id", "x")], b"").status,
        401
    );
    // A CORS preflight carries no credentials, so it is answered as without the hook.
    let preflight = send(
        addr,
        "OPTIONS",
        &[
            ("Origin", "http://localhost:6274"),
            ("Access-Control-Request-Method", "POST"),
        ],
        b"",
    );
    assert!(
        preflight.status / 100 == 2,
        "a preflight got {}",
        preflight.status
    );

    // A challenge that would write a header field of its own is not sent.
    let injected = post_as(addr, Some("inject"), &[], &ping());
    assert_eq!(injected.status, 401);
    assert_eq!(injected.header("WWW-Authenticate"), None);
    assert_eq!(injected.header("X-Injected"), None);

    // A hook that panics refuses the request, and the server carries on.
    let broken = post_as(addr, Some("boom"), &[], &ping());
    assert_eq!((broken.status, broken.code()), (500, -32603));
    initialize_as(addr, "alice");
}

/// A refused request's body is never read: a client the hook turns away cannot make the
/// server take in `max_body_bytes`, nor is it told to go on after `Expect: 100-continue`.
#[test]
fn a_refused_request_is_answered_before_its_body_is_read() {
    let (http, _) = start(1024);
    let addr = http.local_addr();
    let limit = HttpOptions::default().max_body_bytes;
    for expect in ["", "Expect: 100-continue\r\n"] {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // A head announcing the largest body allowed, and none of it sent.
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{expect}\
             Content-Length: {limit}\r\n\r\n"
        );
        conn.write_all(head.as_bytes()).unwrap();
        let mut conn = BufReader::new(conn);
        let refused = read_reply(&mut conn);
        assert_eq!(
            (refused.status, refused.code()),
            (401, -32600),
            "{expect:?}"
        );
        assert_eq!(refused.header("WWW-Authenticate"), Some(CHALLENGE));
        assert!(refused.closes(), "{refused:?}");
        // Nothing else comes: the connection is over.
        assert_eq!(conn.read(&mut [0; 64]).unwrap(), 0);
    }
    // Whoever the hook lets through is served on the same terms as before.
    let alice = bearer("alice");
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let body = initialize().to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nAuthorization: {alice}\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    let mut conn = BufReader::new(conn);
    assert_eq!(read_head(&mut conn).status, 100);
    conn.get_mut().write_all(body.as_bytes()).unwrap();
    let served = read_reply(&mut conn);
    assert_eq!(served.status, 200, "{:?}", served.json());
    assert!(served.header("Mcp-Session-Id").is_some());
}

#[test]
fn a_session_serves_only_the_identity_that_opened_it() {
    let (http, _) = start(1024);
    let addr = http.local_addr();
    let session = initialize_as(addr, "alice");
    let created = post_as(
        addr,
        Some("alice"),
        &[("Mcp-Session-Id", &session)],
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "sleep", "arguments": {"ms": 0}, "task": {}}}),
    );
    assert!(created.json()["result"]["task"]["taskId"].is_string());
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/list"});
    let on_session = [("Mcp-Session-Id", session.as_str())];

    // Bob knows the session id, and gets what an unknown session gets, however he asks.
    let unknown = post_as(addr, Some("bob"), &[("Mcp-Session-Id", "no-such")], &ping());
    assert_eq!(unknown.status, 404);
    for body in [ping(), list.clone()] {
        let reply = post_as(addr, Some("bob"), &on_session, &body);
        assert_eq!((reply.status, reply.json()), (404, unknown.json()));
    }
    let bob = bearer("bob");
    let as_bob = [("Authorization", bob.as_str()), on_session[0]];
    let stream = send(
        addr,
        "GET",
        &[as_bob[0], as_bob[1], ("Accept", "text/event-stream")],
        b"",
    );
    assert_eq!(stream.status, 404);
    assert_eq!(send(addr, "DELETE", &as_bob, b"").status, 404);
    let batch = post_as(addr, Some("bob"), &on_session, &json!([ping()]));
    assert_eq!(batch.status, 404);

    // Alice's session is untouched by all that.
    let listed = post_as(addr, Some("alice"), &on_session, &list);
    assert_eq!(
        listed.json()["result"]["tasks"].as_array().unwrap().len(),
        1
    );
    let alice = bearer("alice");
    let as_alice = [("Authorization", alice.as_str()), on_session[0]];
    assert_eq!(send(addr, "DELETE", &as_alice, b"").status, 200);
}

#[test]
fn a_2026_task_is_out_of_every_other_identitys_reach() {
    let (http, store) = start(1024);
    let addr = http.local_addr();
    let id = start_task_as(addr, "alice");
    let got = task_request(addr, "alice", "tasks/get", &id);
    assert_eq!(got["result"]["status"], "working", "{got}");

    // To bob, alice's task is a task that does not exist, whatever he does with it.
    let nobodys = TaskId::random().to_string();
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let unknown = task_request(addr, "bob", method, &nobodys);
        assert!(unknown["error"].is_object(), "{method}: {unknown}");
        let answer = task_request(addr, "bob", method, &id);
        let answer = answer.to_string().replace(&id, &nobodys);
        assert_eq!(answer, unknown.to_string(), "{method}");
    }
    let (_, listed) = listen_as(addr, "bob", json!([id]));
    assert_eq!(listed, json!([]));

    // The task is alice's, in the store too (a journal keeps that across restarts), and
    // still working after all bob tried.
    let alices = SessionId::new("auth:alice");
    let task = store.get(id.parse().unwrap(), Some(&alices)).unwrap();
    assert_eq!(task.status.to_string(), "working");
    let cancelled = task_request(addr, "alice", "tasks/cancel", &id);
    assert!(cancelled["result"].is_object(), "{cancelled}");
}

#[test]
fn an_identitys_subscription_gets_its_tasks_events_while_other_identities_come_and_go() {
    // One identity's connection at a time is kept idle: the others are made and dropped
    // around alice's, which her open subscription keeps.
    let (http, _) = start(1);
    let addr = http.local_addr();
    let bobs = start_task_as(addr, "bob");
    let alices = start_task_as(addr, "alice");
    let (mut events, listed) = listen_as(addr, "alice", json!([alices]));
    assert_eq!(listed, json!([alices]));
    let first = next_event(&mut events);
    assert_eq!(first["params"]["status"], "working", "{first}");

    for who in ["carol", "bob", "carol", "bob"] {
        let answer = call_2026(addr, who, "server/discover", "", json!({}));
        assert_eq!(answer.status, 200);
    }
    // Bob's connection was remade meanwhile: his task is still his.
    let got = task_request(addr, "bob", "tasks/get", &bobs);
    assert_eq!(got["result"]["status"], "working", "{got}");

    let cancelled = task_request(addr, "alice", "tasks/cancel", &alices);
    assert!(cancelled["result"].is_object(), "{cancelled}");
    let ended = next_event(&mut events);
    assert_eq!(ended["params"]["status"], "cancelled", "{ended}");
    assert_eq!(
        task_request(addr, "bob", "tasks/cancel", &bobs)["result"]["resultType"],
        "complete"
    );
}

/// The crate's own client sends its credentials with [`ClientBuilder::http_header`]: over
/// either revision it runs a task under its identity, which another identity cannot see,
/// and without credentials it cannot connect.
///
/// [`ClientBuilder::http_header`]: mcp_task_store::client::ClientBuilder::http_header
#[test]
fn the_crates_client_sends_its_credentials_with_every_request() {
    use mcp_task_store::client::{Client, ClientError, Revision};
    let (http, _) = start(1024);
    let url = format!("http://{}/mcp", http.local_addr());
    let connect = |revision, who: &str| {
        Client::builder()
            .revision(revision)
            .http_header("Authorization", bearer(who))
            .connect_http(&url)
    };
    for revision in [Revision::V2025, Revision::Sep2663] {
        let alice = connect(revision, "alice").unwrap();
        let result = alice.call_tool("sleep_required", json!({"ms": 0})).unwrap();
        assert_eq!(result["content"][0]["text"], "slept 0 ms", "{revision:?}");
        let bob = connect(revision, "bob").unwrap();
        let id = start_task_as(http.local_addr(), "alice");
        let refused = bob.get_task(&id).unwrap_err();
        assert!(refused.rpc_error().is_some(), "{revision:?}: {refused}");
        // Alice's own 2026-07-28 task, which her 2025-11-25 session does not hold.
        let own = alice.get_task(&id);
        assert_eq!(
            own.is_ok(),
            revision == Revision::Sep2663,
            "{revision:?}: {own:?}"
        );
        task_request(http.local_addr(), "alice", "tasks/cancel", &id);

        let anonymous = Client::builder().revision(revision).connect_http(&url);
        match anonymous {
            Err(ClientError::Http { status: 401, .. }) | Err(ClientError::Rpc(_)) => {}
            other => panic!("{revision:?}: connected without credentials: {other:?}"),
        }
    }
}

/// A header an authenticating proxy sets, as `--identity-header` reads it: a request that
/// carries the field twice (the client's own, then the one a proxy that appends rather than
/// replaces added) names nobody, not whoever comes first, which is the client's choice.
#[test]
fn a_repeated_identity_field_names_nobody() {
    let hook = |head: &RequestHead<'_>| match head.header("X-Forwarded-User") {
        Some(user) if !user.is_empty() => Ok(user.to_owned()),
        _ => Err(Unauthorized::new("who are you?")),
    };
    let (http, _) = demo_http_server(HttpOptions {
        authenticate: Some(Arc::new(hook)),
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    let as_user = |user: &[&str], session: Option<&str>, body: &Value| {
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        headers.extend(user.iter().map(|u| ("X-Forwarded-User", *u)));
        headers.extend(session.map(|s| ("Mcp-Session-Id", s)));
        send(addr, "POST", &headers, body.to_string().as_bytes())
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let opened = as_user(&["alice"], None, &initialize);
    let session = opened.header("Mcp-Session-Id").unwrap().to_owned();
    assert_eq!(as_user(&["mallory"], Some(&session), &ping()).status, 404);

    // Mallory sends `alice` herself; the proxy adds `mallory` after it.
    let spoofed = as_user(&["alice", "mallory"], Some(&session), &ping());
    assert_eq!(spoofed.status, 401, "{}", spoofed.json());
}

/// At the session limit, an `initialize` ends its own identity's quiet sessions before
/// anyone else's: an identity that opens sessions and never ends them ends its own.
#[test]
fn at_the_session_limit_an_identity_ends_its_own_quiet_sessions_first() {
    let (http, _) = start(2);
    let addr = http.local_addr();
    let bobs = initialize_as(addr, "bob");
    let alices_first = initialize_as(addr, "alice");
    // Bob's is the least recently active, but it is not alice's to end.
    let alices_second = initialize_as(addr, "alice");
    let ping_as = |who: &str, session: &str| {
        post_as(addr, Some(who), &[("Mcp-Session-Id", session)], &ping()).status
    };
    assert_eq!(ping_as("bob", &bobs), 200);
    assert_eq!(ping_as("alice", &alices_first), 404);
    assert_eq!(ping_as("alice", &alices_second), 200);
    // With no quiet session of its own, an identity's initialize ends another's.
    let carols = initialize_as(addr, "carol");
    assert_eq!(ping_as("carol", &carols), 200);
    let ended = [ping_as("bob", &bobs), ping_as("alice", &alices_second)];
    assert_eq!(
        ended.iter().filter(|&&status| status == 404).count(),
        1,
        "{ended:?}"
    );
}

/// At the session limit, an identity whose own quiet sessions all hold live tasks (more of
/// them than one eviction looks at: 32) still gets a session: another identity's quiet
/// session with no live task is ended, as when it has no session at all. Its own busy
/// sessions must not fill the window that the others' are looked for in.
#[test]
fn at_the_session_limit_an_identitys_busy_sessions_hide_no_one_elses_quiet_ones() {
    use mcp_task_store::CreateTask;
    const BUSY: usize = 40;
    let (http, store) = demo_http_server(HttpOptions {
        authenticate: Some(hook()),
        max_sessions: BUSY + 1,
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    let bobs = initialize_as(addr, "bob");
    for _ in 0..BUSY {
        let session = initialize_as(addr, "alice");
        let mut task = CreateTask::new();
        task.session = Some(SessionId::new(session));
        store.create(task).unwrap();
    }
    // Every one of alice's sessions is quiet but holds a live task; bob's holds nothing.
    let alices = initialize_as(addr, "alice");
    let ping_as = |who: &str, session: &str| {
        post_as(addr, Some(who), &[("Mcp-Session-Id", session)], &ping()).status
    };
    assert_eq!(ping_as("alice", &alices), 200);
    assert_eq!(
        ping_as("bob", &bobs),
        404,
        "bob's quiet session made the room"
    );
}

/// No identity holds more than `max_sessions_per_identity` sessions: past it, its
/// `initialize` ends one of its own quiet sessions, or gets 503 when all are busy, and
/// other identities are served all the same.
#[test]
fn no_identity_holds_more_sessions_than_its_share() {
    let (http, _) = demo_http_server(HttpOptions {
        authenticate: Some(hook()),
        max_sessions_per_identity: 2,
        ..HttpOptions::default()
    });
    let addr = http.local_addr();
    let start_long_task = |session: &str| {
        let created = post_as(
            addr,
            Some("alice"),
            &[("Mcp-Session-Id", session)],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"ms": 600_000}, "task": {}}}),
        );
        created.json()["result"]["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let sessions = [initialize_as(addr, "alice"), initialize_as(addr, "alice")];
    let tasks = sessions.clone().map(|session| start_long_task(&session));
    // A quiet session of another identity, which alice's initialize must leave alone.
    let bobs = initialize_as(addr, "bob");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let refused = post_as(addr, Some("alice"), &[], &initialize);
    assert_eq!(refused.status, 503);
    let message = refused.json()["error"]["message"].to_string();
    assert!(message.contains("for this identity"), "{message}");
    let bobs_ping = post_as(addr, Some("bob"), &[("Mcp-Session-Id", &bobs)], &ping());
    assert_eq!(bobs_ping.status, 200);
    initialize_as(addr, "bob");

    // Once one of her sessions is quiet (its task ended), it makes room for a new one.
    let cancel = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel",
        "params": {"taskId": tasks[0]}});
    let cancelled = post_as(
        addr,
        Some("alice"),
        &[("Mcp-Session-Id", &sessions[0])],
        &cancel,
    );
    assert_eq!(cancelled.json()["result"]["status"], "cancelled");
    initialize_as(addr, "alice");
    let ping_on = |session: &str| {
        post_as(addr, Some("alice"), &[("Mcp-Session-Id", session)], &ping()).status
    };
    assert_eq!((ping_on(&sessions[0]), ping_on(&sessions[1])), (404, 200));
}

/// A journaled store keeps each identity's 2026-07-28 tasks bound to it across a restart:
/// after one, alice finds her task (failed, as every task running at a restart is) and
/// bob still finds none.
#[test]
fn a_journaled_store_keeps_each_identitys_tasks_across_a_restart() {
    use mcp_task_store::server::Server;
    use mcp_task_store::{JournalConfig, Store};
    let dir = tempfile::tempdir().unwrap();
    let serve = || {
        let store = Store::builder()
            .journal(JournalConfig::new(dir.path()))
            .build()
            .unwrap();
        let mut builder = Server::builder().store(Arc::new(store.handle()));
        for tool in mcp_task_store::server::demo::tools() {
            builder = builder.tool(tool);
        }
        let options = HttpOptions {
            authenticate: Some(hook()),
            ..HttpOptions::default()
        };
        let http = HttpServer::bind(builder.build().unwrap(), "127.0.0.1:0", options).unwrap();
        (http, store)
    };
    let (http, store) = serve();
    let id = start_task_as(http.local_addr(), "alice");
    drop(http);
    drop(store);

    let (http, _store) = serve();
    let addr = http.local_addr();
    let got = task_request(addr, "alice", "tasks/get", &id);
    assert_eq!(got["result"]["status"], "failed", "{got}");
    let unknown = task_request(addr, "bob", "tasks/get", &TaskId::random().to_string());
    let bobs = task_request(addr, "bob", "tasks/get", &id);
    assert_eq!(bobs["error"]["code"], unknown["error"]["code"], "{bobs}");
    assert!(bobs["result"].is_null(), "{bobs}");
}

/// A client that sends its whole request before it reads (most do) gets the refusal of a
/// large body it sent, not a reset: the server drops the unread body rather than close
/// the connection on it, which would reset it and lose the 401 (and, with it, the
/// client's cue to renew its credentials).
#[test]
fn a_refused_request_with_a_large_body_still_gets_its_refusal() {
    let (http, _) = start(1024);
    let addr = http.local_addr();
    let limit = HttpOptions::default().max_body_bytes;
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(limit - 100)
    );
    assert!(body.len() <= limit);
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).unwrap();
    // Written whole before anything is read, as a simple client does.
    let sent = conn.write_all(body.as_bytes());
    let mut conn = BufReader::new(conn);
    let refused = read_reply(&mut conn);
    assert!(sent.is_ok(), "the body could not be sent: {sent:?}");
    assert_eq!((refused.status, refused.code()), (401, -32600));
}
