//! Skills in the task core on real Postgres (the worker's part played by the store): creation
//! and its refusals, runs checked against the current version's parameters, enable/disable,
//! rollback, refine and cancel, executions, deletion, and owner isolation (another key's skill
//! is `skill_not_found` for every operation).

use browserd_agent::AgentHistoryList;
use browserd_agent::skill::{ParameterKind, ResultReader, SkillParameter, SkillScript};
use browserd_store::{EventHub, NewSkillVersion, Store, TransitionDetails};
use browserd_tasks::{Caller, ModelCatalog, Placement, TaskCore, TaskError, TaskSettings};
use browserd_types::dto::CreateTaskRequest;
use browserd_types::skills::{
    CreateSkillRequest, RefineSkillRequest, RunSkillRequest, UpdateSkillRequest,
};
use browserd_types::{TaskId, TaskStatus, Transition};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

struct Fixture {
    core: TaskCore,
    store: Store,
    alice: Caller,
    bob: Caller,
}

async fn fixture(pool: PgPool) -> Fixture {
    let store = Store::from_pool(pool);
    let alice = store.create_api_key("alice").await.unwrap().record.id;
    let bob = store.create_api_key("bob").await.unwrap().record.id;
    let settings = TaskSettings {
        models: ModelCatalog::new(["m".to_owned()], Some("m".to_owned())).unwrap(),
        ..TaskSettings::default()
    };
    Fixture {
        core: TaskCore::with_settings(store.clone(), EventHub::default(), settings),
        store,
        alice: Caller::key(alice),
        bob: Caller::key(bob),
    }
}

fn prompt(text: &str) -> CreateSkillRequest {
    CreateSkillRequest {
        prompt: Some(text.to_owned()),
        start_url: Some("https://orders.example.com/".to_owned()),
        ..CreateSkillRequest::default()
    }
}

fn field(err: TaskError) -> (String, String) {
    match err {
        TaskError::Validation { field, message } => (field.unwrap_or_default(), message),
        other => panic!("not a validation error: {other:?}"),
    }
}

fn code(err: TaskError) -> &'static str {
    err.code()
}

fn run(parameters: serde_json::Value) -> RunSkillRequest {
    RunSkillRequest {
        parameters: parameters.as_object().cloned().unwrap(),
        ..RunSkillRequest::default()
    }
}

/// Plays the worker: claims the generation task and ends it with version N.
async fn finish_generation(f: &Fixture, task: TaskId, skill: Uuid) {
    let claimed = f
        .store
        .claim_task("w", std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claimed.record.id, task);
    let script = SkillScript {
        steps: AgentHistoryList::default(),
        parameters: vec![SkillParameter {
            name: "order".into(),
            kind: ParameterKind::Number,
            required: true,
            default: None,
            description: None,
        }],
        result: ResultReader::Text {
            template: "Order {{order}}".into(),
        },
    };
    let version = NewSkillVersion {
        skill_id: skill,
        script: serde_json::to_value(&script).unwrap(),
        origin: "generated",
        source_task_id: Some(task),
        healed: json!([]),
        parameters: serde_json::to_value(&script.parameters).unwrap(),
        generation: true,
    };
    f.store
        .transition_claimed_task_with_version(
            "w",
            task,
            Transition::Finish,
            TransitionDetails {
                output: Some("Order 1042".into()),
                is_success: Some(true),
                error: None,
            },
            &version,
        )
        .await
        .unwrap();
}

