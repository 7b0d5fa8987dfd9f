//! One shared `LISTEN task_events` connection per process, fanned out to in-process
//! subscribers (one `broadcast` channel per watched task).
//!
//! Notifications carry `(task_id, seq)` and, when it fits, the event itself; a subscriber
//! takes a carried event only when it is the next one it expects, and otherwise reads from
//! `task_events`, so a lost or lagging notification can never lose an event: whenever a
//! subscriber may have missed something (channel lag, listener reconnect) it gets
//! [`Signal::Resync`] and re-reads everything after the last seq it delivered.
//!
//! Live view signals (channel `live`) go to per-task [`LiveSubscription`]s: the worker of a
//! task learns that its viewers changed, the api processes serving viewers that a new frame is
//! stored.
//!
//! Schedule changes (channel `schedules`) wake the process's scheduler
//! ([`EventHub::schedule_wakeup`]).
//!
//! It also relays key revocations (channel `api_keys`) as [`KeySignal`]s to everyone who
//! holds a [`EventHub::key_signals`] receiver (the api's auth cache and its WebSockets).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use browserd_types::{ApiKeyId, TaskEvent, TaskId};
use sqlx::postgres::PgListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api_keys::API_KEYS_CHANNEL;
use crate::events::{EventNotice, NOTIFY_CHANNEL};
use crate::live::LIVE_CHANNEL;
use crate::queue::QUEUE_CHANNEL;
use crate::schedules::SCHEDULES_CHANNEL;
use crate::{Store, StoreError};

/// Buffered signals per watched task before a slow subscriber is told to resync.
const CHANNEL_CAPACITY: usize = 256;

/// What a subscriber is told.
#[derive(Clone, Debug, PartialEq)]
pub enum Signal {
    /// Event `seq` of the task was committed; `event` is it, when its notification carried it.
    Appended {
        seq: i64,
        event: Option<Arc<TaskEvent>>,
    },
    /// The task was deleted.
    Deleted,
    /// Notifications may have been missed; re-read from the database.
    Resync,
}

impl Signal {
    /// Whether the task's status or lease may have changed: every transition, claim and
    /// hand-back appends a `status` event in its own transaction, so a notification that
    /// carries an event of another kind (a step, a model output, a log line) changed neither,
    /// and a watcher of the task's status need not read the task back.
    pub fn may_change_status(&self) -> bool {
        match self {
            Signal::Appended {
                event: Some(event), ..
            } => event.kind == browserd_types::event_kind::STATUS,
            Signal::Appended { event: None, .. } | Signal::Deleted | Signal::Resync => true,
        }
    }
}

/// What the holders of [`EventHub::key_signals`] are told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySignal {
    /// API key `0` was revoked or deleted.
    Revoked(ApiKeyId),
    /// Revocations may have been missed (listener reconnect, lag): re-check keys in the
    /// database and drop cached lookups.
    Resync,
}

/// What a [`LiveSubscription`] is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveSignal {
    /// The task's viewers changed (one came or left); count them in the database.
    Viewers,
    /// Frame `seq` of the task was stored.
    Frame { seq: i64 },
    /// Notifications may have been missed; re-read viewers and the frame.
    Resync,
}

type Channels<S = Signal> = Arc<Mutex<HashMap<TaskId, broadcast::Sender<S>>>>;

/// The per-process fan-out of task event notifications (and of queue wake-ups for workers,
/// and of key revocations for the api). Cheap to clone.
#[derive(Clone, Debug)]
pub struct EventHub {
    channels: Channels,
    live: Channels<LiveSignal>,
    queue: Arc<tokio::sync::Notify>,
    schedules: Arc<tokio::sync::Notify>,
    keys: broadcast::Sender<KeySignal>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self {
            channels: Channels::default(),
            live: Channels::default(),
            queue: Arc::default(),
            schedules: Arc::default(),
            keys: broadcast::channel(CHANNEL_CAPACITY).0,
        }
    }
}

/// A receiver of key revocations; a lagging one gets [`KeySignal::Resync`].
#[derive(Debug)]
pub struct KeySignals {
    receiver: broadcast::Receiver<KeySignal>,
}

