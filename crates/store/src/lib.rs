//! Postgres persistence (sqlx): repositories, queue claim/lease, LISTEN/NOTIFY.