#[sqlx::test(migrator = "browserd_store::MIGRATOR")]
async fn skills_are_created_run_and_managed_by_their_key_only(pool: PgPool) {
    let f = fixture(pool).await;
    let skills = &f.core;

    // Refusals of creation, each naming its field.
    for (request, expected) in [
        (prompt("Find order {{order=1042"), "prompt"),
        (prompt("Find {{order=1}} or {{order=2}}"), "prompt"),
        (prompt("   "), "prompt"),
        (CreateSkillRequest::default(), "prompt"),
        (
            CreateSkillRequest {
                from_task: Some(TaskId::new()),
                ..prompt("x")
            },
            "from_task",
        ),
        (
            CreateSkillRequest {
                parameters: Some([("a".to_owned(), "b".to_owned())].into()),
                ..prompt("x")
            },
            "parameters",
        ),
        (
            CreateSkillRequest {
                title: Some(String::new()),
                ..prompt("x")
            },
            "title",
        ),
        (
            CreateSkillRequest {
                max_steps: Some(0),
                ..prompt("x")
            },
            "max_steps",
        ),
    ] {
        let err = skills
            .create_skill(&f.alice, request, None)
            .await
            .unwrap_err();
        assert_eq!(field(err).0, expected);
    }

    // A skill and its generation task, the prompt filled with the example.
    let skill = skills
        .create_skill(
            &f.alice,
            prompt("Find order {{order=1042}} and report its status"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(skill.status, "generating");
    assert_eq!(skill.title, "Find order 1042 and report its status");
    assert_eq!(skill.parameters[0].name, "order");
    let generation = skill.generation_task_id.unwrap();
    let task = skills.tasks().get(&f.alice, generation).await.unwrap();
    assert_eq!(task.task, "Find order 1042 and report its status");
    assert_eq!(task.status, TaskStatus::Queued);
    let err = skills
        .run_skill(&f.alice, skill.id, run(json!({"order": 1})), None)
        .await
        .unwrap_err();
    assert_eq!(code(err), "skill_not_ready");

    finish_generation(&f, generation, skill.id).await;
    let view = skills.get_skill(&f.alice, skill.id).await.unwrap();
    assert_eq!(
        (view.status.as_str(), view.current_version),
        ("finished", Some(1))
    );
    assert_eq!(view.versions.len(), 1);

    // Runs: the parameters checked against the version, named when wrong.
    for (parameters, named) in [
        (json!({}), "order"),
        (json!({"order": "abc"}), "order"),
        (json!({"order": 1, "other": 2}), "other"),
    ] {
        let err = skills
            .run_skill(&f.alice, skill.id, run(parameters.clone()), None)
            .await
            .unwrap_err();
        let (field, message) = field(err);
        assert_eq!(field, "parameters");
        assert!(message.contains(named), "{parameters}: {message}");
    }
    let execution = skills
        .run_skill(&f.alice, skill.id, run(json!({"order": 2077})), None)
        .await
        .unwrap();
    assert_eq!(execution.status, TaskStatus::Queued);
    let runs = skills
        .skill_runs(&f.alice, skill.id, None, None)
        .await
        .unwrap();
    assert_eq!(runs.items.len(), 1);
    assert_eq!(
        skills
            .skill_run(&f.alice, skill.id, execution.id)
            .await
            .unwrap()
            .id,
        execution.id
    );
    let err = skills
        .skill_run(&f.alice, skill.id, generation)
        .await
        .unwrap_err();
    assert!(err.is_task_not_found(), "the generation is not a run");

    // Disabled: no run. A title must not be empty.
    let disabled = UpdateSkillRequest {
        is_enabled: Some(false),
        ..UpdateSkillRequest::default()
    };
    skills
        .update_skill(&f.alice, skill.id, disabled)
        .await
        .unwrap();
    let err = skills
        .run_skill(&f.alice, skill.id, run(json!({"order": 1})), None)
        .await
        .unwrap_err();
    assert_eq!(code(err), "skill_disabled");
    let enabled = UpdateSkillRequest {
        is_enabled: Some(true),
        title: Some("Order status".into()),
        ..UpdateSkillRequest::default()
    };
    let view = skills
        .update_skill(&f.alice, skill.id, enabled)
        .await
        .unwrap();
    assert_eq!(
        (view.title.as_str(), view.is_enabled),
        ("Order status", true)
    );
    let err = skills.rollback_skill(&f.alice, skill.id).await.unwrap_err();
    assert_eq!(code(err), "no_previous_version");

    // Refine: generating again; the current version still runs; one refinement at a time;
    // cancel ends it and the skill is finished again.
    let refine = |feedback: &str| RefineSkillRequest {
        feedback: feedback.to_owned(),
        secrets: None,
        allow_secrets_on_any_domain: None,
    };
    let refining = skills
        .refine_skill(&f.alice, skill.id, refine("report the date too"), None)
        .await
        .unwrap();
    assert_eq!(refining.status, "generating");
    let refine_task = refining.generation_task_id.unwrap();
    let text = skills
        .tasks()
        .get(&f.alice, refine_task)
        .await
        .unwrap()
        .task;
    assert!(text.contains("report the date too"), "{text}");
    skills
        .run_skill(&f.alice, skill.id, run(json!({"order": 3})), None)
        .await
        .unwrap();
    let err = skills
        .refine_skill(&f.alice, skill.id, refine("again"), None)
        .await
        .unwrap_err();
    assert_eq!(code(err), "skill_busy");
    let err = skills
        .refine_skill(&f.alice, skill.id, refine(" "), None)
        .await
        .unwrap_err();
    assert_eq!(field(err).0, "feedback");
    let cancelled = skills.cancel_skill(&f.alice, skill.id).await.unwrap();
    assert_eq!(
        (cancelled.status.as_str(), cancelled.current_version),
        ("finished", Some(1))
    );
    let stopped = skills.tasks().get(&f.alice, refine_task).await.unwrap();
    assert_eq!(stopped.status, TaskStatus::Stopped);
    let err = skills.cancel_skill(&f.alice, skill.id).await.unwrap_err();
    assert_eq!(code(err), "skill_not_generating");

    // Another key: every operation answers skill_not_found; its listing is empty.
    let bob = &f.bob;
    let id = skill.id;
    let answers = [
        skills.get_skill(bob, id).await.err(),
        skills
            .update_skill(bob, id, UpdateSkillRequest::default())
            .await
            .err(),
        skills
            .run_skill(bob, id, run(json!({"order": 1})), None)
            .await
            .err(),
        skills.skill_versions(bob, id).await.err(),
        skills.skill_runs(bob, id, None, None).await.err(),
        skills.skill_run(bob, id, execution.id).await.err(),
        skills.rollback_skill(bob, id).await.err(),
        skills.refine_skill(bob, id, refine("x"), None).await.err(),
        skills.cancel_skill(bob, id).await.err(),
        skills.delete_skill(bob, id).await.err(),
    ];
    for answer in answers {
        assert_eq!(answer.map(code), Some("skill_not_found"));
    }
    assert!(
        skills
            .list_skills(bob, None, None, None)
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let listed = skills
        .list_skills(&f.alice, Some("order"), None, None)
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);

    // from_task: another key's task, a task still queued, one that did not succeed.
    let from = |task: TaskId| CreateSkillRequest {
        from_task: Some(task),
        ..CreateSkillRequest::default()
    };
    let err = skills
        .create_skill(bob, from(generation), None)
        .await
        .unwrap_err();
    assert!(err.is_task_not_found());
    let queued = skills
        .tasks()
        .create(
            &f.alice,
            CreateTaskRequest {
                task: Some("t".into()),
                ..CreateTaskRequest::default()
            },
            None,
            Placement::Queue,
        )
        .await
        .unwrap()
        .view;
    let err = skills
        .create_skill(&f.alice, from(queued.id), None)
        .await
        .unwrap_err();
    assert_eq!(code(err), "source_not_ended");
    let err = skills
        .create_skill(&f.alice, from(refine_task), None)
        .await
        .unwrap_err();
    assert_eq!(field(err).0, "from_task");

    // Deleted: gone with its versions; its runs stay tasks.
    skills.delete_skill(&f.alice, id).await.unwrap();
    assert_eq!(
        skills.get_skill(&f.alice, id).await.err().map(code),
        Some("skill_not_found")
    );
    assert_eq!(
        skills.tasks().get(&f.alice, execution.id).await.unwrap().id,
        execution.id
    );
}
