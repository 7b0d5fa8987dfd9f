//! Schedules in the task core on real Postgres: a tick fires exactly once however many
//! firers race for it, a down time of many ticks fires once, a refused tick (the key's quota)
//! is recorded and skipped, a disabled schedule fires nothing, bad input names its field, and
//! another key's schedule is not found. (Whole processes: `tests/tests/schedules.rs`.)

use browserd_store::{EventHub, QuotaOverrides, Store};
use browserd_tasks::{Caller, ModelCatalog, Placement, TaskCore, TaskError, TaskSettings};
use browserd_types::dto::CreateTaskRequest;
use browserd_types::schedules::{
    CreateScheduleRequest, ScheduleTarget, ScheduleView, SkillTarget, UpdateScheduleRequest,
};
use sqlx::PgPool;

struct Fixture {
    pool: PgPool,
    core: TaskCore,
    alice: Caller,
    bob: Caller,
}

async fn fixture(pool: PgPool) -> Fixture {
    let store = Store::from_pool(pool.clone());
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
    let settings = TaskSettings {
        models: ModelCatalog::new(["m".to_owned()], Some("m".to_owned())).unwrap(),
        proxies: Vec::new(),
        max_queued_tasks: None,
    };
    Fixture {
        pool,
        core: TaskCore::with_settings(store, EventHub::default(), settings),
        alice: Caller::key(alice),
        bob: Caller::key(bob),
    }
}

fn task_target(task: &str) -> ScheduleTarget {
    ScheduleTarget::Task(Box::new(CreateTaskRequest {
        task: Some(task.to_owned()),
        ..CreateTaskRequest::default()
    }))
}

/// Yearly: no tick comes due by itself while a test runs (every second, a test crossing a
/// second boundary would rightly see the next tick fire too); ticks are made due by
/// [`miss_an_hour`].
fn yearly(target: ScheduleTarget) -> CreateScheduleRequest {
    CreateScheduleRequest {
        name: None,
        cron: "@yearly".to_owned(),
        time_zone: None,
        target,
        enabled: None,
    }
}

/// Makes `schedule` due as if every process had been down for an hour (3 600 missed ticks).
async fn miss_an_hour(pool: &PgPool, schedule: &ScheduleView) {
    sqlx::query("update schedules set next_run_at = now() - interval '1 hour' where id = $1")
        .bind(schedule.id)
        .execute(pool)
        .await
        .unwrap();
}

