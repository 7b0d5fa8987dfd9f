//! Store behaviour against a real Postgres (one fresh database per test via `#[sqlx::test]`;
//! needs DATABASE_URL at run time).

use std::collections::BTreeMap;
use std::time::Duration;

use browserd_store::{
    ArtifactContent, EventHub, NewArtifact, NewStep, NewTask, QuotaOverrides, QuotaUpdate, Quotas,
    SecretsKeyring, Signal, StepWrite, Store, StoreError, TransitionDetails,
};
use browserd_types::{
    ApiKeyId, ArtifactId, EventBody, StepEvent, TaskId, TaskOptions, TaskSecrets, TaskStatus,
    Transition, event_kind,
};
use secrecy::ExposeSecret;
use secrecy::SecretString;
use serde_json::json;
use sqlx::PgPool;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

fn new_task(text: &str) -> NewTask {
    NewTask {
        task: text.to_owned(),
        options: TaskOptions::default(),
        secrets: TaskSecrets::unbound([("pw".to_owned(), SecretString::from("s3cr3t-value"))]),
        trace_context: None,
        replay: None,
    }
}

const TEST_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A store that can seal and open task secrets.
fn sealing_store(pool: PgPool) -> Store {
    Store::from_pool(pool).with_secrets_keyring(SecretsKeyring::from_base64(TEST_KEY, &[]).unwrap())
}

async fn key(store: &Store) -> ApiKeyId {
    store.create_api_key("test").await.unwrap().record.id
}

