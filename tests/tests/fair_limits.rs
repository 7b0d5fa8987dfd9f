//! The defaults that keep a shared install fair, end to end with the real binary, real
//! Postgres, Chromium and the mock model: one key holds at most half the workers' slots while
//! another key's task runs; a paused task past `--max-pause-s` is stopped with a clear reason
//! and frees its slot, also when the worker that held it died.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{Client, MockModel, Process, TestDb, create_key, reply};
use serde_json::json;

/// A model that keeps its tasks busy (waiting a second per step) until they are stopped.
async fn busy_model() -> MockModel {
    MockModel::start(
        Arc::new(|_page: &str| reply("keep watching", json!([{"wait": {"seconds": 1}}]))),
        Duration::from_millis(50),
    )
    .await
}

const LIMIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_one_key_holds_half_the_slots_and_another_keys_task_runs() {
    let db = TestDb::create().await;
    let model = busy_model().await;
    // The default, as shipped (the harness switches it off for the other tests).
    let server = Process::start_with_env(
        &db,
        model.addr,
        "serve",
        &["--concurrency", "2"],
        &[("BROWSERD_MAX_RUNNING_PER_KEY", "auto")],
    )
    .await;
    let flood = Client::new(server.address(), &create_key(&db).await);
    let other = Client::new(server.address(), &create_key(&db).await);
    let first = flood
        .create_task(json!({"task": "watch one", "max_steps": 10_000}))
        .await;
    let second = flood
        .create_task(json!({"task": "watch two", "max_steps": 10_000}))
        .await;
    flood.wait_status(&first, &["running"], LIMIT).await;
    // A step of the first task (a model call and a one-second wait) is ample time for the
    // worker's claim loop, which claims again at once while it has a free slot, to take the
    // second task if the key were allowed both slots.
    let mut events = flood.events(&first, 0).await;
    while events.next(LIMIT).await.expect("the first task's events")["kind"] != "step" {}
    let late = other
        .create_task(json!({"task": "watch three", "max_steps": 10_000}))
        .await;
    // The other key's task, created last, gets the second slot…
    other.wait_status(&late, &["running"], LIMIT).await;
    // …while the flooding key's second task waits for its first to end.
    let (first_now, second_now) = (flood.task(&first).await, flood.task(&second).await);
    assert_eq!(first_now["status"], "running", "{first_now}");
    assert_eq!(second_now["status"], "queued", "{second_now}");
    let (status, _) = flood
        .post(&format!("/v1/tasks/{first}/stop"), json!({}))
        .await;
    assert_eq!(status, 200);
    flood.wait_status(&second, &["running"], LIMIT).await;
    for (client, id) in [(&flood, &second), (&other, &late)] {
        client
            .post(&format!("/v1/tasks/{id}/stop"), json!({}))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_paused_too_long_is_stopped_and_frees_its_slot() {
    let db = TestDb::create().await;
    let model = busy_model().await;
    let server = Process::start(
        &db,
        model.addr,
        "serve",
        &["--concurrency", "1", "--max-pause-s", "2", "--lease-s", "2"],
    )
    .await;
    let client = Client::new(server.address(), &create_key(&db).await);
    let paused = client
        .create_task(json!({"task": "pause me", "max_steps": 10_000}))
        .await;
    client.wait_status(&paused, &["running"], LIMIT).await;
    let (status, _) = client
        .post(&format!("/v1/tasks/{paused}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    client.wait_status(&paused, &["paused"], LIMIT).await;
    // The paused task holds the worker's one slot: the next task waits for it.
    let next = client
        .create_task(json!({"task": "run next", "max_steps": 10_000}))
        .await;
    let task = client.wait_status(&paused, &["stopped"], LIMIT).await;
    assert!(
        task["error"]
            .as_str()
            .unwrap_or("")
            .contains("paused longer than the maximum pause time (2 s"),
        "{task}"
    );
    client.wait_status(&next, &["running"], LIMIT).await;
    client
        .post(&format!("/v1/tasks/{next}/stop"), json!({}))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_task_whose_worker_died_is_stopped_by_another_worker() {
    let db = TestDb::create().await;
    let model = busy_model().await;
    let api = Process::start(&db, model.addr, "api", &[]).await;
    let client = Client::new(api.address(), &create_key(&db).await);
    // The worker that runs and pauses the task has no pause limit, and dies.
    let mut lost = Process::start(
        &db,
        model.addr,
        "worker",
        &["--max-pause-s", "0", "--lease-s", "2"],
    )
    .await;
    let id = client
        .create_task(json!({"task": "pause me", "max_steps": 10_000}))
        .await;
    client.wait_status(&id, &["running"], LIMIT).await;
    let (status, _) = client
        .post(&format!("/v1/tasks/{id}/pause"), json!({}))
        .await;
    assert_eq!(status, 200);
    client.wait_status(&id, &["paused"], LIMIT).await;
    lost.signal("KILL").await;
    lost.wait(LIMIT).await;
    // Another worker, which never held the task, stops it from the time it paused.
    let _other = Process::start(
        &db,
        model.addr,
        "worker",
        &["--max-pause-s", "3", "--lease-s", "2"],
    )
    .await;
    let task = client.wait_status(&id, &["stopped"], LIMIT).await;
    assert!(
        task["error"]
            .as_str()
            .unwrap_or("")
            .contains("paused longer than the maximum pause time (3 s"),
        "{task}"
    );
    let mut events = client.events(&id, 0).await;
    let all = events.until_closed(LIMIT).await;
    let last = all.last().expect("events");
    assert_eq!(last["payload"]["status"], "stopped", "{last}");
    assert_eq!(last["payload"]["error"], task["error"], "{last}");
}
