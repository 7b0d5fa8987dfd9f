//! Skills in the store against a real Postgres: a generation task and its skill written in one
//! transaction; a version saved in the transaction of the task's end; the deferred trigger that
//! marks a generation ending without one (failed, cancelled, timed out, or back to finished
//! for a refinement); executions linked and listed; rollback; ownership; deletion.

use std::time::Duration;

use browserd_store::{
    NewSkill, NewSkillVersion, NewTask, SkillAttach, SkillRole, Store, StoreError,
    TransitionDetails,
};
use browserd_types::{ApiKeyId, TaskId, TaskOptions, Transition};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

const WORKER: &str = "w1";

fn new_task(text: &str) -> NewTask {
    NewTask {
        task: text.to_owned(),
        options: TaskOptions::default(),
        secrets: Default::default(),
        trace_context: None,
        replay: None,
    }
}

fn new_skill(title: &str) -> NewSkill {
    NewSkill {
        id: Uuid::now_v7(),
        title: title.to_owned(),
        description: String::new(),
        goal: "Find order {{order}}".to_owned(),
        agent_prompt: "Find order {{order=1042}}".to_owned(),
        output_schema: None,
        parameters: json!([{"name": "order", "type": "number", "required": true}]),
    }
}

/// A new skill and its queued generation task.
async fn generating(store: &Store, owner: ApiKeyId, title: &str) -> (Uuid, TaskId) {
    let skill = new_skill(title);
    let id = skill.id;
    let attach = SkillAttach::Create {
        skill: Box::new(skill),
        parameters: json!({"order": "1042"}),
    };
    let task = store
        .create_skill_task(owner, new_task("generate"), &attach)
        .await
        .unwrap();
    (id, task.id)
}

/// Claims the next queued task as [`WORKER`].
async fn claim(store: &Store, expected: TaskId) {
    let claimed = store
        .claim_task(WORKER, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.record.id, expected);
}

fn version(skill_id: Uuid, origin: &'static str, generation: bool) -> NewSkillVersion {
    NewSkillVersion {
        skill_id,
        script: json!({"steps": {"history": []}, "parameters": [], "result": {"kind": "text", "template": origin}}),
        origin,
        source_task_id: None,
        healed: json!([]),
        parameters: json!([{"name": "order", "type": "number", "required": true}]),
        generation,
    }
}

