-- Observability: the W3C trace context (`traceparent`) of the request that created a task, so
-- the worker's spans of the task join the creating request's trace; and a small partial index
-- for the task gauges that /metrics reads on every scrape (running and paused tasks; queued
-- ones already have tasks_queued_idx).
alter table tasks add column trace_context text;
alter table tasks add constraint tasks_trace_context_len check (length(trace_context) <= 512);

create index tasks_active_idx on tasks (status, updated_at) where status in ('running', 'paused');
