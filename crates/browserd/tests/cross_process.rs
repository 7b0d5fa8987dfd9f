//! The real `browserd` binary as a child process: events written by this (other) process reach
//! a WebSocket client of the child through Postgres LISTEN/NOTIFY; keys come from the CLI; the
//! database is created when missing. Needs DATABASE_URL (a server reachable with it).

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use browserd_store::{NewStep, Store};
use browserd_types::{TaskEvent, TaskId, Transition, event_kind};
use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

const BIN: &str = env!("CARGO_BIN_EXE_browserd");

/// DATABASE_URL with its database name replaced.
fn url_for(database: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL must be set for tests");
    browserd_tests::with_database(&base, database)
}

fn database_url(pool: &PgPool) -> String {
    url_for(
        pool.connect_options()
            .get_database()
            .expect("test database name"),
    )
}

async fn create_key(url: &str) -> String {
    browserd_tests::create_key_for(url).await
}

struct Server {
    child: Child,
    address: String,
    logs: Arc<Mutex<Vec<String>>>,
}

async fn start_server(url: &str) -> Server {
    // The api role alone: this test process plays the worker.
    let mut child = Command::new(BIN)
        .arg("api")
        .env("DATABASE_URL", url)
        .env(
            "BROWSERD_SECRETS_KEY",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        )
        .env("BROWSERD_LISTEN", "127.0.0.1:0")
        // Not the fixed default metrics port: tests run servers side by side.
        .env("BROWSERD_METRICS_LISTEN", "127.0.0.1:0")
        .env("BROWSERD_LOG_FORMAT", "json")
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let logs = Arc::new(Mutex::new(Vec::new()));
    let address = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            logs.lock().unwrap().push(line.clone());
            if let Ok(entry) = serde_json::from_str::<Value>(&line)
                && entry["message"] == "listening"
            {
                return entry["address"].as_str().unwrap().to_owned();
            }
        }
        panic!("server exited: {:?}", logs.lock().unwrap());
    })
    .await
    .expect("server listening within 60 s");
    let sink = logs.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    Server {
        child,
        address,
        logs,
    }
}

async fn next_event<S>(ws: &mut S) -> Option<TaskEvent>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("frame within 20 s")
        {
            Some(Ok(Message::Text(text))) => {
                return Some(serde_json::from_str(text.as_str()).unwrap());
            }
            Some(Ok(Message::Close(frame))) => {
                assert_eq!(frame.map(|f| f.code), Some(CloseCode::Normal));
                return None;
            }
            Some(Ok(_)) => {}
            other => panic!("unexpected: {other:?}"),
        }
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn events_from_another_process_reach_the_websocket(pool: PgPool) {
    let url = database_url(&pool);
    let key = create_key(&url).await;
    let mut server = start_server(&url).await;
    browserd_llm::install_tls_provider();
    let http = reqwest::Client::new();
    let secret = format!("pa55-{}", TaskId::new());

    let created: Value = http
        .post(format!("http://{}/v1/tasks", server.address))
        .bearer_auth(&key)
        .json(&json!({"task": "cross-process", "secrets": {"pw": secret}, "allowed_domains": ["example.com"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id: TaskId = created["id"].as_str().unwrap().parse().unwrap();

    let mut request = format!("ws://{}/v1/tasks/{id}/events", server.address)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {key}").parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(
        next_event(&mut ws).await.unwrap().seq,
        1,
        "replayed creation event"
    );

    // This test process plays the worker: it writes straight to Postgres.
    let store = Store::from_pool(pool.clone());
    store
        .transition_task(None, id, Transition::Start, Default::default())
        .await
        .unwrap();
    let mut expected = vec![(2, "status".to_owned())];
    for i in 0..3 {
        let event = store
            .append_event(id, event_kind::LOG, json!({"line": i}))
            .await
            .unwrap();
        expected.push((event.seq, event.kind));
    }
    let now = time::OffsetDateTime::now_utc();
    store
        .insert_step(
            id,
            NewStep {
                number: 1,
                url: Some("http://127.0.0.1/".into()),
                title: None,
                model_output: None,
                results: json!([]),
                usage: None,
                screenshot: None,
                started_at: now,
                finished_at: now,
            },
        )
        .await
        .unwrap();
    expected.push((6, "step".to_owned()));
    store
        .transition_task(
            None,
            id,
            Transition::Finish,
            browserd_store::TransitionDetails {
                output: Some("done".into()),
                is_success: Some(true),
                error: None,
            },
        )
        .await
        .unwrap();
    expected.push((7, "status".to_owned()));

    let mut received = Vec::new();
    while let Some(event) = next_event(&mut ws).await {
        received.push((event.seq, event.kind.clone()));
        if event.seq == 7 {
            assert_eq!(event.payload["status"], "finished");
            assert_eq!(event.payload["output"], "done");
        }
    }
    assert_eq!(
        received, expected,
        "closed normally right after the final event"
    );

    // Graceful shutdown on SIGTERM.
    let pid = server.child.id().unwrap().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(20), server.child.wait())
        .await
        .expect("exits within 20 s")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let logs = server.logs.lock().unwrap().join("\n");
    assert!(logs.contains("create task"), "debug logging was on");
    assert!(
        !logs.contains(&secret),
        "secret leaked into the server's logs"
    );
    assert!(
        !logs.contains(&key),
        "API key leaked into the server's logs"
    );
}

#[tokio::test]
async fn migrate_creates_a_missing_database() {
    let name = format!("browserd_cli_{}", TaskId::new().0.simple());
    let url = url_for(&name);
    let output = Command::new(BIN)
        .arg("migrate")
        .env("DATABASE_URL", &url)
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pool = PgPool::connect(&url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "select table_name::text from information_schema.tables
         where table_schema = 'public' and table_name not like '\\_sqlx%' order by 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "api_key_daily_usage",
            "api_key_held_tasks",
            "api_keys",
            "artifacts",
            "browser_sessions",
            "live_frames",
            "live_viewers",
            "profiles",
            "schedules",
            "skill_versions",
            "skills",
            "task_events",
            "task_output_files",
            "task_questions",
            "task_secret_inputs",
            "task_steps",
            "tasks",
            "webhook_deliveries",
            "webhooks",
            "worker_slots",
            "ws_tickets",
        ]
    );
    // Idempotent.
    let again = Command::new(BIN)
        .arg("migrate")
        .env("DATABASE_URL", &url)
        .status()
        .await
        .unwrap();
    assert!(again.success());
    pool.close().await;
    let admin = PgPool::connect(&url_for("postgres")).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "drop database if exists {name} with (force)"
    )))
    .execute(&admin)
    .await
    .unwrap();
}