async fn secrets_present(store: &Store, id: TaskId) -> bool {
    sqlx::query_scalar::<_, bool>("select secrets_sealed is not null from tasks where id = $1")
        .bind(id.0)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn every_option_is_stored_and_read_back(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    // Every field differs from its default, so a column the store forgets shows.
    let options = TaskOptions::every_option_set();
    let with = store
        .create_task(
            owner,
            NewTask {
                options: options.clone(),
                ..new_task("every option")
            },
        )
        .await
        .unwrap();
    assert_eq!(with.options, options);
    let read = store.get_task(Some(owner), with.id).await.unwrap().unwrap();
    assert_eq!(read.options, options);
    let without = store.create_task(owner, new_task("default")).await.unwrap();
    let read = store
        .get_task(Some(owner), without.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.options, TaskOptions::default());
    assert_eq!(
        read.options.viewport, None,
        "no viewport = the worker's default"
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn api_keys_authenticate_by_hash_only(pool: PgPool) {
    let store = sealing_store(pool);
    let created = store.create_api_key("ci").await.unwrap();
    let key = secrecy::ExposeSecret::expose_secret(&created.key).to_owned();
    assert!(key.starts_with("bd_") && key.len() == 46, "{key}");
    let found = store.authenticate_api_key(&created.key).await.unwrap();
    assert_eq!(found.map(|k| k.id), Some(created.record.id));
    // Nothing in the table contains the key itself.
    let stored: String = sqlx::query_scalar("select row_to_json(k)::text from api_keys k")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(!stored.contains(&key[3..]), "key stored in clear: {stored}");
    let mut wrong = key.clone();
    wrong.pop();
    wrong.push(if key.ends_with('A') { 'B' } else { 'A' });
    assert!(
        store
            .authenticate_api_key(&wrong.into())
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.revoke_api_key(created.record.id).await.unwrap());
    assert!(
        store
            .authenticate_api_key(&created.key)
            .await
            .unwrap()
            .is_none()
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn tasks_are_scoped_to_their_key(pool: PgPool) {
    let store = sealing_store(pool);
    let (alice, bob) = (key(&store).await, key(&store).await);
    let task = store.create_task(alice, new_task("a")).await.unwrap();
    assert_eq!(task.status, TaskStatus::Queued);
    assert_eq!(task.last_event_seq, 1);
    assert!(
        store
            .get_task(Some(alice), task.id)
            .await
            .unwrap()
            .is_some()
    );
    assert!(store.get_task(Some(bob), task.id).await.unwrap().is_none());
    assert!(
        store
            .list_tasks(bob, None, 10, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(matches!(
        store
            .transition_task(Some(bob), task.id, Transition::Stop, Default::default())
            .await,
        Err(StoreError::TaskNotFound(_))
    ));
    assert!(matches!(
        store.delete_task(bob, task.id).await,
        Err(StoreError::TaskNotFound(_))
    ));
    let events = store.events_after(task.id, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].payload, json!({"status": "queued"}));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn status_machine_is_enforced_and_terminal_wipes_secrets(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    let go = |t| store.transition_task(Some(owner), id, t, TransitionDetails::default());

    assert_eq!(
        go(Transition::Pause).await.unwrap().status,
        TaskStatus::Paused
    );
    // Never started: resume goes back to the queue.
    assert_eq!(
        go(Transition::Resume).await.unwrap().status,
        TaskStatus::Queued
    );
    match go(Transition::Finish).await {
        Err(StoreError::IllegalTransition { current, .. }) => {
            assert_eq!(current, TaskStatus::Queued)
        }
        other => panic!("{other:?}"),
    }
    let running = store
        .claim_task("worker-1", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap()
        .record;
    assert_eq!(running.id, id);
    assert_eq!(running.status, TaskStatus::Running);
    assert!(running.started_at.is_some());
    assert_eq!(
        go(Transition::Pause).await.unwrap().status,
        TaskStatus::Paused
    );
    // Started: resume goes back to running.
    assert_eq!(
        go(Transition::Resume).await.unwrap().status,
        TaskStatus::Running
    );
    assert!(secrets_present(&store, id).await);

    let finished = store
        .transition_task(
            None,
            id,
            Transition::Finish,
            TransitionDetails {
                output: Some("42".into()),
                is_success: Some(true),
                error: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(finished.status, TaskStatus::Finished);
    assert!(finished.finished_at.is_some());
    assert!(!secrets_present(&store, id).await, "secrets must be wiped");
    for t in [
        Transition::Stop,
        Transition::Resume,
        Transition::Pause,
        Transition::Fail,
    ] {
        match go(t).await {
            Err(StoreError::IllegalTransition { current, .. }) => {
                assert_eq!(current, TaskStatus::Finished)
            }
            other => panic!("{t:?}: {other:?}"),
        }
    }
    let events = store.events_after(id, 0, 100).await.unwrap();
    let statuses: Vec<&str> = events
        .iter()
        .map(|e| e.payload["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        [
            "queued", "paused", "queued", "running", "paused", "running", "finished"
        ]
    );
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=7).collect::<Vec<_>>()
    );
    assert!(events.last().unwrap().is_final());
    assert_eq!(events.last().unwrap().payload["output"], "42");
    // Nothing may follow the final event.
    assert!(matches!(
        store.append_event(id, event_kind::LOG, json!({})).await,
        Err(StoreError::TaskEnded {
            status: TaskStatus::Finished,
            ..
        })
    ));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn concurrent_appends_get_unique_gap_free_seqs(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..25 {
                    store
                        .append_event(id, event_kind::LOG, json!({"writer": w, "i": i}))
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    let seqs: Vec<i64> = store
        .events_after(id, 0, 1000)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=101).collect::<Vec<_>>());
    assert!(matches!(
        store.append_event(id, event_kind::STATUS, json!({})).await,
        Err(StoreError::ReservedEventKind(_))
    ));
    assert!(matches!(
        store
            .append_event(TaskId::new(), event_kind::LOG, json!({}))
            .await,
        Err(StoreError::TaskNotFound(_))
    ));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn hub_signals_committed_events_and_deletion(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let shutdown = CancellationToken::new();
    let (hub, listener) = EventHub::start(&store, shutdown.clone()).await.unwrap();
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    let other = store.create_task(owner, new_task("u")).await.unwrap().id;
    let mut subscription = hub.subscribe(id);
    // The other task's events go up to seq 3; this task's next one is seq 2.
    for _ in 0..2 {
        store
            .append_event(other, event_kind::LOG, json!({}))
            .await
            .unwrap();
    }
    let appended = store
        .append_event(
            id,
            event_kind::LOG,
            json!({"message": "ünïcode: \"quoted\" : colon"}),
        )
        .await
        .unwrap();
    // The notification of the task's creation (seq 1) may come after the subscription, as
    // late as the listener delivers it; then the appended event, and nothing of the other.
    let signal = loop {
        let signal = tokio::time::timeout(Duration::from_secs(30), subscription.recv())
            .await
            .unwrap();
        if !matches!(signal, Some(Signal::Appended { seq: 1, .. })) {
            break signal;
        }
    };
    // The notification carries the event exactly as the table gives it back.
    let stored = store.events_after(id, 1, 10).await.unwrap();
    assert_eq!(stored, vec![appended]);
    assert_eq!(
        signal,
        Some(Signal::Appended {
            seq: 2,
            event: Some(std::sync::Arc::new(stored[0].clone()))
        }),
        "only this task's events, each carried whole"
    );
    // An event too large for a notification is announced by its seq alone.
    let large = store
        .append_event(id, event_kind::LOG, json!({"message": "x".repeat(9000)}))
        .await
        .unwrap();
    let signal = tokio::time::timeout(Duration::from_secs(30), subscription.recv())
        .await
        .unwrap();
    assert_eq!(
        signal,
        Some(Signal::Appended {
            seq: large.seq,
            event: None
        })
    );
    store.delete_task(owner, id).await.unwrap();
    let signal = tokio::time::timeout(Duration::from_secs(10), subscription.recv())
        .await
        .unwrap();
    assert_eq!(signal, Some(Signal::Deleted));
    assert_eq!(hub.watched_tasks(), 1);
    drop(subscription);
    assert_eq!(hub.watched_tasks(), 0);
    shutdown.cancel();
    listener.await.unwrap();
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn steps_artifacts_and_delete(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    let png = vec![0x89, b'P', b'N', b'G', 1, 2, 3];
    let artifact = store
        .insert_artifact(
            id,
            NewArtifact {
                kind: "screenshot",
                name: None,
                content_type: "image/png".into(),
                size_bytes: png.len() as i64,
                content: ArtifactContent::Inline(png.clone()),
            },
        )
        .await
        .unwrap();
    let now = OffsetDateTime::now_utc();
    let step = |number, screenshot| NewStep {
        number,
        url: Some("http://127.0.0.1/".into()),
        title: Some("t".into()),
        model_output: Some(json!({"memory": "m"})),
        results: json!([{"is_done": false}]),
        usage: None,
        screenshot,
        started_at: now,
        finished_at: now,
    };
    store
        .insert_step(id, step(1, Some(artifact)))
        .await
        .unwrap();
    store.insert_step(id, step(2, None)).await.unwrap();
    assert!(matches!(
        store.insert_step(id, step(2, None)).await,
        Err(StoreError::StepExists { number: 2, .. })
    ));
    let steps = store.list_steps(id).await.unwrap();
    assert_eq!(steps.iter().map(|s| s.number).collect::<Vec<_>>(), [1, 2]);
    let shot = store.step_screenshot(id, 1).await.unwrap().unwrap();
    assert_eq!(shot.content_type, "image/png");
    assert_eq!(shot.content, ArtifactContent::Inline(png));
    assert!(store.step_screenshot(id, 2).await.unwrap().is_none());
    let kinds: Vec<String> = store
        .events_after(id, 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        ["status", "step", "step"],
        "a failed insert announces nothing"
    );

    // Running tasks cannot be deleted; stopped ones can, with everything they own.
    store
        .transition_task(None, id, Transition::Start, Default::default())
        .await
        .unwrap();
    assert!(matches!(
        store.delete_task(owner, id).await,
        Err(StoreError::TaskActive {
            status: TaskStatus::Running,
            ..
        })
    ));
    store
        .transition_task(None, id, Transition::Stop, Default::default())
        .await
        .unwrap();
    store.delete_task(owner, id).await.unwrap();
    for table in ["tasks", "task_steps", "task_events", "artifacts"] {
        let count: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("select count(*) from {table}")))
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(count, 0, "{table}");
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn listing_pages_are_stable_across_inserts(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(
            store
                .create_task(owner, new_task(&format!("{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let first = store.list_tasks(owner, None, 3, None).await.unwrap();
    // Newer tasks must not shift the following pages.
    for i in 0..3 {
        store
            .create_task(owner, new_task(&format!("late {i}")))
            .await
            .unwrap();
    }
    let second = store
        .list_tasks(owner, None, 3, first.next_cursor)
        .await
        .unwrap();
    let third = store
        .list_tasks(owner, None, 3, second.next_cursor)
        .await
        .unwrap();
    assert!(third.next_cursor.is_none());
    let seen: Vec<TaskId> = [first.items, second.items, third.items]
        .concat()
        .into_iter()
        .map(|t| t.id)
        .collect();
    created.reverse();
    assert_eq!(seen, created);
}

// ---------------------------------------------------------------------------------------------
// Queue, leases, recovery

fn step_write(number: i32) -> StepWrite {
    let now = OffsetDateTime::now_utc();
    StepWrite {
        number,
        url: Some("http://127.0.0.1/".into()),
        title: Some("t".into()),
        model_output: None,
        results: json!([]),
        usage: None,
        record: json!({"metadata": {"step_number": number}}),
        screenshot: None,
        started_at: now,
        finished_at: now,
        task_usage: json!({"invocations": number}),
        event: StepEvent {
            number,
            url: Some("http://127.0.0.1/".into()),
            title: Some("t".into()),
            has_screenshot: false,
            screenshot_url: None,
            record: json!({"metadata": {"step_number": number}}),
        },
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn claims_go_in_creation_order_and_never_twice(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            store
                .create_task(owner, new_task(&format!("t{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    // Six concurrent claimers: every task exactly once.
    let claims = futures::future::join_all((0..8).map(|i| {
        let store = store.clone();
        async move {
            store
                .claim_task(&format!("w{i}"), Duration::from_secs(30))
                .await
                .unwrap()
        }
    }))
    .await;
    let mut claimed: Vec<_> = claims.into_iter().flatten().map(|c| c.record.id).collect();
    assert_eq!(claimed.len(), 6);
    claimed.sort_by_key(|id| id.0);
    claimed.dedup();
    assert_eq!(claimed.len(), 6);
    // In creation order for one claimer.
    let store2 = store.clone();
    let a = store2.create_task(owner, new_task("a")).await.unwrap().id;
    let b = store2.create_task(owner, new_task("b")).await.unwrap().id;
    let first = store
        .claim_task("w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.record.id, a);
    assert_eq!(first.record.attempts, 1);
    let opened: Vec<(Option<&str>, &str, &str)> = first
        .secrets
        .entries()
        .map(|(pattern, name, value)| (pattern, name, value.expose_secret()))
        .collect();
    assert_eq!(opened, [(None, "pw", "s3cr3t-value")]);
    let second = store
        .claim_task("w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.record.id, b);
    assert!(
        store
            .claim_task("w", Duration::from_secs(30))
            .await
            .unwrap()
            .is_none()
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn secrets_are_sealed_at_rest_and_refused_without_a_key(pool: PgPool) {
    let store = sealing_store(pool.clone());
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    let stored: Vec<u8> = sqlx::query_scalar("select secrets_sealed from tasks where id = $1")
        .bind(id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(!stored.windows(12).any(|w| w == b"s3cr3t-value"));
    let keyless = Store::from_pool(pool);
    assert!(matches!(
        keyless.create_task(owner, new_task("t")).await,
        Err(StoreError::NoSecretsKey)
    ));
    // A worker without the key claims the task but cannot open the secrets: it must fail it.
    let claimed = keyless
        .claim_task("w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert!(claimed.secrets.is_empty());
    assert!(claimed.secrets_error.unwrap().contains("secrets key"));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn leases_expire_into_the_queue_then_fail_after_the_last_attempt(pool: PgPool) {
    let store = sealing_store(pool.clone());
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    // A lease no machine outlives during the test; it is ended by moving its expiry into the
    // past, so what the reaper sees does not depend on how fast the steps between run.
    let lease = Duration::from_secs(60);
    let expire = || async {
        sqlx::query(
            "update tasks set lease_expires_at = now() - interval '1 second' where id = $1",
        )
        .bind(id.0)
        .execute(&pool)
        .await
        .unwrap();
    };
    store.claim_task("w1", lease).await.unwrap().unwrap();
    assert_eq!(
        store.renew_lease(id, "w1", lease).await.unwrap(),
        Some(TaskStatus::Running)
    );
    assert_eq!(
        store.renew_lease(id, "someone-else", lease).await.unwrap(),
        None
    );
    store.write_step(id, "w1", step_write(0)).await.unwrap();
    // Not expired yet: nothing to reap.
    assert!(store.reap_expired_leases(2).await.unwrap().is_empty());
    expire().await;
    let reaped = store.reap_expired_leases(2).await.unwrap();
    assert_eq!(reaped.len(), 1);
    assert_eq!(reaped[0].status, TaskStatus::Queued);
    // The zombie's late writes fail, and it no longer renews.
    assert!(matches!(
        store.write_step(id, "w1", step_write(1)).await,
        Err(StoreError::LeaseLost(_))
    ));
    assert_eq!(store.renew_lease(id, "w1", lease).await.unwrap(), None);
    // The second worker resumes; a step number is written once.
    let again = store.claim_task("w2", lease).await.unwrap().unwrap();
    assert_eq!(again.record.attempts, 2);
    assert_eq!(store.step_records(id).await.unwrap().len(), 1);
    assert!(matches!(
        store.write_step(id, "w2", step_write(0)).await,
        Err(StoreError::StepExists { number: 0, .. })
    ));
    store.write_step(id, "w2", step_write(1)).await.unwrap();
    expire().await;
    let reaped = store.reap_expired_leases(2).await.unwrap();
    assert_eq!(reaped[0].status, TaskStatus::Failed);
    let task = store.get_task(None, id).await.unwrap().unwrap();
    assert!(task.error.unwrap().contains("all 2 attempts"));
    assert!(!secrets_present(&store, id).await);
    assert_eq!(task.usage, Some(json!({"invocations": 1})));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn released_tasks_go_back_to_the_queue_and_paused_ones_resume_through_it(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    let lease = Duration::from_secs(30);
    store.claim_task("w1", lease).await.unwrap().unwrap();
    assert_eq!(
        store.release_task(id, "w1", "shutdown").await.unwrap(),
        Some(TaskStatus::Queued)
    );
    assert_eq!(store.queue_position(id).await.unwrap(), Some(1));
    store.claim_task("w2", lease).await.unwrap().unwrap();
    store
        .transition_task(Some(owner), id, Transition::Pause, Default::default())
        .await
        .unwrap();
    // Paused on a worker that shuts down: it stays paused, without an owner …
    assert_eq!(
        store.release_task(id, "w2", "shutdown").await.unwrap(),
        Some(TaskStatus::Paused)
    );
    // … and resuming puts it back in the queue for any worker.
    let resumed = store
        .transition_task(Some(owner), id, Transition::Resume, Default::default())
        .await
        .unwrap();
    assert_eq!(resumed.status, TaskStatus::Queued);
    // Only the lease holder may end a task.
    store.claim_task("w3", lease).await.unwrap().unwrap();
    assert!(matches!(
        store
            .transition_claimed_task("w2", id, Transition::Finish, Default::default())
            .await,
        Err(StoreError::LeaseLost(_))
    ));
    let done = store
        .transition_claimed_task("w3", id, Transition::Finish, Default::default())
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Finished);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn stale_secrets_fail_their_task(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    assert!(
        store
            .expire_stale_secrets(Duration::from_secs(3600))
            .await
            .unwrap()
            .is_empty()
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        store
            .expire_stale_secrets(Duration::from_secs(1))
            .await
            .unwrap(),
        [id]
    );
    let task = store.get_task(None, id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Failed);
    assert!(task.error.unwrap().contains("retention"));
    assert!(!secrets_present(&store, id).await);
}

/// The SQL of KEDA's PostgreSQL trigger in `deploy/base/worker-scaledobject.yaml` (the folded
/// `query: >-` block), read from the shipped file so that it can never drift from the schema.
fn keda_worker_query() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/base/worker-scaledobject.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines().skip_while(|l| l.trim() != "query: >-");
    let head = lines.next().expect("a `query: >-` block");
    let indent = head.len() - head.trim_start().len();
    lines
        .take_while(|l| l.len() - l.trim_start().len() > indent)
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn keda_worker_query_counts_the_tasks_that_need_a_worker(pool: PgPool) {
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let query = keda_worker_query();
    let count = || async {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(query.clone()))
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    assert_eq!(count().await, 0);
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(
            store
                .create_task(owner, new_task(&format!("{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    // Two claimed: one keeps running, one is paused by its client while its worker holds it.
    for _ in 0..2 {
        store
            .claim_task("worker-1", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
    }
    let go = |id, t| store.transition_task(Some(owner), id, t, TransitionDetails::default());
    assert_eq!(
        go(ids[1], Transition::Pause).await.unwrap().status,
        TaskStatus::Paused
    );
    // One queued task stopped: it needs nothing any more.
    assert_eq!(
        go(ids[3], Transition::Stop).await.unwrap().status,
        TaskStatus::Stopped
    );
    // queued 1 + running 1 + paused with a lease 1.
    assert_eq!(count().await, 3);
    // Waiting for a person's answer still holds the worker's slot.
    let question = browserd_store::NewQuestion {
        question_id: "s1a0".to_owned(),
        question: "Go on?".to_owned(),
        choices: Vec::new(),
        secret: false,
        timeout_s: 60,
    };
    store
        .ask_question(ids[0], "worker-1", &question)
        .await
        .unwrap();
    assert_eq!(count().await, 3);
    assert_eq!(
        store.key_usage(owner).await.unwrap().held,
        2,
        "waiting and paused-with-a-lease are held"
    );
    // A paused task that no worker holds (its worker handed it back) needs no slot.
    store
        .release_task(ids[1], "worker-1", "shutdown")
        .await
        .unwrap();
    assert_eq!(count().await, 2);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn the_schema_knows_exactly_the_task_statuses_and_their_webhook_names(pool: PgPool) {
    use browserd_types::v2::V2TaskStatus;
    // Every status of the enum is accepted by the tasks table's check, and nothing else.
    let definition: String = sqlx::query_scalar(
        "select pg_get_constraintdef(c.oid) from pg_constraint c
         join pg_class t on t.oid = c.conrelid
         where t.relname = 'tasks' and c.contype = 'c'
           and pg_get_constraintdef(c.oid) like '%status = ANY%'
           and pg_get_constraintdef(c.oid) not like '%secrets%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let mut in_schema: Vec<&str> = definition.split('\'').skip(1).step_by(2).collect();
    in_schema.sort_unstable();
    let mut in_enum: Vec<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
    in_enum.sort_unstable();
    assert_eq!(in_schema, in_enum, "{definition}");
    // The webhook outbox names a status change as the v2 API does (paused is no event).
    for status in TaskStatus::ALL {
        let event: Option<String> = sqlx::query_scalar("select browserd_webhook_event($1)")
            .bind(status.as_str())
            .fetch_one(&pool)
            .await
            .unwrap();
        let expected = match status {
            TaskStatus::Paused => None,
            TaskStatus::Waiting => Some(browserd_types::webhooks::WAITING_FOR_INPUT.to_owned()),
            _ => Some(V2TaskStatus::from(status).as_str().to_owned()),
        };
        assert_eq!(event, expected, "{status}");
        if let Some(event) = &event {
            assert!(browserd_types::webhooks::webhook_events().contains(&event.as_str()));
        }
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_feed_gives_every_event_once_in_order_then_the_end(pool: PgPool) {
    use browserd_store::{EventFeed, FeedItem};
    let store = sealing_store(pool);
    let owner = key(&store).await;
    let shutdown = CancellationToken::new();
    let (hub, _listener) = EventHub::start(&store, shutdown.clone()).await.unwrap();
    let id = store.create_task(owner, new_task("t")).await.unwrap().id;
    // Events before the feed starts (replayed from seq 1) and while it is read.
    for i in 0..3 {
        store
            .append_event(id, event_kind::LOG, json!({"i": i}))
            .await
            .unwrap();
    }
    let mut feed = EventFeed::follow(store.clone(), &hub, id, 0);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 3..250 {
                store
                    .append_event(id, event_kind::LOG, json!({"i": i}))
                    .await
                    .unwrap();
            }
            store
                .transition_task(
                    Some(owner),
                    id,
                    Transition::Stop,
                    TransitionDetails::default(),
                )
                .await
                .unwrap();
        })
    };
    let mut seqs = Vec::new();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(30), feed.next())
            .await
            .expect("the feed moves on")
            .unwrap();
        match item {
            FeedItem::Event(event) => {
                seqs.push(event.seq);
                if event.is_final() {
                    break;
                }
            }
            FeedItem::Resync => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    writer.await.unwrap();
    // The creation event (1), 250 logs, the stop: each once, in order.
    assert_eq!(seqs, (1..=252).collect::<Vec<_>>());
    assert_eq!(feed.next().await.unwrap(), FeedItem::Closed);

    // A task deleted while followed: its feed says so.
    let other = store.create_task(owner, new_task("u")).await.unwrap().id;
    let mut feed = EventFeed::follow(store.clone(), &hub, other, 1);
    store.delete_task(owner, other).await.unwrap();
    let item = tokio::time::timeout(Duration::from_secs(30), feed.next())
        .await
        .expect("a deleted task's feed ends")
        .unwrap();
    assert_eq!(item, FeedItem::Deleted);
    shutdown.cancel();
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn claims_take_turns_across_keys(pool: PgPool) {
    let store = sealing_store(pool);
    let flooder = key(&store).await;
    let other = key(&store).await;
    let mut flood = Vec::new();
    for i in 0..5 {
        flood.push(
            store
                .create_task(flooder, new_task(&format!("a{i}")))
                .await
                .unwrap()
                .id,
        );
    }
    let late = store.create_task(other, new_task("b")).await.unwrap().id;
    let claim = || async {
        store
            .claim_task("w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap()
            .record
            .id
    };
    // Both keys have nothing running: the older task first; then the other key's, which has
    // nothing running, before the flooder's second.
    assert_eq!(claim().await, flood[0]);
    assert_eq!(claim().await, late);
    assert_eq!(claim().await, flood[1]);
    // The flooder alone: its tasks in creation order.
    assert_eq!(claim().await, flood[2]);
}

fn plain_task(text: &str) -> NewTask {
    NewTask {
        secrets: Default::default(),
        ..new_task(text)
    }
}

async fn key_with(store: &Store, max_running: Option<i64>) -> ApiKeyId {
    let own = QuotaOverrides {
        max_running,
        ..QuotaOverrides::default()
    };
    store
        .create_api_key_with_quotas("quota", own)
        .await
        .unwrap()
        .record
        .id
}

/// Running tasks per key, as one statement sees them.
async fn running_by_key(store: &Store) -> BTreeMap<uuid::Uuid, i64> {
    sqlx::query_as::<_, (uuid::Uuid, i64)>(
        "select api_key_id, count(*) from tasks where status = 'running' group by api_key_id",
    )
    .fetch_all(store.pool())
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// The trigger-kept counter of held tasks per key.
async fn held_counters(store: &Store) -> BTreeMap<uuid::Uuid, i64> {
    sqlx::query_as::<_, (uuid::Uuid, i32)>("select api_key_id, held from api_key_held_tasks")
        .fetch_all(store.pool())
        .await
        .unwrap()
        .into_iter()
        .map(|(key, held)| (key, i64::from(held)))
        .collect()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn concurrent_claims_never_take_a_key_over_its_max_running(pool: PgPool) {
    // Default max_running 3; one key overrides it with 1, one with 0 (unlimited).
    let store = Store::from_pool(pool).with_default_quotas(Quotas {
        max_running: Some(3),
        ..Quotas::default()
    });
    let limited = key_with(&store, None).await;
    let tight = key_with(&store, Some(1)).await;
    let free = key_with(&store, Some(0)).await;
    // The quotas of the churn below (the tight key's raised to 2 by then).
    let quota = |key: uuid::Uuid| match key {
        k if k == limited.0 => 3,
        k if k == tight.0 => 2,
        _ => i64::MAX,
    };
    for i in 0..5 {
        for owner in [limited, tight, free] {
            store
                .create_task(owner, plain_task(&format!("t{i}")))
                .await
                .unwrap();
        }
    }
    let claim_all = |n: usize, prefix: &'static str| {
        let store = store.clone();
        async move {
            futures::future::join_all((0..n).map(|i| {
                let store = store.clone();
                async move {
                    store
                        .claim_task(&format!("{prefix}{i}"), Duration::from_secs(60))
                        .await
                        .unwrap()
                }
            }))
            .await
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
        }
    };
    // Eight claimers at once: 9 tasks are claimable (1 + 3 + 5), so each gets one, and the
    // limited keys' quotas leave the rest to the unlimited key.
    let first = claim_all(8, "a").await;
    assert_eq!(first.len(), 8, "every claimer got a task");
    let running = running_by_key(&store).await;
    assert!(
        running.get(&tight.0).copied().unwrap_or(0) <= 1,
        "{running:?}"
    );
    assert!(
        running.get(&limited.0).copied().unwrap_or(0) <= 3,
        "{running:?}"
    );
    assert!(
        running.get(&free.0).copied().unwrap_or(0) >= 4,
        "{running:?}"
    );
    assert_eq!(held_counters(&store).await, {
        let mut held = running.clone();
        for key in [limited, tight, free] {
            held.entry(key.0).or_insert(0);
        }
        held
    });
    // Whatever is left claimable goes; then only tasks of keys at their quota are queued.
    let rest = claim_all(8, "b").await;
    assert_eq!(first.len() + rest.len(), 9);
    let running = running_by_key(&store).await;
    assert_eq!(running[&tight.0], 1);
    assert_eq!(running[&limited.0], 3);
    assert_eq!(running[&free.0], 5);
    assert!(
        store
            .claim_task("c", Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
    // The tight key's task ends: its next one is claimable at once.
    let tight_task = first
        .iter()
        .chain(&rest)
        .find(|c| c.record.api_key_id == tight)
        .unwrap();
    let holder = tight_task.record.lease_owner.clone().unwrap();
    store
        .transition_claimed_task(
            &holder,
            tight_task.record.id,
            Transition::Finish,
            Default::default(),
        )
        .await
        .unwrap();
    let next = store
        .claim_task("c", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.record.api_key_id, tight);
    // A paused task keeps its worker's place: pausing the tight key's task frees nothing.
    store
        .transition_task(
            Some(tight),
            next.record.id,
            Transition::Pause,
            Default::default(),
        )
        .await
        .unwrap();
    assert!(
        store
            .claim_task("c", Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
    // Raising the key's quota takes effect at the next claim.
    let update = QuotaUpdate {
        max_running: Some(Some(2)),
        ..QuotaUpdate::default()
    };
    store
        .update_api_key_quotas(&tight.to_string(), &update)
        .await
        .unwrap();
    let raised = store
        .claim_task("c", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(raised.record.api_key_id, tight);

    // Churn: 8 claimers claim and finish until the queue is empty while a monitor reads the
    // running counts; no statement ever sees a key above its quota.
    for i in 0..40 {
        for owner in [limited, tight, free] {
            store
                .create_task(owner, plain_task(&format!("u{i}")))
                .await
                .unwrap();
        }
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let monitor = {
        let store = store.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut observations = 0u64;
            let mut peak: BTreeMap<uuid::Uuid, i64> = BTreeMap::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                for (key, n) in running_by_key(&store).await {
                    let top = peak.entry(key).or_insert(0);
                    *top = (*top).max(n);
                }
                observations += 1;
                tokio::task::yield_now().await;
            }
            (observations, peak)
        })
    };
    // Everything claimed so far ends first, so the churn starts from empty workers.
    for claimed in first.iter().chain(&rest).chain([&raised]) {
        let _ = store
            .transition_claimed_task(
                claimed.record.lease_owner.as_deref().unwrap(),
                claimed.record.id,
                Transition::Finish,
                Default::default(),
            )
            .await;
    }
    store
        .transition_task(
            Some(tight),
            next.record.id,
            Transition::Stop,
            Default::default(),
        )
        .await
        .unwrap();
    let queued = store.queued_tasks().await.unwrap();
    let claimers = (0..8).map(|i| {
        let store = store.clone();
        async move {
            let owner = format!("churn{i}");
            let mut finished = 0i64;
            loop {
                match store
                    .claim_task(&owner, Duration::from_secs(60))
                    .await
                    .unwrap()
                {
                    Some(claimed) => {
                        // Let the other claimers run while this one holds its task.
                        for _ in 0..3 {
                            tokio::task::yield_now().await;
                        }
                        store
                            .transition_claimed_task(
                                &owner,
                                claimed.record.id,
                                Transition::Finish,
                                Default::default(),
                            )
                            .await
                            .unwrap();
                        finished += 1;
                    }
                    None if store.queued_tasks().await.unwrap() == 0 => return finished,
                    // Only tasks of keys at their quota are left: their holders finish soon.
                    None => tokio::task::yield_now().await,
                }
            }
        }
    });
    let finished: Vec<i64> = futures::future::join_all(claimers).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (observations, peak) = monitor.await.unwrap();
    assert_eq!(finished.iter().sum::<i64>(), queued, "{finished:?}");
    assert!(observations > 0);
    for (key, top) in &peak {
        assert!(*top <= quota(*key), "key {key} had {top} running: {peak:?}");
    }
    // The counter is back to zero everywhere: it followed every claim and end.
    assert!(
        held_counters(&store).await.values().all(|held| *held == 0),
        "{:?}",
        held_counters(&store).await
    );
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn key_usage_counts_queued_held_and_todays_steps(pool: PgPool) {
    let store = Store::from_pool(pool).with_default_quotas(Quotas {
        max_queued: Some(10),
        ..Quotas::default()
    });
    let owner = key_with(&store, None).await;
    let other = key_with(&store, None).await;
    let a = store.create_task(owner, plain_task("a")).await.unwrap().id;
    store.create_task(owner, plain_task("b")).await.unwrap();
    store.create_task(other, plain_task("c")).await.unwrap();
    store
        .claim_task("w", Duration::from_secs(60))
        .await
        .unwrap();
    for number in 0..3 {
        store
            .insert_step(
                a,
                NewStep {
                    number,
                    url: None,
                    title: None,
                    model_output: None,
                    results: json!([]),
                    usage: Some(json!({"cost_usd": 0.25})),
                    screenshot: None,
                    started_at: OffsetDateTime::now_utc(),
                    finished_at: OffsetDateTime::now_utc(),
                },
            )
            .await
            .unwrap();
    }
    let usage = store.key_usage(owner).await.unwrap();
    assert_eq!(usage.queued, 1);
    assert_eq!(usage.held, 1);
    // Step 0 (the initial navigation) is not a model step.
    assert_eq!(usage.steps_today, 2);
    assert!((usage.cost_today_usd - 0.75).abs() < 1e-9, "{usage:?}");
    let quotas = store.key_quotas(owner).await.unwrap();
    assert_eq!(quotas.max_queued, Some(10));
    assert_eq!(store.key_usage(other).await.unwrap().steps_today, 0);
}

/// One operation of a status machine sequence.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// The task's owner (the api) applies a transition.
    User(Transition),
    /// Worker `w1` claims the next queued task.
    Claim,
    /// Worker `w1`, or `w2` (who holds no lease), applies a transition as lease holder.
    Worker(Transition),
    OtherWorker(Transition),
    /// Worker `w1` appends a log event, or writes step `n` (with a screenshot).
    Event,
    Step(i32),
    /// Worker `w1` asks question `id` (`ask_human`, choices `yes` and `no`).
    AskHuman(&'static str),
    /// The owner answers the open question: free text `42`, or a choice.
    AnswerText,
    AnswerChoice(&'static str),
}

/// What an operation answered, in the words of the sequences' expectations.
fn outcome<T>(result: Result<T, StoreError>, ok: impl FnOnce(T) -> String) -> String {
    match result {
        Ok(value) => ok(value),
        Err(StoreError::TaskNotFound(_)) => "not_found".to_owned(),
        Err(StoreError::IllegalTransition { current, .. }) => format!("illegal:{current}"),
        Err(StoreError::LeaseLost(_)) => "lease_lost".to_owned(),
        Err(StoreError::TaskEnded { status, .. }) => format!("ended:{status}"),
        Err(StoreError::StepExists { .. }) => "step_exists".to_owned(),
        Err(StoreError::NotWaiting { status, .. }) => format!("not_waiting:{status}"),
        Err(StoreError::ChoiceNotOffered { .. }) => "choice_not_offered".to_owned(),
        Err(other) => format!("error:{other}"),
    }
}

/// Applies `op` to task `id` of `store`.
async fn apply_op(store: &Store, owner: ApiKeyId, id: TaskId, op: Op) -> String {
    let status = |t: browserd_store::TaskRecord| t.status.to_string();
    let details = || TransitionDetails {
        output: Some("out".to_owned()),
        is_success: Some(true),
        error: None,
    };
    match op {
        Op::User(transition) => outcome(
            store
                .transition_task(Some(owner), id, transition, TransitionDetails::default())
                .await,
            status,
        ),
        Op::Claim => outcome(
            store.claim_task("w1", Duration::from_secs(60)).await,
            |claimed| match claimed {
                Some(claimed) if claimed.record.id == id => {
                    format!("{}#{}", claimed.record.status, claimed.record.attempts)
                }
                Some(_) => "another task".to_owned(),
                None => "none".to_owned(),
            },
        ),
        Op::Worker(transition) => outcome(
            store
                .transition_claimed_task("w1", id, transition, details())
                .await,
            status,
        ),
        Op::OtherWorker(transition) => outcome(
            store
                .transition_claimed_task("w2", id, transition, details())
                .await,
            status,
        ),
        Op::Event => outcome(
            store
                .append_worker_event(
                    id,
                    "w1",
                    &EventBody::Log(browserd_types::LogEvent {
                        level: "info".to_owned(),
                        message: "hello".to_owned(),
                    }),
                )
                .await,
            |event| format!("seq {}", event.seq),
        ),
        Op::Step(number) => {
            let mut write = step_write(number);
            write.screenshot = Some((ArtifactId::new(), "image/png".to_owned(), vec![1, 2, 3]));
            write.model_output = Some(json!({"next_goal": "on"}));
            outcome(store.write_step(id, "w1", write).await, |event| {
                format!("seq {}", event.seq)
            })
        }
        Op::AskHuman(question_id) => {
            let question = browserd_store::NewQuestion {
                question_id: question_id.to_owned(),
                question: "Go on?".to_owned(),
                choices: vec!["yes".to_owned(), "no".to_owned()],
                secret: false,
                timeout_s: 60,
            };
            match store.ask_question(id, "w1", &question).await {
                Ok(browserd_store::Asked::Waiting) => {
                    let task = store.get_task(None, id).await.unwrap().unwrap();
                    task.status.to_string()
                }
                Ok(browserd_store::Asked::Answered(answer)) => {
                    use secrecy::ExposeSecret;
                    format!("answered:{}", answer.text.expose_secret())
                }
                Err(err) => outcome::<()>(Err(err), |()| String::new()),
            }
        }
        Op::AnswerText | Op::AnswerChoice(_) => {
            let (text, is_choice) = match op {
                Op::AnswerChoice(choice) => (choice, true),
                _ => ("42", false),
            };
            let answer = browserd_store::GivenAnswer {
                text: text.to_owned().into(),
                is_choice,
                secret: false,
            };
            outcome(
                store.answer_question(Some(owner), id, &answer).await,
                |answered| answered.task.status.to_string(),
            )
        }
    }
}

/// The status machine answers every sequence of user, worker and question operations as
/// expected, and each task's event log stays whole (numbered 1 to its last sequence number).
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn the_status_machine_answers_every_sequence(pool: PgPool) {
    use Op::*;
    use Transition::*;
    let store = Store::from_pool(pool);
    let owner = key(&store).await;
    let sequences: Vec<Vec<(Op, &str)>> = vec![
        // Paused before it started: resumed back into the queue; paused on a worker: resumed
        // to running; ended: nothing more.
        vec![
            (User(Pause), "paused"),
            (User(Resume), "queued"),
            (Claim, "running#1"),
            (User(Pause), "paused"),
            (User(Resume), "running"),
            (Worker(Finish), "finished"),
            (User(Stop), "illegal:finished"),
            (User(Resume), "illegal:finished"),
            (Event, "lease_lost"),
            (Claim, "none"),
        ],
        // Stopped while running: the worker's lease is gone with it.
        vec![
            (Claim, "running#1"),
            (Event, "seq 3"),
            (User(Stop), "stopped"),
            (Worker(Fail), "lease_lost"),
            (Step(1), "lease_lost"),
            (Event, "lease_lost"),
        ],
        // Only the lease holder writes; a step number is written once.
        vec![
            (Worker(Finish), "lease_lost"),
            (User(Finish), "illegal:queued"),
            (Claim, "running#1"),
            (OtherWorker(Finish), "lease_lost"),
            (Step(1), "seq 3"),
            (Step(1), "step_exists"),
            (Step(2), "seq 4"),
            (Event, "seq 5"),
            (User(Pause), "paused"),
            // A pause that arrives as the agent calls done: finished.
            (Worker(Finish), "finished"),
        ],
        // Requeued after a lost worker: claimed again; a requeued task paused and resumed
        // goes back to the queue (no worker holds it).
        vec![
            (Claim, "running#1"),
            (User(Requeue), "queued"),
            (User(Pause), "paused"),
            (User(Resume), "queued"),
            (Claim, "running#2"),
            (User(Resume), "illegal:running"),
            (User(Requeue), "queued"),
            (User(Requeue), "illegal:queued"),
            (Claim, "running#3"),
            (Worker(Fail), "failed"),
            (Worker(Fail), "lease_lost"),
            (User(Fail), "illegal:failed"),
        ],
        // Stopped in the queue: never claimed.
        vec![
            (User(Stop), "stopped"),
            (User(Resume), "illegal:stopped"),
            (User(Pause), "illegal:stopped"),
            (Claim, "none"),
        ],
        // Failed while paused on a worker.
        vec![
            (Claim, "running#1"),
            (User(Pause), "paused"),
            (User(Pause), "illegal:paused"),
            (Worker(Fail), "failed"),
        ],
        // Ask a human: waiting until answered (a choice offered), asked again once answered:
        // the answer; stopped while waiting.
        vec![
            (Claim, "running#1"),
            (AnswerText, "not_waiting:running"),
            (AskHuman("s1a0"), "waiting"),
            (User(Pause), "illegal:waiting"),
            (Worker(Finish), "illegal:waiting"),
            (AnswerChoice("maybe"), "choice_not_offered"),
            (AnswerChoice("yes"), "running"),
            (AnswerText, "not_waiting:running"),
            (AskHuman("s1a0"), "answered:yes"),
            (AskHuman("s2a0"), "waiting"),
            (OtherWorker(Fail), "lease_lost"),
            (User(Stop), "stopped"),
            (AnswerText, "not_waiting:stopped"),
        ],
        // The worker lost while waiting: requeued, answered meanwhile, and the next worker's
        // agent, asking again, gets the answer; a question nobody answers fails the task.
        vec![
            (Claim, "running#1"),
            (AskHuman("s1a0"), "waiting"),
            (User(Requeue), "queued"),
            (AnswerText, "queued"),
            (Claim, "running#2"),
            (AskHuman("s1a0"), "answered:42"),
            (AskHuman("s2a0"), "waiting"),
            (Worker(Fail), "failed"),
            (AskHuman("s3a0"), "lease_lost"),
        ],
    ];
    for (number, sequence) in sequences.iter().enumerate() {
        let new = NewTask {
            secrets: Default::default(),
            ..new_task(&format!("sequence {number}"))
        };
        let id = store.create_task(owner, new).await.unwrap().id;
        for (op, expected) in sequence {
            let got = apply_op(&store, owner, id, *op).await;
            assert_eq!(&got, expected, "sequence {number}: {op:?}");
        }
        let task = store.get_task(Some(owner), id).await.unwrap().unwrap();
        let seqs: Vec<i64> = store
            .events_after(id, 0, 1000)
            .await
            .unwrap()
            .iter()
            .map(|event| event.seq)
            .collect();
        assert_eq!(seqs, (1..=task.last_event_seq).collect::<Vec<_>>());
        // Leave nothing queued for the next sequence's claims.
        let _ = store
            .transition_task(None, id, Stop, TransitionDetails::default())
            .await;
    }
    // Another key's task does not exist for it.
    let stranger = ApiKeyId::new();
    let id = store.list_tasks(owner, None, 1, None).await.unwrap().items[0].id;
    assert_eq!(
        apply_op(&store, stranger, id, User(Stop)).await,
        "not_found"
    );
    assert_eq!(store.get_task(Some(stranger), id).await.unwrap(), None);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn by_default_a_key_holds_at_most_half_the_live_workers_slots(pool: PgPool) {
    // No configured max_running: the fair share (`--max-running-per-key auto`).
    let store = Store::from_pool(pool).with_fair_share(true);
    let flood = key_with(&store, None).await;
    let other = key_with(&store, None).await;
    let unlimited = key_with(&store, Some(0)).await;
    // One worker of 4 slots: half is 2.
    store
        .register_worker_slots("w1", 4, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(store.worker_slots().await.unwrap(), (4, 2));
    for i in 0..4 {
        store
            .create_task(flood, plain_task(&format!("flood {i}")))
            .await
            .unwrap();
    }
    let claim = || store.claim_task("w1", Duration::from_secs(60));
    assert!(claim().await.unwrap().is_some());
    assert!(claim().await.unwrap().is_some());
    // The flood's other tasks wait although slots are free…
    assert!(claim().await.unwrap().is_none());
    assert_eq!(running_by_key(&store).await.get(&flood.0), Some(&2));
    // …and another key's task runs beside them.
    let late = store.create_task(other, plain_task("late")).await.unwrap();
    let claimed = claim().await.unwrap().expect("the other key's task");
    assert_eq!(claimed.record.id, late.id);
    assert!(claim().await.unwrap().is_none());

    // A second worker's slots raise the share (8 slots: 4 per key).
    store
        .register_worker_slots("w2", 4, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(store.worker_slots().await.unwrap(), (8, 4));
    assert!(claim().await.unwrap().is_some());
    assert!(claim().await.unwrap().is_some());
    assert!(claim().await.unwrap().is_none());
    assert_eq!(running_by_key(&store).await.get(&flood.0), Some(&4));

    // A worker that stopped refreshing stops counting: back to 2 for new claims.
    store
        .register_worker_slots("w2", 4, Duration::ZERO)
        .await
        .unwrap();
    store.remove_worker_slots("w1").await.unwrap();
    assert_eq!(store.worker_slots().await.unwrap(), (0, 1));
    store
        .register_worker_slots("w1", 2, Duration::from_secs(60))
        .await
        .unwrap();
    store
        .create_task(other, plain_task("second"))
        .await
        .unwrap();
    assert!(
        claim().await.unwrap().is_none(),
        "the other key holds its one"
    );

    // A key's own setting wins: 0 is unlimited.
    for i in 0..3 {
        store
            .create_task(unlimited, plain_task(&format!("own {i}")))
            .await
            .unwrap();
    }
    for _ in 0..3 {
        assert_eq!(
            claim().await.unwrap().map(|c| c.record.api_key_id),
            Some(unlimited)
        );
    }

    // Without the fair share (`--max-running-per-key 0`) nothing is held back.
    let store = store.with_fair_share(false);
    assert!(
        store
            .claim_task("w1", Duration::from_secs(60))
            .await
            .unwrap()
            .is_some()
    );
}

/// The `status` events of task `id`, newest last.
async fn status_payloads(store: &Store, id: TaskId) -> Vec<serde_json::Value> {
    sqlx::query_scalar(
        "select payload from task_events where task_id = $1 and kind = 'status' order by seq",
    )
    .bind(id.0)
    .fetch_all(store.pool())
    .await
    .unwrap()
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_task_paused_past_the_limit_is_stopped_also_without_its_worker(pool: PgPool) {
    let store = Store::from_pool(pool);
    let owner = key_with(&store, None).await;
    let held = store.create_task(owner, plain_task("held")).await.unwrap();
    store
        .claim_task("gone", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    let fresh = store.create_task(owner, plain_task("fresh")).await.unwrap();
    let running = store
        .create_task(owner, plain_task("running"))
        .await
        .unwrap();
    for id in [held.id, fresh.id] {
        store
            .transition_task(
                Some(owner),
                id,
                Transition::Pause,
                TransitionDetails::default(),
            )
            .await
            .unwrap();
    }
    // `held` was paused an hour ago by a worker whose lease has since expired (it died);
    // `fresh` just now; `running` is not paused.
    sqlx::query(
        "update tasks set paused_at = now() - interval '1 hour',
             lease_expires_at = now() - interval '1 minute' where id = $1",
    )
    .bind(held.id.0)
    .execute(store.pool())
    .await
    .unwrap();
    assert_eq!(store.reap_expired_leases(3).await.unwrap().len(), 1);
    let max_pause = Duration::from_secs(1800);
    assert_eq!(
        store.stop_overlong_pauses(max_pause).await.unwrap(),
        vec![held.id]
    );
    let stopped = store.get_task(None, held.id).await.unwrap().unwrap();
    assert_eq!(stopped.status, TaskStatus::Stopped);
    let reason = browserd_store::pause_limit_error(max_pause);
    assert!(reason.contains("maximum pause time (1800 s"), "{reason}");
    assert_eq!(stopped.error.as_deref(), Some(reason.as_str()));
    assert!(stopped.lease_owner.is_none());
    let last = status_payloads(&store, held.id).await.pop().unwrap();
    assert_eq!(last["status"], "stopped", "{last}");
    assert_eq!(last["transition"], "stop", "{last}");
    assert_eq!(last["error"], json!(reason), "{last}");
    for id in [fresh.id, running.id] {
        let task = store.get_task(None, id).await.unwrap().unwrap();
        assert_ne!(task.status, TaskStatus::Stopped, "{id}");
    }
    // `paused_at` follows the status whatever changes it: a resume clears it.
    store
        .transition_task(
            Some(owner),
            fresh.id,
            Transition::Resume,
            TransitionDetails::default(),
        )
        .await
        .unwrap();
    let paused_at: Option<OffsetDateTime> =
        sqlx::query_scalar("select paused_at from tasks where id = $1")
            .bind(fresh.id.0)
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert!(paused_at.is_none());
}
