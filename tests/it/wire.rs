//! The task as MCP 2025-11-25 puts it on the wire.

use mcp_task_store::{Task, TaskId, TaskStatus, Timestamp};
use serde_json::json;

fn task() -> Task {
    Task {
        task_id: TaskId::from_u128(0x5c1e_0000_0000_4000_8000_0000_0000_0001),
        status: TaskStatus::InputRequired,
        status_message: None,
        created_at: Timestamp(1_764_066_600_000),
        last_updated_at: Timestamp(1_764_066_660_123),
        ttl: None,
        poll_interval: None,
    }
}

#[test]
fn task_serialises_in_camel_case_with_ttl_always_present() {
    assert_eq!(
        serde_json::to_value(task()).unwrap(),
        json!({
            "taskId": "5c1e0000-0000-4000-8000-000000000001",
            "status": "input_required",
            "createdAt": "2025-11-25T10:30:00.000Z",
            "lastUpdatedAt": "2025-11-25T10:31:00.123Z",
            "ttl": null,
        })
    );
}

#[test]
fn optional_fields_appear_when_set_and_round_trip() {
    let mut full = task();
    full.status_message = Some("waiting".into());
    full.ttl = Some(60_000);
    full.poll_interval = Some(5_000);
    let value = serde_json::to_value(&full).unwrap();
    assert_eq!(value["statusMessage"], "waiting");
    assert_eq!(value["ttl"], 60_000);
    assert_eq!(value["pollInterval"], 5_000);
    assert_eq!(serde_json::from_value::<Task>(value).unwrap(), full);
}

#[test]
fn every_status_has_its_snake_case_wire_name() {
    let names: Vec<String> = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ]
    .iter()
    .map(|s| {
        serde_json::to_value(s)
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    })
    .collect();
    assert_eq!(
        names,
        [
            "working",
            "input_required",
            "completed",
            "failed",
            "cancelled"
        ]
    );
    assert!(serde_json::from_value::<TaskStatus>(json!("submitted")).is_err());
}

#[test]
fn task_ids_parse_only_from_uuids() {
    let id = TaskId::random();
    assert_eq!(TaskId::parse(&id.to_string()), Some(id));
    let simple = id.to_string().replace('-', "");
    assert_eq!(TaskId::parse(&simple), Some(id), "dashless form accepted");
    for bad in ["", "task-1", "../../etc", "5c1e", &"z".repeat(36)] {
        assert_eq!(TaskId::parse(bad), None, "{bad:?}");
    }
    assert!(serde_json::from_value::<TaskId>(json!(42)).is_err());
}

#[test]
fn random_ids_are_version_4_and_distinct() {
    let a = TaskId::random().to_string();
    let b = TaskId::random().to_string();
    assert_ne!(a, b);
    assert_eq!(a.as_bytes()[14], b'4', "UUID v4: {a}");
}

#[test]
fn timestamps_clamp_instead_of_failing_on_hostile_values() {
    assert_eq!(Timestamp(u64::MAX).to_string(), "9999-12-31T23:59:59.999Z");
    assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00.000Z");
}

/// SEP-2663 requires `result` on a completed task and `error` on a failed one; a task set
/// `completed` or `failed` by hand, with no outcome stored (the store contract allows it),
/// still renders a shape a client can read.
#[test]
fn a_task_ended_by_hand_without_an_outcome_still_renders_a_valid_sep2663_task() {
    use mcp_task_store::protocol::dispatch_tasks;
    use mcp_task_store::{CreateTask, Store, TaskStatus};
    let store = Store::builder().build().unwrap();
    let handle = store.handle();
    for (status, field) in [
        (TaskStatus::Completed, "result"),
        (TaskStatus::Failed, "error"),
    ] {
        let id = handle.create(CreateTask::new()).unwrap().task_id;
        handle.update_status(id, None, status, None).unwrap();
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
            "params": {"taskId": id.to_string(), "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities":
                    {"extensions": {"io.modelcontextprotocol/tasks": {}}}}}});
        let answer = dispatch_tasks(&handle, None, &request.to_string()).unwrap();
        let task = &answer["result"];
        assert_eq!(task["status"], status.to_string(), "{answer}");
        assert!(task[field].is_object(), "{field} missing: {answer}");
    }
}

#[test]
fn dispatch_tasks_refuses_a_protocol_version_it_does_not_speak() {
    use mcp_task_store::protocol::dispatch_tasks;
    use mcp_task_store::Store;
    let store = Store::builder().build().unwrap();
    let handle = store.handle();
    for (version, requested) in [
        (json!("1900-01-01"), "1900-01-01"),
        (json!("abc"), "abc"),
        // No string names no version at all: not taken for an absent one.
        (json!(20261128), "20261128"),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/list",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": version}}});
        let answer = dispatch_tasks(&handle, None, &request.to_string()).expect("an answer");
        assert_eq!(answer["error"]["code"], -32022, "{version}: {answer}");
        assert_eq!(answer["error"]["data"]["requested"], requested, "{answer}");
        let supported = answer["error"]["data"]["supported"].as_array().unwrap();
        assert!(supported.contains(&json!("2026-07-28")), "{answer}");
    }
    // A version it speaks is served.
    let request = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/list",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}}});
    let answer = dispatch_tasks(&handle, None, &request.to_string()).unwrap();
    assert_eq!(answer["result"]["tasks"], json!([]), "{answer}");
}

/// What a host with its own transport asks before it serves `tasks/result` on the thread
/// that read it: only a live task this session can see would block.
#[test]
fn result_would_block_only_for_a_live_task_the_session_can_see() {
    use mcp_task_store::protocol::v2025::result_would_block;
    use mcp_task_store::{CreateTask, SessionId, Store, TaskStatus};
    let store = Store::builder().build().unwrap();
    let handle = store.handle();
    let params = |id: TaskId| Some(json!({"taskId": id.to_string()}));
    let owner = SessionId::new("owner");
    let mut create = CreateTask::new();
    create.session = Some(owner.clone());
    let live = handle.create(create).unwrap().task_id;
    let ended = handle.create(CreateTask::new()).unwrap().task_id;
    handle
        .update_status(ended, None, TaskStatus::Completed, None)
        .unwrap();
    assert!(result_would_block(
        &handle,
        Some(&owner),
        params(live).as_ref()
    ));
    assert!(!result_would_block(&handle, None, params(ended).as_ref()));
    assert!(!result_would_block(
        &handle,
        None,
        params(TaskId::random()).as_ref()
    ));
    let stranger = SessionId::new("stranger");
    assert!(!result_would_block(
        &handle,
        Some(&stranger),
        params(live).as_ref()
    ));
    assert!(!result_would_block(
        &handle,
        None,
        Some(&json!({"taskId": 5}))
    ));
    assert!(!result_would_block(&handle, None, None));
}
