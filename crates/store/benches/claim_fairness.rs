//! The claim query's fairness and cost, against a real Postgres (`DATABASE_URL`'s server; a
//! scratch database is created and dropped):
//!
//! 1. Key A queues 500 tasks, then key B queues 1; four worker slots are busy with A's tasks.
//!    When one slot frees up, whose task starts? Reported as the number of claims until B's
//!    task started, and the wall time from B's POST to its claim, next to the oldest-first
//!    order the claim used before (B behind all of A's).
//! 2. The claim's cost with 100 keys × 100 queued tasks: the median of 200 claims, next to the
//!    oldest-first query on the same data in the same run (the baseline of the ratio).
//!
//! `cargo bench -p browserd-store --bench claim_fairness`

use std::time::{Duration, Instant};

use browserd_store::{NewTask, Store, StoreOptions, TransitionDetails};
use browserd_types::{TaskOptions, Transition};

/// The claim before fair scheduling: the oldest queued task, whatever its key.
const OLDEST_FIRST: &str = "with next as (
        select id from tasks where status = 'queued'
        order by created_at, id limit 1 for update skip locked)
    update tasks t set status = 'running', lease_owner = 'baseline',
        lease_expires_at = now() + interval '30 seconds', attempts = t.attempts + 1
    from next where t.id = next.id returning t.id";

fn task(text: String) -> NewTask {
    NewTask {
        task: text,
        options: TaskOptions::default(),
        secrets: Default::default(),
        trace_context: None,
        replay: None,
    }
}

/// One claim, timed.
async fn timed_claim(store: &Store) -> Duration {
    let started = Instant::now();
    store
        .claim_task("w", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    started.elapsed()
}

/// The planner's statistics after a bulk insert.
async fn refresh_statistics(store: &Store) {
    sqlx::query("analyze tasks")
        .execute(store.pool())
        .await
        .unwrap();
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let server = match base.rfind('/') {
        Some(at) => &base[..at],
        None => base.as_str(),
    };
    let name = format!("browserd_bench_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&format!("{server}/postgres"))
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
        .execute(&admin)
        .await
        .unwrap();
    let store = Store::connect(&format!("{server}/{name}"), &StoreOptions::default())
        .await
        .unwrap();
    store.migrate().await.unwrap();

    fairness(&store).await;
    cost(&store).await;

    store.pool().close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "drop database {name} with (force)"
    )))
    .execute(&admin)
    .await
    .unwrap();
}

async fn fairness(store: &Store) {
    let a = store.create_api_key("a").await.unwrap().record.id;
    let b = store.create_api_key("b").await.unwrap().record.id;
    for i in 0..500 {
        store.create_task(a, task(format!("a{i}"))).await.unwrap();
    }
    // Four slots, all busy with A's tasks.
    let mut running = Vec::new();
    for _ in 0..4 {
        running.push(
            store
                .claim_task("w", Duration::from_secs(60))
                .await
                .unwrap()
                .unwrap()
                .record
                .id,
        );
    }
    let posted = Instant::now();
    let late = store.create_task(b, task("b".to_owned())).await.unwrap().id;
    let mut claims = 0;
    loop {
        // A slot frees up: the oldest running task finishes, the next claim fills the slot.
        let done = running.remove(0);
        store
            .transition_claimed_task("w", done, Transition::Finish, TransitionDetails::default())
            .await
            .unwrap();
        let next = store
            .claim_task("w", Duration::from_secs(60))
            .await
            .unwrap()
            .unwrap()
            .record
            .id;
        claims += 1;
        if next == late {
            break;
        }
        running.push(next);
    }
    println!(
        "fairness: B's task started at the first freed slot's claim #{claims} ({:.1} ms after \
         its POST); oldest-first it would have waited for all 500 of A's tasks to start \
         (claim #497)",
        posted.elapsed().as_secs_f64() * 1000.0
    );
}

async fn cost(store: &Store) {
    // A fresh table: 100 keys × 100 queued tasks.
    sqlx::query("delete from tasks")
        .execute(store.pool())
        .await
        .unwrap();
    let mut keys = Vec::new();
    for k in 0..100 {
        keys.push(
            store
                .create_api_key(&format!("k{k}"))
                .await
                .unwrap()
                .record
                .id,
        );
    }
    for i in 0..100 {
        for key in &keys {
            store
                .create_task(*key, task(format!("t{i}")))
                .await
                .unwrap();
        }
    }
    refresh_statistics(store).await;
    let mut fair = Vec::new();
    let mut oldest = Vec::new();
    for _ in 0..200 {
        fair.push(timed_claim(store).await);
        let started = Instant::now();
        sqlx::query(OLDEST_FIRST)
            .fetch_one(store.pool())
            .await
            .unwrap();
        oldest.push(started.elapsed());
    }
    let (fair, oldest) = (median(fair), median(oldest));

    // The same claim over one key's 10 000 queued tasks: what the fan-out over keys adds.
    sqlx::query("delete from tasks")
        .execute(store.pool())
        .await
        .unwrap();
    for i in 0..10_000 {
        store
            .create_task(keys[0], task(format!("s{i}")))
            .await
            .unwrap();
    }
    refresh_statistics(store).await;
    let mut single = Vec::new();
    for _ in 0..200 {
        single.push(timed_claim(store).await);
    }
    let single = median(single);
    println!(
        "claim cost (median of 200 claims; a claim is one transaction: the statement, its status \
         event, the task read):\n  100 keys × 100 queued: {:.2} ms\n  1 key × 10 000 queued: \
         {:.2} ms (ratio {:.2}: the fan-out over keys)\n  bare oldest-first statement, 100 × 100: \
         {:.2} ms",
        fair.as_secs_f64() * 1000.0,
        single.as_secs_f64() * 1000.0,
        fair.as_secs_f64() / single.as_secs_f64(),
        oldest.as_secs_f64() * 1000.0,
    );
}
