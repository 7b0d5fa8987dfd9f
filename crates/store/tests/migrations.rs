//! Migrations over rows written under an earlier schema (a fresh database per test via
//! `#[sqlx::test]` without its own migrations; needs DATABASE_URL at run time).

use std::time::Duration;

use browserd_store::{MIGRATOR, Store};
use browserd_types::{TaskId, TaskOptions};
use serde_json::json;
use sqlx::PgPool;

/// Inserts a task with `options` as the schema up to 0012 stored them: one column per option.
async fn insert_before_0013(pool: &PgPool, owner: uuid::Uuid, options: &TaskOptions) -> TaskId {
    let id = TaskId::new();
    let (width, height) = match options.viewport {
        Some(v) => (Some(v.width as i32), Some(v.height as i32)),
        None => (None, None),
    };
    sqlx::query(
        "insert into tasks (id, api_key_id, task, start_url, max_steps, model, allowed_domains,
             prohibited_domains, output_schema, use_vision, max_actions_per_step, max_failures,
             timeout_s, metadata, max_tokens, max_cost_usd, viewport_width, viewport_height,
             settle_timeout_ms, proxy, highlight_elements)
         values ($1, $2, 'written before 0013', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
             $14, $15, $16, $17, $18, $19, $20)",
    )
    .bind(id.0)
    .bind(owner)
    .bind(&options.start_url)
    .bind(options.max_steps)
    .bind(&options.model)
    .bind(&options.allowed_domains)
    .bind(&options.prohibited_domains)
    .bind(&options.output_schema)
    .bind(options.use_vision)
    .bind(options.max_actions_per_step)
    .bind(options.max_failures)
    .bind(options.timeout_s)
    .bind(serde_json::to_value(&options.metadata).unwrap())
    .bind(options.max_tokens)
    .bind(options.max_cost_usd)
    .bind(width)
    .bind(height)
    .bind(options.settle_timeout_ms)
    .bind(&options.proxy)
    .bind(options.highlight_elements)
    .execute(pool)
    .await
    .unwrap();
    id
}

/// 0013 moves the option columns into `options jsonb`: a task written before it reads back
/// with exactly the options it was written with — every option set, and every one at its
/// default or null — and the webhook outbox still carries the task's metadata.
#[sqlx::test(migrations = false)]
async fn options_columns_move_into_jsonb_unchanged(pool: PgPool) {
    MIGRATOR.run_to(12, &pool).await.unwrap();
    let owner = uuid::Uuid::now_v7();
    sqlx::query("insert into api_keys (id, name, prefix, key_hash) values ($1, 'k', 'p', $2)")
        .bind(owner)
        .bind(vec![7u8; 32])
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "insert into webhooks (id, api_key_id, url, events, secret)
         values ($1, $2, 'https://hooks.example.com/', '{started}', 's')",
    )
    .bind(uuid::Uuid::now_v7())
    .bind(owner)
    .execute(&pool)
    .await
    .unwrap();
    // Options added after 0013 are not in its columns: they take their defaults when read.
    let every = TaskOptions {
        ask_human: TaskOptions::default().ask_human,
        ask_human_timeout_s: TaskOptions::default().ask_human_timeout_s,
        profile_id: TaskOptions::default().profile_id,
        ..TaskOptions::every_option_set()
    };
    // The defaults leave every optional option null (no viewport, no budgets, no proxy).
    let defaults = TaskOptions::default();
    assert_eq!(defaults.viewport, None);
    assert_eq!(defaults.output_schema, None);
    let with_every = insert_before_0013(&pool, owner, &every).await;
    let with_defaults = insert_before_0013(&pool, owner, &defaults).await;

    MIGRATOR.run(&pool).await.unwrap();
    let columns: Vec<String> = sqlx::query_scalar(
        "select column_name::text from information_schema.columns
         where table_name = 'tasks' and column_name in ('options', 'max_steps', 'metadata',
             'highlight_elements', 'viewport_width')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(columns, ["options"]);
    // Exactly the JSON `TaskOptions` serializes to, field for field.
    let stored: serde_json::Value = sqlx::query_scalar("select options from tasks where id = $1")
        .bind(with_every.0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, as_migrated(&every));
    let stored: serde_json::Value = sqlx::query_scalar("select options from tasks where id = $1")
        .bind(with_defaults.0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, as_migrated(&defaults));

    let store = Store::from_pool(pool.clone());
    let read = store.get_task(None, with_every).await.unwrap().unwrap();
    assert_eq!(read.options, every);
    let read = store.get_task(None, with_defaults).await.unwrap().unwrap();
    assert_eq!(read.options, defaults);

    // The outbox trigger reads the metadata from the options now (each task's `started`).
    for _ in 0..2 {
        let claimed = store
            .claim_task("w", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap();
        let bodies: Vec<serde_json::Value> = sqlx::query_scalar(
            "select body -> 'payload' -> 'metadata' from webhook_deliveries
             where task_id = $1 and event = 'started'",
        )
        .bind(claimed.record.id.0)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(bodies, [json!(claimed.record.options.metadata)]);
    }
    assert_eq!(json!(every.metadata), json!({"k": "v"}));

    // The cheap check that stays: options are an object.
    let refused = sqlx::query("update tasks set options = '[]'::jsonb where id = $1")
        .bind(with_every.0)
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("tasks_options_object"),
        "{refused}"
    );
}

/// Options added after migration 0013 (a row it migrated lacks them; they read back at their
/// defaults).
const ADDED_AFTER_0013: [&str; 3] = ["ask_human", "ask_human_timeout_s", "profile_id"];

/// The JSON migration 0013 writes for `options`: `TaskOptions`'s, without the later fields.
fn as_migrated(options: &TaskOptions) -> serde_json::Value {
    let mut value = serde_json::to_value(options).unwrap();
    for field in ADDED_AFTER_0013 {
        value.as_object_mut().unwrap().remove(field);
    }
    value
}
