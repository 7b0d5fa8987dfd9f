//! Schedules across real processes on one Postgres: every api process runs a scheduler (two
//! `serve` — api and worker — and one `api`), and a schedule firing every second creates
//! exactly one task per tick; with every process stopped for an hour of ticks and started
//! again, the missed ticks create one task; a disabled schedule creates none; a key past its
//! quota gets `last_error`, and the service goes on; bad input is a 422 naming the field.
//!
//! No assertion depends on machine speed: ticks are counted per `scheduled_for`, the down time
//! is made in the database (`next_run_at` an hour back), and "nothing fired" is judged after a
//! witness schedule was seen firing several ticks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use browserd_tests::{Client, MockModel, Process, TestDb, browserd_bin, create_key, done_reply};
use serde_json::{Value, json};
use sqlx::PgPool;
use time::OffsetDateTime;

const LONG: Duration = Duration::from_secs(90);

/// Polls `check` until it answers `Some`, for at most `limit` (a cap, not a pace).
async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ticks of `schedule` that created tasks, each with its number of tasks.
async fn tasks_per_tick(pool: &PgPool, schedule: &str) -> BTreeMap<OffsetDateTime, i64> {
    let rows: Vec<(OffsetDateTime, i64)> = sqlx::query_as(
        "select scheduled_for, count(*) from tasks where schedule_id = $1::uuid
         group by scheduled_for",
    )
    .bind(schedule)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter().collect()
}

fn assert_once_per_tick(ticks: &BTreeMap<OffsetDateTime, i64>) {
    for (tick, count) in ticks {
        assert_eq!(*count, 1, "tick {tick} created {count} tasks: {ticks:?}");
        assert_eq!(tick.nanosecond(), 0, "a tick is a whole second: {tick}");
    }
}

async fn start_all(db: &TestDb, model: &MockModel) -> Vec<Process> {
    let worker = ["--allow-loopback", "--concurrency", "2"];
    vec![
        Process::start(db, model.addr, "serve", &worker).await,
        Process::start(db, model.addr, "serve", &worker).await,
        Process::start(db, model.addr, "api", &[]).await,
    ]
}

async fn stop_all(processes: Vec<Process>) {
    for process in &processes {
        process.signal("TERM").await;
    }
    for mut process in processes {
        let logs = process.logs();
        assert_eq!(process.wait(LONG).await, Some(0), "{logs}");
        for failure in [
            "firing schedules failed",
            "schedule's tick failed",
            "panicked",
        ] {
            assert!(!logs.contains(failure), "{failure}:\n{logs}");
        }
    }
}