#[tokio::test]
async fn cli_rejects_bad_input_without_panicking() {
    let output = Command::new(BIN)
        .args(["keys", "create", "--name", "  "])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--name"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let output = Command::new(BIN)
        .arg("serve")
        .env("BROWSERD_CONFIG", "/nonexistent/browserd.toml")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/browserd.toml"), "{stderr}");
}

/// `browserd keys …` against `url` with `env`: (success, stdout, stderr).
async fn keys_cli(url: &str, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let output = Command::new(BIN)
        .arg("keys")
        .args(args)
        .env("DATABASE_URL", url)
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The quota columns (running, queued, sockets, steps/day, USD/day) of `prefix`'s line of
/// `keys list`.
fn listed_quotas(list: &str, prefix: &str) -> Vec<String> {
    let line = list
        .lines()
        .find(|line| line.contains(prefix))
        .unwrap_or_else(|| panic!("{prefix} is not listed:\n{list}"));
    line.split_whitespace()
        .skip(4)
        .take(5)
        .map(str::to_owned)
        .collect()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn keys_create_update_and_list_their_quotas(pool: PgPool) {
    let url = database_url(&pool);
    let (ok, key, stderr) = keys_cli(
        &url,
        &[
            "create",
            "--name",
            "quota test",
            "--max-running",
            "2",
            "--max-queued",
            "50",
            "--daily-cost-usd",
            "1.5",
        ],
        &[],
    )
    .await;
    assert!(ok, "{stderr}");
    let prefix: String = key.trim().chars().take(11).collect();
    let defaults = [
        ("BROWSERD_MAX_RUNNING_PER_KEY", "4"),
        ("BROWSERD_DAILY_STEPS_PER_KEY", "100"),
    ];
    let (ok, list, stderr) = keys_cli(&url, &["list"], &defaults).await;
    assert!(ok, "{stderr}");
    assert!(
        list.contains("RUNNING") && list.contains("USD/DAY"),
        "{list}"
    );
    // `*`: the key's own; the rest are the defaults (flags, env, or built in: 20 sockets).
    assert_eq!(
        listed_quotas(&list, &prefix),
        ["2*", "50*", "20", "100", "1.5*"],
        "{list}"
    );

    let (ok, stdout, stderr) = keys_cli(
        &url,
        &[
            "update",
            &prefix,
            "--max-running",
            "default",
            "--max-websockets",
            "unlimited",
            "--daily-steps",
            "10",
        ],
        &defaults,
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("updated key"), "{stdout}");
    let (_, list, _) = keys_cli(&url, &["list"], &defaults).await;
    assert_eq!(
        listed_quotas(&list, &prefix),
        ["4", "50*", "unlimited*", "10*", "1.5*"],
        "{list}"
    );
    // What the store reads back: NULL for a default, 0 for unlimited.
    let store = Store::from_pool(pool.clone());
    let listed = store.list_api_keys().await.unwrap();
    let quotas = listed[0].quotas;
    assert_eq!(quotas.max_running, None);
    assert_eq!(quotas.max_queued, Some(50));
    assert_eq!(quotas.max_websockets, Some(0));
    assert_eq!(quotas.daily_steps, Some(10));
    assert_eq!(quotas.daily_cost_usd, Some(1.5));

    // Refusals say what is wrong, without a panic.
    for (args, says) in [
        (vec!["update", prefix.as_str()], "give at least one quota"),
        (
            vec!["update", "bd_nothing", "--max-queued", "1"],
            "no key matches",
        ),
        (
            vec!["update", prefix.as_str(), "--max-queued=-1"],
            "expected a whole number",
        ),
        (
            vec!["update", prefix.as_str(), "--daily-cost-usd", "lots"],
            "expected a number of dollars",
        ),
    ] {
        let (ok, _, stderr) = keys_cli(&url, &args, &[]).await;
        assert!(!ok, "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}
