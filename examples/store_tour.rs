//! A tour of the task store: a worker thread runs a task while the caller polls and then
//! blocks for its result; a second task asks for input; a third is cancelled; a fourth
//! expires on a manual clock.
//!
//! Run with `cargo run --example store_tour`.

use std::collections::BTreeMap;
use std::thread;
use std::time::Duration;

use mcp_task_store::{CreateTask, ManualClock, Outcome, Store, StoreError, TaskStatus};
use serde_json::json;

fn main() -> Result<(), StoreError> {
    let store = Store::builder()
        .default_ttl(Duration::from_secs(600))
        .poll_interval(Duration::from_millis(200))
        .build()?;

    // 1. A task whose work runs on another thread.
    let task = store.create(CreateTask::new().session("alice"))?;
    println!(
        "created   {} status={} ttl={:?}",
        task.task_id, task.status, task.ttl
    );
    let worker = {
        let handle = store.handle();
        let id = task.task_id;
        thread::spawn(move || -> Result<(), StoreError> {
            let session = Some("alice".into());
            for step in 1..=3 {
                let message = format!("step {step} of 3");
                handle.update_status(id, session.as_ref(), TaskStatus::Working, Some(message))?;
                thread::sleep(Duration::from_millis(50)); // stands in for real work
            }
            let outcome = Outcome::result(json!({"content": [{"type": "text", "text": "done"}]}));
            handle.store_result(id, session.as_ref(), TaskStatus::Completed, outcome, None)?;
            Ok(())
        })
    };
    let alice = Some("alice".into());
    let seen = store.get(task.task_id, alice.as_ref())?;
    println!(
        "polled    {} status={} message={:?}",
        seen.task_id, seen.status, seen.status_message
    );
    let finished =
        store.wait_terminal(task.task_id, alice.as_ref(), Some(Duration::from_secs(5)))?;
    let result = store.get_result(task.task_id, alice.as_ref())?;
    println!(
        "finished  {} status={} outcome={:?}",
        finished.task_id, finished.status, result.outcome
    );
    worker.join().expect("worker thread")?;
    println!(
        "other sessions see nothing: {:?}",
        store
            .get(task.task_id, Some(&"mallory".into()))
            .unwrap_err()
    );

    // 2. A task that needs input from its requestor.
    let asking = store.create(CreateTask::new())?.task_id;
    let mut requests = BTreeMap::new();
    requests.insert(
        "confirm".to_string(),
        json!({"method": "elicitation/create", "params": {"message": "Delete it?"}}),
    );
    let waiting = store.set_input_requests(asking, None, requests)?;
    println!("asking    {} status={}", asking, waiting.status);
    let answerer = {
        let handle = store.handle();
        thread::spawn(move || {
            let mut responses = BTreeMap::new();
            responses.insert("confirm".to_string(), json!({"action": "accept"}));
            handle.resolve_input(asking, None, responses)
        })
    };
    let answer = store.wait_input(asking, None, "confirm", Some(Duration::from_secs(5)))?;
    answerer.join().expect("answer thread")?;
    println!(
        "answered  {} with {answer} -> status={}",
        asking,
        store.get(asking, None)?.status
    );

    // 3. Cancel: the worker's token fires, and a late completion cannot overwrite it.
    let doomed = store.create(CreateTask::new())?.task_id;
    let token = store.cancel_token(doomed, None)?;
    store.cancel(doomed, None, Some("no longer needed".into()))?;
    let late = store.store_result(
        doomed,
        None,
        TaskStatus::Completed,
        Outcome::result(json!({})),
        None,
    );
    println!(
        "cancelled {} token fired={} late completion -> {}",
        doomed,
        token.is_cancelled(),
        late.unwrap_err()
    );

    // 4. Expiry, deterministically, on a manual clock.
    let clock = ManualClock::new();
    let timed = Store::builder().clock(clock.clone()).build()?;
    let short = timed.create(CreateTask::new().ttl(1_000))?.task_id;
    clock.advance(Duration::from_millis(1_000));
    timed.sync()?;
    let expired = timed.get(short, None)?;
    println!(
        "expired   {} status={} message={:?}",
        short, expired.status, expired.status_message
    );

    // Everything alice can see, one page at a time.
    let page = store.list(alice.as_ref(), None)?;
    println!(
        "alice lists {} task(s); next cursor: {:?}",
        page.tasks.len(),
        page.next_cursor
    );
    println!(
        "{}",
        serde_json::to_string_pretty(&page.tasks[0]).expect("serialise")
    );
    Ok(())
}