async fn schedule_every_second(client: &Client, name: &str) -> String {
    let (status, schedule) = client
        .post(
            "/v1/schedules",
            json!({
                "name": name,
                "cron": "* * * * * *",
                "time_zone": "Europe/Paris",
                "target": {"task": {"task": format!("{name}: report done"), "max_steps": 3}},
            }),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    schedule["id"].as_str().unwrap().to_owned()
}

/// A key with its own quotas, made with the CLI.
async fn create_key_with(db: &TestDb, quota: &[&str]) -> String {
    let output = tokio::process::Command::new(browserd_bin())
        .args(["keys", "create", "--name", "quota-test"])
        .args(quota)
        .env("DATABASE_URL", &db.url)
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tick_fires_once_across_processes_and_restarts() {
    let model = MockModel::start(
        Arc::new(|_page: &str| done_reply("done", true)),
        Duration::ZERO,
    )
    .await;
    let db = TestDb::create().await;
    let processes = start_all(&db, &model).await;
    let key = create_key(&db).await;
    let pool = db.pool().await;
    let api = |processes: &[Process], i: usize| Client::new(processes[i].address(), &key);
    let client = api(&processes, 2);
    let schedule = schedule_every_second(&client, "news").await;

    // Three schedulers race for every tick: each tick makes one task.
    eventually("five ticks fired", LONG, || async {
        (tasks_per_tick(&pool, &schedule).await.len() >= 5).then_some(())
    })
    .await;
    assert_once_per_tick(&tasks_per_tick(&pool, &schedule).await);
    // The tasks are tasks like any other: a worker runs them.
    let (_, runs) = client
        .get(&format!("/v1/schedules/{schedule}/runs?limit=100"))
        .await;
    let first = runs["items"].as_array().unwrap().last().unwrap().clone();
    let task = client
        .wait_status(first["task_id"].as_str().unwrap(), &["finished"], LONG)
        .await;
    assert_eq!(task["output"], "done", "{task}");
    stop_all(processes).await;

    // Everything down for an hour: 3 600 ticks missed.
    let at_stop = tasks_per_tick(&pool, &schedule).await;
    assert_once_per_tick(&at_stop);
    let (missed, restarted_at): (OffsetDateTime, OffsetDateTime) = sqlx::query_as(
        "update schedules set next_run_at = date_trunc('second', now()) - interval '1 hour'
         where id = $1::uuid returning next_run_at, now()",
    )
    .bind(&schedule)
    .fetch_one(&pool)
    .await
    .unwrap();
    let processes = start_all(&db, &model).await;
    let client = api(&processes, 0);
    eventually("three ticks after the restart", LONG, || async {
        (tasks_per_tick(&pool, &schedule).await.len() >= at_stop.len() + 4).then_some(())
    })
    .await;
    let after = tasks_per_tick(&pool, &schedule).await;
    assert_once_per_tick(&after);
    let caught_up: Vec<_> = after
        .keys()
        .filter(|tick| !at_stop.contains_key(tick) && **tick < restarted_at)
        .collect();
    assert_eq!(
        caught_up,
        vec![&missed],
        "the hour of missed ticks made one task, for its first tick: {after:?}"
    );
    assert!(
        after
            .keys()
            .all(|tick| at_stop.contains_key(tick) || *tick >= missed)
    );

    // Disabled: nothing more, while a witness schedule fires tick after tick.
    let (status, disabled) = client
        .patch(
            &format!("/v1/schedules/{schedule}"),
            json!({"enabled": false}),
        )
        .await;
    assert_eq!(status, 200, "{disabled}");
    assert_eq!(disabled["next_run_at"], Value::Null);
    let frozen = tasks_per_tick(&pool, &schedule).await.len();
    let witness = schedule_every_second(&client, "witness").await;
    eventually("the witness fired three ticks", LONG, || async {
        (tasks_per_tick(&pool, &witness).await.len() >= 3).then_some(())
    })
    .await;
    assert_eq!(tasks_per_tick(&pool, &schedule).await.len(), frozen);
    assert_once_per_tick(&tasks_per_tick(&pool, &witness).await);
    let (_, shown) = client.get(&format!("/v1/schedules/{schedule}")).await;
    assert_eq!(shown["enabled"], false);
    assert_eq!(shown["last_error"], Value::Null);
    let (status, _) = client.delete(&format!("/v1/schedules/{witness}")).await;
    assert_eq!(status, 204);
    stop_all(processes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_past_its_quota_gets_last_error_and_bad_input_gets_422() {
    let model = MockModel::start(
        Arc::new(|_page: &str| done_reply("done", true)),
        Duration::ZERO,
    )
    .await;
    let db = TestDb::create().await;
    let server = Process::start(&db, model.addr, "serve", &["--allow-loopback"]).await;
    // One step a day: the first tick's task takes it, the ticks after are refused.
    let key = create_key_with(&db, &["--daily-steps", "1"]).await;
    let client = Client::new(server.address(), &key);
    let schedule = schedule_every_second(&client, "daily").await;
    let error = eventually("a tick refused by the quota", LONG, || async {
        let (_, shown) = client.get(&format!("/v1/schedules/{schedule}")).await;
        shown["last_error"].as_str().map(str::to_owned)
    })
    .await;
    assert!(error.starts_with("quota_exceeded: "), "{error}");
    assert!(error.contains("daily_steps"), "{error}");
    // The refused ticks moved on; the service answers.
    let (status, runs) = client.get(&format!("/v1/schedules/{schedule}/runs")).await;
    assert_eq!(status, 200);
    assert!(!runs["items"].as_array().unwrap().is_empty(), "{runs}");
    let (_, shown) = client.get(&format!("/v1/schedules/{schedule}")).await;
    assert!(shown["next_run_at"].is_string(), "{shown}");

    for (body, field) in [
        (
            json!({"cron": "61 * * * *", "target": {"task": {"task": "t"}}}),
            "cron",
        ),
        (
            json!({"cron": "* * *", "target": {"task": {"task": "t"}}}),
            "cron",
        ),
        (
            json!({"cron": "0 9 * * *", "time_zone": "Mars/Olympus", "target": {"task": {"task": "t"}}}),
            "time_zone",
        ),
        (
            json!({"cron": "0 9 * * *", "target": {"task": {"task": "t", "model": "nope"}}}),
            "target.task.model",
        ),
        (
            json!({"cron": "0 9 * * *", "target": {"task": {"task": "t", "secrets": {"pw": "x"}}}}),
            "target.task.secrets",
        ),
        (
            json!({"cron": "0 9 * * *", "target": {"task": {"task": "t"}}, "name": ""}),
            "name",
        ),
    ] {
        let (status, answer) = client.post("/v1/schedules", body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        assert_eq!(answer["error"]["field"], field, "{body}: {answer}");
        assert!(
            !answer.to_string().contains("\"x\""),
            "no secret echoed: {answer}"
        );
    }
    // A malformed target (neither `task` nor `skill`) is refused by the body's parser.
    let (status, answer) = client
        .post(
            "/v1/schedules",
            json!({"cron": "0 9 * * *", "target": {"tasks": {}}}),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = client
        .patch(
            &format!("/v1/schedules/{schedule}"),
            json!({"cron": "0 0 30 2 *"}),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["field"], "cron");
    let mut server = server;
    server.signal("TERM").await;
    assert_eq!(server.wait(LONG).await, Some(0));
}
