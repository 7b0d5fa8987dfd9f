//! Shared domain types: ids, task status, events. No I/O.
