//! Tasks bound to who created them: serves the demo tools over HTTP with an authenticate
//! hook that maps bearer tokens to users, then connects the crate's client as alice and
//! as bob (SEP-2663, where a task id is all a caller names). Alice's task is hers alone:
//! bob asking for it by id is told there is no such task, and a client without a token
//! cannot connect.
//!
//! ```sh
//! cargo run --example identities
//! ```

#[cfg(feature = "http")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::collections::HashMap;
    use std::sync::Arc;

    use mcp_task_store::client::{CallOutcome, Client, Revision, ToolCall};
    use mcp_task_store::server::{
        demo, HttpOptions, HttpServer, RequestHead, Server, Unauthorized,
    };
    use serde_json::json;

    // In a real server the tokens would be verified (an OAuth introspection, a JWT
    // signature); here they are a fixed table.
    let users: HashMap<&str, &str> = HashMap::from([("t0k-alice", "alice"), ("t0k-bob", "bob")]);
    let authenticate = move |head: &RequestHead<'_>| {
        let token = head.bearer_token();
        match token.and_then(|token| users.get(token)) {
            Some(user) => Ok(user.to_string()),
            None => Err(Unauthorized::new("a valid bearer token is required")
                .with_challenge(r#"Bearer realm="mcp-task-store example""#)),
        }
    };
    let mut server = Server::builder();
    for tool in demo::tools() {
        server = server.tool(tool);
    }
    let options = HttpOptions {
        authenticate: Some(Arc::new(authenticate)),
        ..HttpOptions::default()
    };
    let http = HttpServer::bind(server.build()?, "127.0.0.1:0", options)?;
    let url = format!("http://{}/mcp", http.local_addr());
    println!("serving {url}, bearer tokens t0k-alice and t0k-bob");

    let connect = |token: &str| {
        Client::builder()
            .revision(Revision::Sep2663)
            .http_header("Authorization", format!("Bearer {token}"))
            .connect_http(&url)
    };
    let alice = connect("t0k-alice")?;
    let bob = connect("t0k-bob")?;

    let call = ToolCall::new("sleep_required", json!({"ms": 60_000}));
    let CallOutcome::Task(task) = alice.call_tool_raw(&call)? else {
        return Err("sleep_required did not make a task".into());
    };
    println!("alice created task {} ({})", task.task_id, task.status);
    println!(
        "alice polls it:  {}",
        alice.get_task(&task.task_id)?.task.status
    );
    match bob.get_task(&task.task_id) {
        Ok(seen) => return Err(format!("bob read alice's task: {:?}", seen.task).into()),
        Err(error) => println!("bob polls it:    {error}"),
    }
    match bob.cancel_task(&task.task_id) {
        Ok(_) => return Err("bob cancelled alice's task".into()),
        Err(error) => println!("bob cancels it:  {error}"),
    }
    alice.cancel_task(&task.task_id)?;
    let status = alice.get_task(&task.task_id)?.task.status;
    println!("alice cancels it, now {status}");

    match Client::builder()
        .revision(Revision::Sep2663)
        .connect_http(&url)
    {
        Ok(_) => return Err("a client without a token connected".into()),
        Err(error) => println!("no token:        {error}"),
    }
    Ok(())
}

#[cfg(not(feature = "http"))]
fn main() {
    eprintln!("this example needs the `http` feature");
}
