//! The worker's half of take-over: a person drives a paused task's browser through the live
//! view. The api records each input as a `person_input` event; here a follower reads the
//! task's events in order (the store's `EventFeed`), hands each input to the run, which
//! applies it to its browser ([`apply_person_inputs`]), tells the agent what was done
//! (`AgentControl::person_input_applied`: its next step hears that a person changed the
//! page) and logs inputs that failed as `log` events.
//!
//! Order with resume: the control watcher resumes the agent only once the follower has read
//! the task's log up to the resume ([`TakeOverProgress::reached`]), so every input recorded
//! while paused is in the page before the agent's next capture.

use std::sync::Arc;
use std::time::Duration;

use browserd_agent::AgentControl;
use browserd_browser::BrowserSession;
use browserd_store::{EventFeed, EventHub, FeedItem, Store};
use browserd_types::takeover::PersonInput;
use browserd_types::{EventBody, LogEvent, TaskId, TaskStatus};
use secrecy::ExposeSecret;
use tokio::sync::{mpsc, oneshot, watch};

use crate::sink::StoreSink;

/// One input can take this long in the browser (CDP input calls have their own timeouts; this
/// bounds a run that stopped applying).
const APPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// An input waits at most this long for the agent to finish the step it was in when the task
/// was paused (the agent's step timeout is longer; a step that long fails the input).
const PAUSE_POINT_CAP: Duration = Duration::from_secs(60);

/// Resume waits at most this long for the inputs recorded before it.
pub(crate) const CATCH_UP_CAP: Duration = Duration::from_secs(10);

/// An input for the run's browser and where to say how it went.
pub struct PersonInputRequest {
    pub input: PersonInput,
    pub done: oneshot::Sender<Result<(), String>>,
}

/// The run's end of take-over: the inputs to apply, in order.
pub struct TakeOverLink {
    pub inputs: mpsc::Receiver<PersonInputRequest>,
}

/// How far the follower has read the task's log.
#[derive(Clone)]
pub(crate) struct TakeOverProgress {
    read: watch::Receiver<i64>,
}

impl TakeOverProgress {
    /// Waits until the follower has read (and applied) every event up to `seq`, or `cap`
    /// passed, or the follower is gone.
    pub(crate) async fn reached(&self, seq: i64, cap: Duration) {
        let mut read = self.read.clone();
        let caught_up = read.wait_for(|read| *read >= seq);
        if tokio::time::timeout(cap, caught_up).await.is_err() {
            tracing::warn!(seq, "person inputs not all applied before resuming");
        }
    }
}

/// The take-over of one task run by worker `owner`: the run's link, the follower's progress,
/// and the follower itself (ends when the task's log ends or the run drops its link).
pub(crate) fn link(
    store: Store,
    hub: EventHub,
    task_id: TaskId,
    owner: String,
    control: AgentControl,
    sink: Arc<StoreSink>,
    after_seq: i64,
) -> (
    TakeOverLink,
    TakeOverProgress,
    impl std::future::Future<Output = ()>,
) {
    let (sender, inputs) = mpsc::channel(1);
    let (read_tx, read) = watch::channel(after_seq);
    let feed = EventFeed::follow(store.clone(), &hub, task_id, after_seq);
    let follower = follow(
        store,
        feed,
        Target {
            task_id,
            owner,
            control,
            sink,
        },
        sender,
        read_tx,
    );
    (TakeOverLink { inputs }, TakeOverProgress { read }, follower)
}

/// The run the inputs are for.
struct Target {
    task_id: TaskId,
    owner: String,
    control: AgentControl,
    sink: Arc<StoreSink>,
}