impl KeySignals {
    /// The next signal; `None` means the hub shut down.
    pub async fn recv(&mut self) -> Option<KeySignal> {
        match self.receiver.recv().await {
            Ok(signal) => Some(signal),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(KeySignal::Resync),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// A signal kind with a "re-read everything" value, sent to a subscriber that lagged.
pub trait TaskSignal: Clone + Send + 'static {
    /// Notifications may have been missed.
    const RESYNC: Self;
}

impl TaskSignal for Signal {
    const RESYNC: Self = Signal::Resync;
}

impl TaskSignal for LiveSignal {
    const RESYNC: Self = LiveSignal::Resync;
}

/// A live subscription to one task's signals (its events, or with [`LiveSignal`] its live
/// view); unsubscribes on drop.
#[derive(Debug)]
pub struct Subscription<S: TaskSignal = Signal> {
    task_id: TaskId,
    channels: Channels<S>,
    receiver: broadcast::Receiver<S>,
}

/// A task's live view signals ([`EventHub::subscribe_live`]).
pub type LiveSubscription = Subscription<LiveSignal>;

impl<S: TaskSignal> Subscription<S> {
    fn new(channels: &Channels<S>, task_id: TaskId) -> Self {
        let receiver = channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(task_id)
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe();
        Self {
            task_id,
            channels: channels.clone(),
            receiver,
        }
    }

    /// The next signal. A lagging receiver gets the resync signal; `None` means the hub shut
    /// down.
    pub async fn recv(&mut self) -> Option<S> {
        match self.receiver.recv().await {
            Ok(signal) => Some(signal),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(S::RESYNC),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

impl<S: TaskSignal> Drop for Subscription<S> {
    fn drop(&mut self) {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        // Our own receiver is still alive here, so 1 means "only us".
        if channels
            .get(&self.task_id)
            .is_some_and(|sender| sender.receiver_count() <= 1)
        {
            channels.remove(&self.task_id);
        }
    }
}

impl EventHub {
    /// Starts listening on [`NOTIFY_CHANNEL`] and returns once the first `LISTEN` is active, so
    /// every event committed after this returns is signalled. The listener task reconnects
    /// with backoff and sends [`Signal::Resync`] to everyone after each reconnect. It stops
    /// when `shutdown` is cancelled.
    pub async fn start(
        store: &Store,
        shutdown: CancellationToken,
    ) -> Result<(EventHub, JoinHandle<()>), StoreError> {
        let listener = listen(store).await?;
        let hub = EventHub::default();
        let task = tokio::spawn(hub.clone().run(store.clone(), listener, shutdown));
        Ok((hub, task))
    }

    /// Subscribes to task `task_id`. Subscribe before reading the task's stored events so
    /// nothing committed in between is missed.
    pub fn subscribe(&self, task_id: TaskId) -> Subscription {
        Subscription::new(&self.channels, task_id)
    }

    /// Subscribes to task `task_id`'s live view signals. Subscribe before reading viewers or
    /// frames so nothing changed in between is missed.
    pub fn subscribe_live(&self, task_id: TaskId) -> LiveSubscription {
        Subscription::new(&self.live, task_id)
    }

    fn dispatch_live(&self, payload: &str) {
        let mut parts = payload.splitn(3, ':');
        let task_id = parts.next().and_then(|t| t.parse::<TaskId>().ok());
        let signal = match (parts.next(), parts.next()) {
            (Some("viewers"), None) => Some(LiveSignal::Viewers),
            (Some("frame"), Some(seq)) => seq.parse().ok().map(|seq| LiveSignal::Frame { seq }),
            _ => None,
        };
        let (Some(task_id), Some(signal)) = (task_id, signal) else {
            tracing::warn!(payload, "malformed live view notification");
            return;
        };
        let channels = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = channels.get(&task_id) {
            let _ = sender.send(signal);
        }
    }

    /// Subscribes to key revocations (of every key: receivers filter).
    pub fn key_signals(&self) -> KeySignals {
        KeySignals {
            receiver: self.keys.subscribe(),
        }
    }

    fn dispatch_key(&self, payload: &str) {
        match payload.parse::<uuid::Uuid>() {
            // No receivers is fine.
            Ok(id) => {
                let _ = self.keys.send(KeySignal::Revoked(ApiKeyId(id)));
            }
            Err(_) => tracing::warn!(payload, "malformed api key notification"),
        }
    }

    /// Resolves when a task may have become claimable (a `task_queue` notification, or a
    /// listener reconnect after which notifications may have been missed). One wake-up is kept
    /// for a caller that was not waiting.
    pub async fn queue_wakeup(&self) {
        self.queue.notified().await;
    }

    /// Resolves when a schedule may have changed its next tick (a `schedules` notification, or
    /// a listener reconnect). One wake-up is kept for a caller that was not waiting.
    pub async fn schedule_wakeup(&self) {
        self.schedules.notified().await;
    }

    /// Number of tasks with at least one subscriber.
    pub fn watched_tasks(&self) -> usize {
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Tells task `task_id`'s subscribers `signal` (a notification of the listener).
    fn publish(&self, task_id: TaskId, signal: Signal) {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = channels.get(&task_id) {
            // No receivers left is fine: the entry is removed by the last Subscription.
            let _ = sender.send(signal);
        }
    }

    fn dispatch(&self, payload: &str) {
        let (task_id, signal) = match EventNotice::parse(payload) {
            Some(EventNotice::Deleted(task_id)) => (task_id, Signal::Deleted),
            Some(EventNotice::Appended {
                task_id,
                seq,
                event,
            }) => (
                task_id,
                Signal::Appended {
                    seq,
                    event: event.map(Arc::new),
                },
            ),
            None => {
                tracing::warn!(payload, "malformed task event notification");
                return;
            }
        };
        self.publish(task_id, signal);
    }

    fn resync_all(&self) {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        for sender in channels.values() {
            let _ = sender.send(Signal::Resync);
        }
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        for sender in live.values() {
            let _ = sender.send(LiveSignal::Resync);
        }
    }

    async fn run(self, store: Store, mut listener: PgListener, shutdown: CancellationToken) {
        loop {
            let received = tokio::select! {
                () = shutdown.cancelled() => break,
                received = listener.try_recv() => received,
            };
            match received {
                Ok(Some(notification)) if notification.channel() == QUEUE_CHANNEL => {
                    self.queue.notify_one();
                }
                Ok(Some(notification)) if notification.channel() == SCHEDULES_CHANNEL => {
                    self.schedules.notify_one();
                }
                Ok(Some(notification)) if notification.channel() == API_KEYS_CHANNEL => {
                    self.dispatch_key(notification.payload());
                }
                Ok(Some(notification)) if notification.channel() == LIVE_CHANNEL => {
                    self.dispatch_live(notification.payload());
                }
                Ok(Some(notification)) => self.dispatch(notification.payload()),
                Ok(None) | Err(_) => {
                    if let Err(err) = &received {
                        tracing::warn!(%err, "event listener failed; reconnecting");
                    } else {
                        tracing::warn!("event listener connection lost; reconnecting");
                    }
                    let Some(reconnected) = reconnect(&store, &shutdown).await else {
                        break;
                    };
                    listener = reconnected;
                    // Anything committed while we were away was not signalled.
                    self.resync_all();
                    self.queue.notify_one();
                    self.schedules.notify_one();
                    let _ = self.keys.send(KeySignal::Resync);
                }
            }
        }
        // Dropping the senders ends every subscription.
        self.channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

async fn listen(store: &Store) -> Result<PgListener, StoreError> {
    let mut listener = PgListener::connect_with(store.pool()).await?;
    listener
        .listen_all([
            NOTIFY_CHANNEL,
            QUEUE_CHANNEL,
            API_KEYS_CHANNEL,
            LIVE_CHANNEL,
            SCHEDULES_CHANNEL,
        ])
        .await?;
    Ok(listener)
}

async fn reconnect(store: &Store, shutdown: &CancellationToken) -> Option<PgListener> {
    let mut delay = Duration::from_millis(100);
    loop {
        let attempt = tokio::select! {
            () = shutdown.cancelled() => return None,
            attempt = tokio::time::timeout(Duration::from_secs(10), listen(store)) => attempt,
        };
        match attempt {
            Ok(Ok(listener)) => {
                tracing::info!("event listener reconnected");
                return Some(listener);
            }
            Ok(Err(err)) => tracing::warn!(%err, ?delay, "event listener reconnect failed"),
            Err(_) => tracing::warn!(?delay, "event listener reconnect timed out"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn appended(kind: &str) -> Signal {
        Signal::Appended {
            seq: 2,
            event: Some(Arc::new(TaskEvent {
                task_id: TaskId(uuid::Uuid::nil()),
                seq: 2,
                kind: kind.to_owned(),
                payload: serde_json::json!({}),
                created_at: time::OffsetDateTime::UNIX_EPOCH,
            })),
        }
    }

    #[test]
    fn only_status_events_and_unknowns_may_change_a_tasks_status() {
        assert!(appended("status").may_change_status());
        assert!(
            Signal::Appended {
                seq: 2,
                event: None
            }
            .may_change_status()
        );
        assert!(Signal::Resync.may_change_status());
        assert!(Signal::Deleted.may_change_status());
        for kind in [
            "step",
            "step_started",
            "model_output",
            "action_result",
            "log",
        ] {
            assert!(!appended(kind).may_change_status(), "{kind}");
        }
    }
}
