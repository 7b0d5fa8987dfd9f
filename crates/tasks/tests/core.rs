//! The task core on real Postgres: creation and its validation errors, admission, control
//! transitions, reads, and owner isolation (another key's task is not found).

use browserd_store::{EventHub, QuotaOverrides, QuotaUpdate, Quotas, Store};
use browserd_tasks::{Caller, ModelCatalog, Placement, TaskCore, TaskError, TaskSettings};
use browserd_types::dto::{CreateTaskRequest, TaskView};
use browserd_types::{TaskId, TaskStatus, Transition};
use sqlx::PgPool;

fn settings() -> TaskSettings {
    TaskSettings {
        models: ModelCatalog::new(["m".to_owned(), "n".to_owned()], Some("m".to_owned())).unwrap(),
        proxies: vec!["corp".to_owned()],
        max_queued_tasks: None,
    }
}

struct Fixture {
    core: TaskCore,
    alice: Caller,
    bob: Caller,
}

async fn fixture(pool: PgPool, settings: TaskSettings) -> Fixture {
    let store = Store::from_pool(pool);
    let alice = store.create_api_key("alice").await.unwrap().record.id;
    let bob = store
        .create_api_key_with_quotas(
            "bob",
            QuotaOverrides {
                max_queued: Some(1),
                ..QuotaOverrides::default()
            },
        )
        .await
        .unwrap()
        .record
        .id;
    Fixture {
        core: TaskCore::with_settings(store, EventHub::default(), settings),
        alice: Caller::key(alice),
        bob: Caller::key(bob),
    }
}

fn request(task: &str) -> CreateTaskRequest {
    CreateTaskRequest {
        task: Some(task.to_owned()),
        ..CreateTaskRequest::default()
    }
}

async fn create(
    f: &Fixture,
    caller: &Caller,
    req: CreateTaskRequest,
) -> Result<TaskView, TaskError> {
    f.core
        .tasks()
        .create(caller, req, None, Placement::Queue)
        .await
        .map(|created| created.view)
}

