//! Calls a long task on the demo server with the blocking client and prints its progress
//! as it goes: status, status message and poll count.
//!
//! ```sh
//! cargo run --example long_task                              # spawns mcp-task-server (stdio)
//! cargo run --example long_task -- --sep2663                 # the same over SEP-2663
//! cargo run --example long_task -- http://127.0.0.1:3000/mcp # a server already serving HTTP
//! ```
//!
//! The server's `count{to, ms}` tool counts to `to`, one step every `ms` milliseconds, and
//! reports `step i of n` as its task's status message.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use mcp_task_store::client::{CallOptions, Client, ClientError, Revision};
use serde_json::json;

/// `mcp-task-server` next to this example's own build (target/<profile>/), built first if
/// it is not there yet.
fn server_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let profile_dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .ok_or("cannot locate the target directory")?;
    let binary = profile_dir.join(format!("mcp-task-server{}", std::env::consts::EXE_SUFFIX));
    if !binary.exists() {
        eprintln!("building mcp-task-server ...");
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--quiet", "--bin", "mcp-task-server"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build.status().map_err(|e| e.to_string())?;
        if !status.success() || !binary.exists() {
            return Err(format!("could not build {}", binary.display()));
        }
    }
    Ok(binary)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut revision = Revision::V2025;
    let mut url = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--sep2663" => revision = Revision::Sep2663,
            "-h" | "--help" => {
                println!("usage: long_task [--sep2663] [http://HOST:PORT/mcp]");
                return Ok(());
            }
            other if other.starts_with("http://") => url = Some(other.to_owned()),
            other => return Err(format!("unknown argument '{other}'").into()),
        }
    }
    let builder = Client::builder().revision(revision);
    let client = match &url {
        #[cfg(feature = "http")]
        Some(url) => {
            println!("connecting to {url} ({})", revision.as_str());
            builder.connect_http(url)?
        }
        #[cfg(not(feature = "http"))]
        Some(_) => return Err("built without the `http` feature".into()),
        None => {
            let binary = server_binary()?;
            println!("spawning {} ({})", binary.display(), revision.as_str());
            let mut command = Command::new(binary);
            command
                .args(["--poll-interval", "250ms", "--log", "warn"])
                .stderr(Stdio::inherit());
            builder.connect_stdio(command)?
        }
    };

    println!("calling count{{to: 8, ms: 400}} ...");
    let mut last = None;
    let outcome = client.call_tool_with(
        "count",
        json!({"to": 8, "ms": 400}),
        CallOptions::new().on_progress(|progress| {
            let task = &progress.task;
            let line = format!(
                "{:>7.2}s  poll {:>3}  {:<14}  {}",
                progress.elapsed.as_secs_f64(),
                progress.polls,
                task.status.as_str(),
                task.status_message.as_deref().unwrap_or("-"),
            );
            if progress.polls == 0 {
                println!("task {} created", task.task_id);
            }
            // Print every poll that shows something new.
            let seen = (task.status, task.status_message.clone());
            if last.as_ref() != Some(&seen) {
                println!("{line}");
                last = Some(seen);
            }
        }),
    );
    match outcome {
        Ok(result) => {
            let text = result
                .pointer("/content/0/text")
                .and_then(|t| t.as_str())
                .unwrap_or("(no text)");
            println!("result: {text}");
            Ok(())
        }
        Err(ClientError::TaskFailed { task, .. }) => {
            Err(format!("the task failed: {:?}", task.status_message).into())
        }
        Err(error) => Err(error.into()),
    }
}