async fn follow(
    store: Store,
    mut feed: EventFeed,
    target: Target,
    run: mpsc::Sender<PersonInputRequest>,
    read: watch::Sender<i64>,
) {
    let Target {
        task_id,
        owner,
        control,
        sink,
    } = target;
    // While the task waits for an answer to `ask_human`, the agent is inside that action and
    // the page is free: an input goes in at once. Paused, it waits for the step to end.
    let mut waiting = false;
    loop {
        let item = tokio::select! {
            () = run.closed() => return,
            item = feed.next() => item,
        };
        let event = match item {
            Ok(FeedItem::Event(event)) => event,
            Ok(FeedItem::Resync) => continue,
            Ok(FeedItem::Deleted | FeedItem::Closed) => return,
            Err(err) => {
                tracing::warn!(%err, "reading the task's events for take-over failed");
                // The feed reads again from where it was on the next call; the hub's next
                // signal (or its resync) wakes it.
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let seq = event.seq;
        let body = event.body();
        if let Some(EventBody::Status(status)) = &body {
            waiting = status.status == TaskStatus::Waiting;
        }
        if let Some(EventBody::PersonInput(recorded)) = body {
            let outcome = match filled(&store, task_id, &owner, seq, recorded.input).await {
                Ok(input) if waiting => apply(&run, input.clone()).await.map(|()| input),
                // The agent may still be in the step it was in when the task was paused.
                Ok(input) => {
                    match tokio::time::timeout(PAUSE_POINT_CAP, sink.wait_for_pause_point()).await {
                        Ok(()) => apply(&run, input.clone()).await.map(|()| input),
                        Err(_) => Err(format!(
                            "the agent's step did not end within {} s of the pause",
                            PAUSE_POINT_CAP.as_secs()
                        )),
                    }
                }
                Err(err) => Err(err),
            };
            match outcome {
                Ok(input) => control.person_input_applied(input.describe(recorded.secret_chars)),
                Err(error) => {
                    let log = EventBody::Log(LogEvent {
                        level: "warn".to_owned(),
                        message: format!("person input (event {seq}) not applied: {error}"),
                    });
                    if let Err(err) = store.append_worker_event(task_id, &owner, &log).await {
                        tracing::debug!(%err, "take-over failure not logged");
                    }
                }
            }
        }
        read.send_replace(seq);
    }
}

/// The input as recorded, with a secret text taken from its sealed row.
async fn filled(
    store: &Store,
    task_id: TaskId,
    owner: &str,
    seq: i64,
    input: PersonInput,
) -> Result<PersonInput, String> {
    match input {
        PersonInput::Type { secret: true, .. } => {
            match store.take_secret_input(task_id, owner, seq).await {
                Ok(Some(text)) => Ok(PersonInput::Type {
                    text: text.expose_secret().to_owned(),
                    secret: true,
                }),
                Ok(None) => Err("its secret text is no longer stored".to_owned()),
                Err(err) => Err(format!("its secret text could not be read: {err}")),
            }
        }
        other => Ok(other),
    }
}

async fn apply(run: &mpsc::Sender<PersonInputRequest>, input: PersonInput) -> Result<(), String> {
    let (done, answer) = oneshot::channel();
    if run.send(PersonInputRequest { input, done }).await.is_err() {
        return Err("the task's browser is gone".to_owned());
    }
    match tokio::time::timeout(APPLY_TIMEOUT, answer).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err("the task's browser is gone".to_owned()),
        Err(_) => Err(format!(
            "the browser did not apply it within {} s",
            APPLY_TIMEOUT.as_secs()
        )),
    }
}

/// The run's side: applies each input to `session` until the link's sender is gone.
pub async fn apply_person_inputs(session: &BrowserSession, mut link: TakeOverLink) {
    while let Some(request) = link.inputs.recv().await {
        let result = match &request.input {
            PersonInput::Click {
                x,
                y,
                button,
                click_count,
            } => {
                session
                    .person_click(*x, *y, button.as_str(), *click_count)
                    .await
            }
            PersonInput::Scroll {
                x,
                y,
                delta_x,
                delta_y,
            } => session.person_scroll(*x, *y, *delta_x, *delta_y).await,
            PersonInput::Type { text, .. } => session.person_type(text).await,
            PersonInput::Keys { keys } => session.person_keys(keys).await,
        };
        let _ = request.done.send(result.map_err(|err| err.to_string()));
    }
}