async fn tasks_of(pool: &PgPool, schedule: &ScheduleView) -> i64 {
    sqlx::query_scalar("select count(*) from tasks where schedule_id = $1")
        .bind(schedule.id)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn field(err: TaskError) -> String {
    match err {
        TaskError::Validation { field, message } => format!("{}: {message}", field.unwrap()),
        other => panic!("not a validation error: {other:?}"),
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_tick_fires_once_however_many_firers_race_and_missed_ticks_fire_once(pool: PgPool) {
    let f = fixture(pool).await;
    let schedule = f
        .core
        .create_schedule(&f.alice, yearly(task_target("check the news")))
        .await
        .unwrap();
    assert!(schedule.enabled);
    assert_eq!(schedule.time_zone, "UTC");
    assert_eq!(schedule.name, "@yearly");
    for round in 1..=5 {
        miss_an_hour(&f.pool, &schedule).await;
        let firers = (0..6).map(|_| {
            let core = f.core.clone();
            tokio::spawn(async move { core.fire_due_schedules().await.unwrap() })
        });
        let mut fired = 0;
        for firer in firers {
            fired += firer.await.unwrap();
        }
        assert_eq!(fired, 1, "round {round}: one tick, one firing");
        assert_eq!(tasks_of(&f.pool, &schedule).await, round);
        // The schedule moved past now: nothing more is due.
        assert_eq!(f.core.fire_due_schedules().await.unwrap(), 0);
    }
    let after = f.core.get_schedule(&f.alice, schedule.id).await.unwrap();
    assert!(after.last_error.is_none());
    assert!(after.next_run_at.unwrap() > after.last_run_at.unwrap());
    let runs = f
        .core
        .schedule_runs(&f.alice, schedule.id, 3, None)
        .await
        .unwrap();
    assert_eq!(runs.items.len(), 3);
    assert_eq!(after.last_task_id, Some(runs.items[0].task_id));
    let rest = f
        .core
        .schedule_runs(&f.alice, schedule.id, 3, runs.next_cursor.as_deref())
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 2);
    assert!(rest.next_cursor.is_none());
    let mut ticks: Vec<_> = runs
        .items
        .iter()
        .chain(&rest.items)
        .map(|run| run.scheduled_for)
        .collect();
    ticks.dedup();
    assert_eq!(ticks.len(), 5, "one task per tick");
    // The task is a task like any other: the key reads it.
    let task = f
        .core
        .tasks()
        .get(&f.alice, browserd_types::TaskId(runs.items[0].task_id))
        .await
        .unwrap();
    assert_eq!(task.task, "check the news");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_tick_refused_by_the_keys_quota_is_recorded_and_skipped(pool: PgPool) {
    let f = fixture(pool).await;
    // Bob may have one queued task; he has it.
    f.core
        .tasks()
        .create(
            &f.bob,
            CreateTaskRequest {
                task: Some("already queued".to_owned()),
                ..CreateTaskRequest::default()
            },
            None,
            Placement::Queue,
        )
        .await
        .unwrap();
    let schedule = f
        .core
        .create_schedule(&f.bob, yearly(task_target("one more")))
        .await
        .unwrap();
    miss_an_hour(&f.pool, &schedule).await;
    assert_eq!(f.core.fire_due_schedules().await.unwrap(), 1);
    assert_eq!(tasks_of(&f.pool, &schedule).await, 0);
    let after = f.core.get_schedule(&f.bob, schedule.id).await.unwrap();
    let error = after.last_error.expect("the refusal is recorded");
    assert!(error.starts_with("quota_exceeded: "), "{error}");
    assert!(error.contains("max_queued"), "{error}");
    assert!(after.next_run_at.unwrap() > after.last_run_at.unwrap());
    // Moved on: the refused tick is not retried.
    assert_eq!(f.core.fire_due_schedules().await.unwrap(), 0);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_disabled_schedule_fires_nothing_and_enabling_skips_missed_ticks(pool: PgPool) {
    let f = fixture(pool).await;
    let schedule = f
        .core
        .create_schedule(
            &f.alice,
            CreateScheduleRequest {
                enabled: Some(false),
                ..yearly(task_target("quiet"))
            },
        )
        .await
        .unwrap();
    assert_eq!(schedule.next_run_at, None);
    miss_an_hour(&f.pool, &schedule).await;
    assert_eq!(f.core.fire_due_schedules().await.unwrap(), 0);
    assert_eq!(tasks_of(&f.pool, &schedule).await, 0);
    let enabled = f
        .core
        .update_schedule(
            &f.alice,
            schedule.id,
            UpdateScheduleRequest {
                enabled: Some(true),
                ..UpdateScheduleRequest::default()
            },
        )
        .await
        .unwrap();
    assert!(enabled.next_run_at.unwrap() > enabled.updated_at);
    // Ticks missed while disabled do not fire.
    assert_eq!(f.core.fire_due_schedules().await.unwrap(), 0);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_skill_target_is_stored_and_a_tick_of_a_missing_skill_says_so(pool: PgPool) {
    let f = fixture(pool).await;
    let skill_id = uuid::Uuid::now_v7();
    let mut parameters = serde_json::Map::new();
    parameters.insert("order".to_owned(), serde_json::json!("A-17"));
    let schedule = f
        .core
        .create_schedule(
            &f.alice,
            yearly(ScheduleTarget::Skill(SkillTarget {
                skill_id,
                parameters,
            })),
        )
        .await
        .unwrap();
    assert_eq!(
        schedule.target,
        serde_json::json!({"skill": {"skill_id": skill_id, "parameters": {"order": "A-17"}}})
    );
    miss_an_hour(&f.pool, &schedule).await;
    assert_eq!(f.core.fire_due_schedules().await.unwrap(), 1);
    let after = f.core.get_schedule(&f.alice, schedule.id).await.unwrap();
    let error = after.last_error.unwrap();
    assert!(error.starts_with("skill_not_found: "), "{error}");
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn bad_input_is_refused_naming_the_field(pool: PgPool) {
    let f = fixture(pool).await;
    let with = |cron: &str, zone: Option<&str>, target: ScheduleTarget| CreateScheduleRequest {
        name: None,
        cron: cron.to_owned(),
        time_zone: zone.map(str::to_owned),
        target,
        enabled: None,
    };
    let model = ScheduleTarget::Task(Box::new(CreateTaskRequest {
        task: Some("t".to_owned()),
        model: Some("nope".to_owned()),
        ..CreateTaskRequest::default()
    }));
    let secrets: browserd_types::TaskSecrets =
        serde_json::from_value(serde_json::json!({"pw": "hunter2"})).unwrap();
    let secret = ScheduleTarget::Task(Box::new(CreateTaskRequest {
        task: Some("t".to_owned()),
        secrets: Some(secrets),
        ..CreateTaskRequest::default()
    }));
    let cases = [
        (with("every day", None, task_target("t")), "cron: "),
        (
            with("0 25 * * *", None, task_target("t")),
            "cron: cron `0 25 * * *` is not valid",
        ),
        (
            with("0 9 * * *", Some("Paris"), task_target("t")),
            "time_zone: time_zone `Paris`",
        ),
        (
            with("0 9 * * *", None, task_target("  ")),
            "target.task.task: ",
        ),
        (with("0 9 * * *", None, model), "target.task.model: "),
        (
            with("0 9 * * *", None, secret),
            "target.task.secrets: a schedule cannot carry",
        ),
    ];
    for (request, expected) in cases {
        let err = field(f.core.create_schedule(&f.alice, request).await.unwrap_err());
        assert!(err.starts_with(expected), "{expected}: {err}");
    }
    let schedule = f
        .core
        .create_schedule(&f.alice, yearly(task_target("t")))
        .await
        .unwrap();
    let err = f
        .core
        .update_schedule(
            &f.alice,
            schedule.id,
            UpdateScheduleRequest {
                time_zone: Some("Nowhere/Land".to_owned()),
                ..UpdateScheduleRequest::default()
            },
        )
        .await
        .unwrap_err();
    assert!(field(err).starts_with("time_zone: "));
    let err = f
        .core
        .schedule_runs(&f.alice, schedule.id, 10, Some("yesterday"))
        .await
        .unwrap_err();
    assert!(field(err).starts_with("cursor: "));
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn another_keys_schedule_is_not_found(pool: PgPool) {
    let f = fixture(pool).await;
    let schedule = f
        .core
        .create_schedule(&f.alice, yearly(task_target("mine")))
        .await
        .unwrap();
    let not_found = |err: TaskError| {
        matches!(
            err,
            TaskError::NotFound {
                code: "schedule_not_found",
                ..
            }
        )
    };
    assert!(not_found(
        f.core.get_schedule(&f.bob, schedule.id).await.unwrap_err()
    ));
    assert!(not_found(
        f.core
            .update_schedule(&f.bob, schedule.id, UpdateScheduleRequest::default())
            .await
            .unwrap_err()
    ));
    assert!(not_found(
        f.core
            .schedule_runs(&f.bob, schedule.id, 10, None)
            .await
            .unwrap_err()
    ));
    assert!(not_found(
        f.core
            .delete_schedule(&f.bob, schedule.id)
            .await
            .unwrap_err()
    ));
    assert_eq!(f.core.list_schedules(&f.bob, 50, 1).await.unwrap().total, 0);
    assert_eq!(
        f.core.list_schedules(&f.alice, 50, 1).await.unwrap().total,
        1
    );
    f.core.delete_schedule(&f.alice, schedule.id).await.unwrap();
    assert!(not_found(
        f.core
            .get_schedule(&f.alice, schedule.id)
            .await
            .unwrap_err()
    ));
}

/// Deleting a schedule touches its row alone: a worker holding one of its tasks' rows (a step
/// being written) does not hold the deletion up, and the deletion cannot deadlock with it.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn deleting_a_schedule_does_not_wait_for_its_tasks_rows(pool: PgPool) {
    let f = fixture(pool).await;
    let schedule = f
        .core
        .create_schedule(&f.alice, yearly(task_target("held")))
        .await
        .unwrap();
    miss_an_hour(&f.pool, &schedule).await;
    assert_eq!(f.core.fire_due_schedules().await.unwrap(), 1);
    let mut worker = f.pool.begin().await.unwrap();
    sqlx::query("select id from tasks where schedule_id = $1 for update")
        .bind(schedule.id)
        .fetch_one(&mut *worker)
        .await
        .unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        f.core.delete_schedule(&f.alice, schedule.id),
    )
    .await
    .expect("the deletion does not wait for the task's row")
    .unwrap();
    worker.commit().await.unwrap();
    assert_eq!(tasks_of(&f.pool, &schedule).await, 1, "its task stays");
}

/// A key may have `max_schedules_per_key` schedules: one more is `quota_exceeded` naming it,
/// until the key deletes one.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_key_has_at_most_its_schedules_limit(pool: PgPool) {
    let store = Store::from_pool(pool).with_object_limits(browserd_store::ObjectLimits {
        max_schedules_per_key: 2,
        ..browserd_store::ObjectLimits::default()
    });
    let owner = Caller::key(store.create_api_key("limited").await.unwrap().record.id);
    let core = TaskCore::with_settings(
        store,
        EventHub::default(),
        TaskSettings {
            models: ModelCatalog::new(["m".to_owned()], Some("m".to_owned())).unwrap(),
            ..TaskSettings::default()
        },
    );
    let first = core
        .create_schedule(&owner, yearly(task_target("one")))
        .await
        .unwrap();
    core.create_schedule(&owner, yearly(task_target("two")))
        .await
        .unwrap();
    match core
        .create_schedule(&owner, yearly(task_target("three")))
        .await
    {
        Err(TaskError::QuotaExceeded { quota, message, .. }) => {
            assert_eq!(quota, "max_schedules_per_key");
            assert!(message.contains("delete one first"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    core.delete_schedule(&owner, first.id).await.unwrap();
    core.create_schedule(&owner, yearly(task_target("three")))
        .await
        .unwrap();
}
