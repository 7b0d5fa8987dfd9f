//! What a key keeps between tasks — profiles and `/api/v2` sessions — against a real Postgres:
//! the per-key counts and the profile size hold where the objects are stored, and a sealed
//! value opens only for the object and the key it was sealed for.

use browserd_store::{
    KeyObject, NewSession, ObjectLimits, ProfileSave, SecretsKeyring, Store, StoreError,
};
use browserd_types::ApiKeyId;
use serde_json::json;
use sqlx::PgPool;

const TEST_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn limited(pool: PgPool, limits: ObjectLimits) -> Store {
    Store::from_pool(pool)
        .with_secrets_keyring(SecretsKeyring::from_base64(TEST_KEY, &[]).unwrap())
        .with_object_limits(limits)
}

async fn key(store: &Store) -> ApiKeyId {
    store.create_api_key("test").await.unwrap().record.id
}

fn session() -> NewSession {
    NewSession {
        keep_alive: true,
        persist_memory: true,
        start_url: None,
        profile_id: None,
    }
}

fn signed_in(cookie: &str) -> serde_json::Value {
    json!({"cookies": [{"name": "sid", "value": cookie, "domain": "shop.test", "path": "/"}],
           "origins": []})
}

/// 20 creations at once under a limit of 5, for profiles and for sessions: exactly 5 are made,
/// the others are refused with the limit; another key still has all of its own.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn profile_and_session_counts_per_key_hold_under_concurrent_creations(pool: PgPool) {
    let store = limited(
        pool,
        ObjectLimits {
            max_profiles_per_key: 5,
            max_sessions_per_key: 5,
            max_profile_bytes: 0,
            max_schedules_per_key: 0,
        },
    );
    let owner = key(&store).await;
    let other = key(&store).await;

    let profiles = futures::future::join_all((0..20).map(|i| {
        let store = store.clone();
        async move {
            store
                .create_profile(owner, Some(&format!("p{i}")), None)
                .await
        }
    }))
    .await;
    let sessions = futures::future::join_all((0..20).map(|_| {
        let store = store.clone();
        async move { store.create_session(owner, session()).await }
    }))
    .await;
    for (results, what) in [
        (
            profiles
                .into_iter()
                .map(|r| r.map(|_| ()))
                .collect::<Vec<_>>(),
            KeyObject::Profiles,
        ),
        (
            sessions.into_iter().map(|r| r.map(|_| ())).collect(),
            KeyObject::Sessions,
        ),
    ] {
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 5, "{what:?}");
        for refused in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(
                matches!(refused, StoreError::KeyObjectLimit { what: w, max: 5 } if *w == what),
                "{refused:?}"
            );
        }
    }
    let (_, profile_count) = store.list_profiles(owner, None, 100, 1).await.unwrap();
    assert_eq!(profile_count, 5);
    let (_, session_count) = store.list_sessions(owner, None, 100, 1).await.unwrap();
    assert_eq!(session_count, 5);
    let message = store
        .create_profile(owner, None, None)
        .await
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "this key already has 5 profiles, its limit `max_profiles_per_key` (5); delete one first"
    );

    // Another key is not held to this key's count.
    store.create_profile(other, None, None).await.unwrap();
    store.create_session(other, session()).await.unwrap();

    // Deleting a profile frees a slot; a stopped session is no longer counted.
    let (page, _) = store.list_profiles(owner, None, 1, 1).await.unwrap();
    assert!(store.delete_profile(owner, page[0].id).await.unwrap());
    store.create_profile(owner, None, None).await.unwrap();
    let (page, _) = store.list_sessions(owner, None, 1, 1).await.unwrap();
    store
        .stop_session(owner, page[0].id)
        .await
        .unwrap()
        .unwrap();
    store.create_session(owner, session()).await.unwrap();
    assert!(matches!(
        store.create_session(owner, session()).await,
        Err(StoreError::KeyObjectLimit { .. })
    ));
}

/// A state over `max_profile_bytes` is refused where it is stored; the profile keeps its
/// previous state and version.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_profile_state_over_the_size_limit_is_not_stored(pool: PgPool) {
    let store = limited(
        pool,
        ObjectLimits {
            max_profile_bytes: 400,
            ..ObjectLimits::default()
        },
    );
    let owner = key(&store).await;
    let profile = store.create_profile(owner, None, None).await.unwrap();
    let small = signed_in("ok-cookie");
    assert_eq!(
        store
            .save_profile_state(owner, profile.id, 0, &small, &["shop.test".to_owned()])
            .await
            .unwrap(),
        ProfileSave::Saved { version: 1 }
    );
    let big = signed_in(&"x".repeat(500));
    let size = big.to_string().len();
    match store
        .save_profile_state(owner, profile.id, 1, &big, &["shop.test".to_owned()])
        .await
    {
        Err(StoreError::ProfileTooLarge { size: s, max: 400 }) => assert_eq!(s, size),
        other => panic!("expected ProfileTooLarge, got {other:?}"),
    }
    let kept = store
        .load_profile_state(owner, profile.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.version, 1);
    assert_eq!(kept.state, small);
}

/// A sealed state copied onto another key's profile, onto another profile of the same key, or
/// left in place while its row is handed to another key, does not open.
#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_sealed_value_opens_only_for_its_object_and_key(pool: PgPool) {
    let store = limited(pool.clone(), ObjectLimits::default());
    let owner = key(&store).await;
    let thief = key(&store).await;
    let source = store.create_profile(owner, None, None).await.unwrap();
    let same_key = store.create_profile(owner, None, None).await.unwrap();
    let other_key = store.create_profile(thief, None, None).await.unwrap();
    let state = signed_in("session-cookie-1234");
    store
        .save_profile_state(owner, source.id, 0, &state, &[])
        .await
        .unwrap();
    let sealed: Vec<u8> = sqlx::query_scalar("select state_sealed from profiles where id = $1")
        .bind(source.id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(&sealed[..4], b"bds2");
    for target in [same_key.id, other_key.id] {
        sqlx::query("update profiles set state_sealed = $2, state = null where id = $1")
            .bind(target)
            .bind(&sealed)
            .execute(&pool)
            .await
            .unwrap();
    }
    assert!(matches!(
        store.load_profile_state(owner, same_key.id).await,
        Err(StoreError::Seal(_))
    ));
    assert!(matches!(
        store.load_profile_state(thief, other_key.id).await,
        Err(StoreError::Seal(_))
    ));
    // Its own row opens; the same row moved to another key does not.
    assert_eq!(
        store
            .load_profile_state(owner, source.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        state
    );
    sqlx::query("update profiles set api_key_id = $2 where id = $1")
        .bind(source.id)
        .bind(thief.0)
        .execute(&pool)
        .await
        .unwrap();
    assert!(matches!(
        store.load_profile_state(thief, source.id).await,
        Err(StoreError::Seal(_))
    ));
}