fn finish() -> TransitionDetails {
    TransitionDetails {
        output: Some("Order 1042: Shipped".into()),
        is_success: Some(true),
        error: None,
    }
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn a_generation_saves_its_version_with_its_end_and_the_trigger_marks_the_rest(pool: PgPool) {
    let store = Store::from_pool(pool);
    let owner = store.create_api_key("a").await.unwrap().record.id;
    let other = store.create_api_key("b").await.unwrap().record.id;

    // Generated: version 1 saved in the transaction of the task's end.
    let (skill, generation) = generating(&store, owner, "orders").await;
    let record = store.get_skill(owner, skill).await.unwrap();
    assert_eq!(
        (record.status.as_str(), record.generation_task_id),
        ("generating", Some(generation))
    );
    let link = store.task_skill(generation).await.unwrap().unwrap();
    assert_eq!(link.role, SkillRole::Generate);
    assert_eq!(link.parameters, json!({"order": "1042"}));
    claim(&store, generation).await;
    let (task, saved) = store
        .transition_claimed_task_with_version(
            WORKER,
            generation,
            Transition::Finish,
            finish(),
            &version(skill, "generated", true),
        )
        .await
        .unwrap();
    assert_eq!((task.status.as_str(), saved), ("finished", Some(1)));
    let record = store.get_skill(owner, skill).await.unwrap();
    assert_eq!(
        (record.status.as_str(), record.current_version),
        ("finished", Some(1))
    );
    assert!(record.current_version_finished_at.is_some());

    // Another key sees nothing.
    assert!(matches!(
        store.get_skill(other, skill).await,
        Err(StoreError::SkillNotFound(_))
    ));
    assert!(store.skill_versions(other, skill).await.is_err());
    assert!(
        store
            .list_skills(other, None, 10, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A refinement stopped: the skill keeps its version and is finished again, with the error.
    let refine = store
        .create_skill_task(
            owner,
            new_task("refine"),
            &SkillAttach::Regenerate {
                skill_id: skill,
                parameters: json!({}),
            },
        )
        .await
        .unwrap();
    assert!(matches!(
        store
            .create_skill_task(
                owner,
                new_task("again"),
                &SkillAttach::Regenerate {
                    skill_id: skill,
                    parameters: json!({})
                }
            )
            .await,
        Err(StoreError::SkillBusy { .. })
    ));
    store
        .transition_task(Some(owner), refine.id, Transition::Stop, Default::default())
        .await
        .unwrap();
    let record = store.get_skill(owner, skill).await.unwrap();
    assert_eq!(
        (record.status.as_str(), record.current_version),
        ("finished", Some(1))
    );
    assert!(record.error.is_some());

    // New skills whose generation is stopped, times out, fails, or finishes without success.
    let (stopped, stopped_task) = generating(&store, owner, "stopped").await;
    store
        .transition_task(
            Some(owner),
            stopped_task,
            Transition::Stop,
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        store.get_skill(owner, stopped).await.unwrap().status,
        "cancelled"
    );
    for (error, success, expected) in [
        (
            Some("timeout_s: the task ran out of its wall-clock budget (5 s)"),
            None,
            "timed_out",
        ),
        (Some("max_steps reached"), None, "failed"),
        (None, Some(false), "failed"),
    ] {
        let (id, task_id) = generating(&store, owner, expected).await;
        claim(&store, task_id).await;
        let (transition, details) = match error {
            Some(error) => (
                Transition::Fail,
                TransitionDetails {
                    error: Some(error.into()),
                    ..Default::default()
                },
            ),
            None => (
                Transition::Finish,
                TransitionDetails {
                    output: Some("could not find it".into()),
                    is_success: success,
                    error: None,
                },
            ),
        };
        store
            .transition_claimed_task(WORKER, task_id, transition, details)
            .await
            .unwrap();
        let record = store.get_skill(owner, id).await.unwrap();
        assert_eq!(record.status, expected, "{error:?}");
        assert!(record.error.is_some() && record.current_version.is_none());
    }
    let listed = store
        .list_skills(owner, Some("orders"), 10, None)
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let page = store.list_skills(owner, None, 2, None).await.unwrap();
    assert_eq!(page.items.len(), 2);
    let rest = store
        .list_skills(owner, None, 10, page.next_cursor)
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 3);
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn executions_heal_into_versions_roll_back_and_outlive_their_skill(pool: PgPool) {
    let store = Store::from_pool(pool);
    let owner = store.create_api_key("a").await.unwrap().record.id;
    let (skill, generation) = generating(&store, owner, "orders").await;
    claim(&store, generation).await;
    store
        .transition_claimed_task_with_version(
            WORKER,
            generation,
            Transition::Finish,
            finish(),
            &version(skill, "generated", true),
        )
        .await
        .unwrap();
    assert_eq!(store.rollback_skill(owner, skill).await.unwrap(), None);

    let run = store
        .create_skill_task(
            owner,
            new_task("run"),
            &SkillAttach::Execute {
                skill_id: skill,
                version: 1,
                parameters: json!({"order": 2077}),
            },
        )
        .await
        .unwrap();
    let link = store.task_skill(run.id).await.unwrap().unwrap();
    assert_eq!((link.role, link.version), (SkillRole::Execute, Some(1)));
    assert_eq!(
        store.skill_of_task(owner, run.id).await.unwrap(),
        Some((skill, SkillRole::Execute))
    );
    claim(&store, run.id).await;
    let mut healed = version(skill, "healed", false);
    healed.healed = json!([{"step": 2, "reason": "element not found", "model_calls": 1}]);
    let (_, saved) = store
        .transition_claimed_task_with_version(WORKER, run.id, Transition::Finish, finish(), &healed)
        .await
        .unwrap();
    assert_eq!(saved, Some(2));
    let versions = store.skill_versions(owner, skill).await.unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[1].origin, "healed");
    assert_eq!(versions[1].healed[0]["step"], 2);
    assert_eq!(
        store.get_skill(owner, skill).await.unwrap().current_version,
        Some(2)
    );
    let (runs, next) = store.skill_runs(owner, skill, 10, None).await.unwrap();
    assert_eq!((runs.len(), next), (1, None));
    assert_eq!(runs[0].id, run.id);

    let rolled = store.rollback_skill(owner, skill).await.unwrap().unwrap();
    assert_eq!(rolled.current_version, Some(1));

    store.delete_skill(owner, skill).await.unwrap();
    assert!(store.skill_version(skill, 1).await.unwrap().is_none());
    let task = store.get_task(Some(owner), run.id).await.unwrap().unwrap();
    assert_eq!(task.status.as_str(), "finished", "the run stays a task");
    let link = store.task_skill(run.id).await.unwrap().unwrap();
    assert!(link.skill.is_none(), "unlinked from the deleted skill");
}