fn field_of(err: &TaskError) -> Option<&str> {
    match err {
        TaskError::Validation { field, .. } => field.as_deref(),
        _ => None,
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn create_fills_defaults_and_refuses_invalid_fields(pool: PgPool) {
    let f = fixture(pool, settings()).await;
    let view = create(&f, &f.alice, request("find the docs"))
        .await
        .unwrap();
    assert_eq!(view.status, TaskStatus::Queued);
    assert_eq!(view.task, "find the docs");
    assert_eq!(view.queue_position, Some(1));

    let empty = create(&f, &f.alice, request("   ")).await.unwrap_err();
    assert_eq!(empty.code(), "validation_failed");
    assert_eq!(field_of(&empty), Some("task"));
    assert_eq!(empty.to_string(), "task must not be empty");

    let model = create(
        &f,
        &f.alice,
        CreateTaskRequest {
            model: Some("gpt-nope".to_owned()),
            ..request("t")
        },
    )
    .await
    .unwrap_err();
    assert_eq!(field_of(&model), Some("model"));

    let proxy = create(
        &f,
        &f.alice,
        CreateTaskRequest {
            proxy: Some("home".to_owned()),
            ..request("t")
        },
    )
    .await
    .unwrap_err();
    assert_eq!(field_of(&proxy), Some("proxy"));
    assert_eq!(proxy.to_string(), "unknown proxy `home` (configured: corp)");

    // Secrets need the server's secrets key, which this core's store has none of.
    let secrets = create(
        &f,
        &f.alice,
        serde_json::from_value(serde_json::json!({
            "task": "log in",
            "allowed_domains": ["example.com"],
            "secrets": {"password": "hunter2"}
        }))
        .unwrap(),
    )
    .await
    .unwrap_err();
    assert_eq!(field_of(&secrets), Some("secrets"));
    assert!(!secrets.to_string().contains("hunter2"));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn admission_applies_the_keys_quota_and_the_machines_queue_cap(pool: PgPool) {
    let f = fixture(
        pool,
        TaskSettings {
            max_queued_tasks: Some(2),
            ..settings()
        },
    )
    .await;
    create(&f, &f.bob, request("one")).await.unwrap();
    let refused = create(&f, &f.bob, request("two")).await.unwrap_err();
    match &refused {
        TaskError::QuotaExceeded { quota, .. } => assert_eq!(*quota, "max_queued"),
        other => panic!("expected a quota refusal, got {other:?}"),
    }
    assert!(
        refused
            .to_string()
            .contains("this key has 1 queued tasks, its quota `max_queued` (1)"),
        "{refused}"
    );
    create(&f, &f.alice, request("a")).await.unwrap();
    let full = create(&f, &f.alice, request("b")).await.unwrap_err();
    assert_eq!(full.code(), "queue_full");
    assert!(matches!(full, TaskError::QueueFull { queued: 2, .. }));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn control_follows_the_status_machine(pool: PgPool) {
    let f = fixture(pool, settings()).await;
    let tasks = f.core.tasks();
    let id = create(&f, &f.alice, request("t")).await.unwrap().id;
    let paused = tasks
        .control(&f.alice, id, Transition::Pause)
        .await
        .unwrap();
    assert_eq!(paused.status, TaskStatus::Paused);
    let resumed = tasks
        .control(&f.alice, id, Transition::Resume)
        .await
        .unwrap();
    assert_eq!(resumed.status, TaskStatus::Queued);
    let stopped = tasks.control(&f.alice, id, Transition::Stop).await.unwrap();
    assert_eq!(stopped.status, TaskStatus::Stopped);
    let again = tasks
        .control(&f.alice, id, Transition::Pause)
        .await
        .unwrap_err();
    match again {
        TaskError::Conflict {
            code,
            message,
            current_status,
        } => {
            assert_eq!(code, "illegal_transition");
            assert_eq!(message, "cannot pause a task that is stopped");
            assert_eq!(current_status, Some(TaskStatus::Stopped));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // An answer needs a waiting task.
    let answer = tasks
        .answer(
            &f.alice,
            id,
            serde_json::from_value(serde_json::json!({"answer": "yes"})).unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(answer.code(), "not_waiting");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn reads_answer_the_callers_tasks(pool: PgPool) {
    let f = fixture(pool, settings()).await;
    let tasks = f.core.tasks();
    let first = create(&f, &f.alice, request("first")).await.unwrap().id;
    let second = create(&f, &f.alice, request("second")).await.unwrap().id;

    let got = tasks.get(&f.alice, second).await.unwrap();
    assert_eq!(got.task, "second");
    assert_eq!(got.queue_position, Some(2));

    let page = tasks.list(&f.alice, None, Some(1), None).await.unwrap();
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].id, second);
    let cursor = browserd_tasks::decode_cursor(page.next_cursor.as_deref().unwrap()).unwrap();
    let rest = tasks
        .list(&f.alice, None, Some(10), Some(cursor))
        .await
        .unwrap();
    assert_eq!(rest.items.iter().map(|t| t.id).collect::<Vec<_>>(), [first]);
    let bad_limit = tasks.list(&f.alice, None, Some(0), None).await.unwrap_err();
    assert_eq!(field_of(&bad_limit), Some("limit"));
    let bad_cursor = browserd_tasks::decode_cursor("nope").unwrap_err();
    assert_eq!(field_of(&bad_cursor), Some("cursor"));

    let steps = tasks.steps(&f.alice, first, None, None).await.unwrap();
    assert!(steps.items.is_empty());
    assert_eq!(steps.next_after_step, None);
    let shot = tasks.screenshot(&f.alice, first, 1).await.unwrap_err();
    assert_eq!(shot.code(), "screenshot_not_found");
    let report = tasks.replay_report(&f.alice, first).await.unwrap_err();
    assert_eq!(report.code(), "not_a_replay");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn another_keys_task_is_not_found(pool: PgPool) {
    let f = fixture(pool, settings()).await;
    let tasks = f.core.tasks();
    let id = create(&f, &f.alice, request("mine")).await.unwrap().id;
    let missing = TaskId::new();

    for target in [id, missing] {
        let get = tasks.get(&f.bob, target).await.unwrap_err();
        assert!(get.is_task_not_found(), "{get:?}");
        assert_eq!(get.to_string(), "task not found");
        let stop = tasks
            .control(&f.bob, target, Transition::Stop)
            .await
            .unwrap_err();
        assert!(stop.is_task_not_found(), "{stop:?}");
        let steps = tasks.steps(&f.bob, target, None, None).await.unwrap_err();
        assert!(steps.is_task_not_found());
        let shot = tasks.screenshot(&f.bob, target, 1).await.unwrap_err();
        assert!(shot.is_task_not_found());
    }
    assert!(
        tasks
            .list(&f.bob, None, None, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // A replay of another key's task: its source is not found either.
    let replay = create(
        &f,
        &f.bob,
        CreateTaskRequest {
            task: None,
            replay_of: Some(id),
            ..CreateTaskRequest::default()
        },
    )
    .await
    .unwrap_err();
    assert!(replay.is_task_not_found(), "{replay:?}");
    // Untouched for its owner.
    assert_eq!(
        tasks.get(&f.alice, id).await.unwrap().status,
        TaskStatus::Queued
    );
    // The core's server objects are per key too: bob sees none of alice's profiles, and
    // cannot delete her task.
    let profile = f
        .core
        .create_profile(f.alice.key_id, Some("work"), None)
        .await
        .unwrap();
    assert!(
        f.core
            .get_profile(f.bob.key_id, profile.id)
            .await
            .unwrap()
            .is_none()
    );
    let deleted = f.core.delete_task(f.bob.key_id, id).await.unwrap_err();
    assert!(deleted.is_task_not_found(), "{deleted:?}");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn key_selectors_are_refused_with_their_reason(pool: PgPool) {
    let f = fixture(pool, settings()).await;
    let unknown = f
        .core
        .revoke_api_key_matching(&uuid::Uuid::new_v4().to_string())
        .await
        .unwrap_err();
    assert_eq!(field_of(&unknown), Some("key"));
    assert!(unknown.to_string().contains("no key matches"), "{unknown}");
    let ambiguous = f.core.revoke_api_key_matching("bd_").await.unwrap_err();
    assert!(ambiguous.to_string().contains("prefix"), "{ambiguous}");
    assert_eq!(f.core.list_api_keys().await.unwrap().len(), 2);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn the_local_key_is_created_once_without_a_running_limit(pool: PgPool) {
    // The defaults hold every key to one running task, and the fair share is on.
    let store = Store::from_pool(pool)
        .with_default_quotas(Quotas {
            max_running: Some(1),
            max_queued: Some(1),
            ..Quotas::default()
        })
        .with_fair_share(true);
    let core = TaskCore::with_settings(store.clone(), EventHub::default(), settings());
    let key = core.local_api_key("mcp-local").await.unwrap();
    assert_eq!(core.local_api_key("mcp-local").await.unwrap(), key);
    let keys = core.list_api_keys().await.unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0].name, "mcp-local");
    // Three tasks queue and all three are claimed: no limit of the defaults applies.
    let caller = Caller::key(key);
    for n in 0..3 {
        core.tasks()
            .create(&caller, request(&format!("t{n}")), None, Placement::Queue)
            .await
            .unwrap();
    }
    for _ in 0..3 {
        let claimed = store
            .claim_task("w", std::time::Duration::from_secs(30))
            .await
            .unwrap();
        assert!(claimed.is_some());
    }
    // A key that lost its unlimited quotas gets them back; a revoked one is replaced.
    core.update_api_key_quotas(
        &key.0.to_string(),
        &QuotaUpdate {
            max_running: Some(Some(2)),
            ..QuotaUpdate::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(core.local_api_key("mcp-local").await.unwrap(), key);
    let quotas = core.key_quotas(key).await.unwrap();
    assert_eq!((quotas.max_running, quotas.max_queued), (None, None));
    core.revoke_api_key_matching(&key.0.to_string())
        .await
        .unwrap();
    assert_ne!(core.local_api_key("mcp-local").await.unwrap(), key);
}
