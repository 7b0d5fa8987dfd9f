//! Following one task's events: the one way every reader of the event log (the event
//! WebSocket, the MCP tools) waits for what comes next.
//!
//! Algorithm: subscribe to the hub first, then read `seq > last` from `task_events`; after
//! every signal, read again — unless the signal carries the very next event (`last + 1`, the
//! feed caught up), which is then handed out as it is, without a read. Notifications are
//! otherwise only wake-ups: a lost, late or repeated one can neither drop nor repeat an event,
//! and an event committed between the subscription and the first read is in that read.

use std::collections::VecDeque;
use std::sync::Arc;

use browserd_types::{TaskEvent, TaskId};

use crate::hub::{EventHub, Signal, Subscription};
use crate::{Store, StoreError};

/// Events read per query.
const BATCH: i64 = 200;

/// What a feed has next.
#[derive(Clone, Debug, PartialEq)]
pub enum FeedItem {
    /// The next stored event (the final one, a terminal status, is the last item).
    Event(TaskEvent),
    /// Notifications may have been missed (the listener reconnected, or this reader lagged);
    /// the feed has caught up from the table. A reader that also depends on other state (an API
    /// key still being active) checks it now.
    Resync,
    /// The task was deleted.
    Deleted,
    /// The hub stopped (shutdown, or the listener is gone for good).
    Closed,
}

/// One task's events from a given `seq` on, in order, without gaps or repeats.
pub struct EventFeed {
    store: Store,
    subscription: Subscription,
    task_id: TaskId,
    /// The last event handed out.
    last: i64,
    pending: VecDeque<TaskEvent>,
    /// Everything stored up to the last signal has been read.
    caught_up: bool,
    /// A resync signal came; reported once the feed has caught up.
    resync_due: bool,
    ended: bool,
}

impl EventFeed {
    /// Follows task `task_id` of `store` after event `after_seq` (0: from the start);
    /// `hub` is the one that store's appends signal. Subscribes now, so an event committed
    /// before the first [`EventFeed::next`] is not missed.
    pub fn follow(store: Store, hub: &EventHub, task_id: TaskId, after_seq: i64) -> Self {
        Self {
            store,
            subscription: hub.subscribe(task_id),
            task_id,
            last: after_seq,
            pending: VecDeque::new(),
            caught_up: false,
            resync_due: false,
            ended: false,
        }
    }

    /// The seq of the last event handed out.
    pub fn last_seq(&self) -> i64 {
        self.last
    }

    /// The next stored event, or [`FeedItem::Resync`] / [`FeedItem::Deleted`] /
    /// [`FeedItem::Closed`]; waits on the hub when nothing new is stored. After the final
    /// event it answers `Closed`. Cancel-safe: a call dropped while waiting or reading loses
    /// nothing (what it read is read again).
    pub async fn next(&mut self) -> Result<FeedItem, StoreError> {
        loop {
            if let Some(event) = self.take() {
                return Ok(FeedItem::Event(event));
            }
            if self.ended {
                return Ok(FeedItem::Closed);
            }
            if !self.caught_up {
                self.fill().await?;
                continue;
            }
            if std::mem::take(&mut self.resync_due) {
                return Ok(FeedItem::Resync);
            }
            match self.subscription.recv().await {
                Some(Signal::Appended { seq, .. }) if seq <= self.last => {}
                Some(Signal::Appended {
                    seq,
                    event: Some(event),
                }) if seq == self.last + 1 => self.pending.push_back(Arc::unwrap_or_clone(event)),
                Some(Signal::Appended { .. }) => self.caught_up = false,
                Some(Signal::Resync) => {
                    self.caught_up = false;
                    self.resync_due = true;
                }
                Some(Signal::Deleted) => return Ok(FeedItem::Deleted),
                None => return Ok(FeedItem::Closed),
            }
        }
    }

    /// The next buffered event, moving `last` past it.
    fn take(&mut self) -> Option<TaskEvent> {
        let event = self.pending.pop_front()?;
        self.last = event.seq;
        if event.is_final() {
            self.ended = true;
            self.pending.clear();
        }
        Some(event)
    }

    /// Reads the events after `last` into the buffer (a full batch leaves more to read).
    async fn fill(&mut self) -> Result<(), StoreError> {
        let batch = self
            .store
            .events_after(self.task_id, self.last, BATCH)
            .await?;
        self.caught_up = (batch.len() as i64) < BATCH;
        self.pending.extend(batch);
        Ok(())
    }
}
