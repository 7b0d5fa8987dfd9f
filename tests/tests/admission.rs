//! Admission by pressure: a worker whose machine lacks the memory headroom it is configured to
//! need claims nothing and says why on `/metrics`; a worker with headroom on the same queue
//! runs the task.

use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{Process, Scenario, done_reply};
use serde_json::json;

/// `browserd_worker_admission_blocked{reason="…"}` in an exposition.
fn blocked(exposition: &str, reason: &str) -> Option<f64> {
    let name = format!("browserd_worker_admission_blocked{{reason=\"{reason}\"}} ");
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(&name))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_memory_headroom_claims_nothing_and_says_why() {
    // No machine has 100 TB available.
    let Scenario {
        site,
        model,
        db,
        server,
        client,
    } = Scenario::serve(
        Arc::new(|_page: &str| done_reply("read it", true)),
        Duration::from_millis(10),
        &["--min-available-memory-mb", "100000000"],
        &[],
    )
    .await;
    let id = client
        .create_task(json!({"task": "Read the page", "start_url": site.url("/stairs/1?top=1")}))
        .await;

    // The claim loop looks at its headroom before each claim; /metrics reports the refusal.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let exposition = client
            .http
            .get(format!("http://{}/metrics", server.metrics_address()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if blocked(&exposition, "memory") == Some(1.0) {
            assert_eq!(blocked(&exposition, "cpu"), Some(0.0), "{exposition}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no admission refusal on /metrics:\n{exposition}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        server.logs().contains("not claiming tasks"),
        "the refusal is logged"
    );
    assert_eq!(client.task(&id).await["status"], "queued");

    // A worker with headroom takes it.
    let worker = Process::start(&db, model.addr, "worker", &["--allow-loopback"]).await;
    let task = client
        .wait_status(&id, &["finished", "failed"], Duration::from_secs(60))
        .await;
    assert_eq!(task["status"], "finished", "{task}");
    assert!(
        !server.logs().contains("claimed task"),
        "the worker without headroom claimed the task"
    );
    worker.signal("TERM").await;
}
