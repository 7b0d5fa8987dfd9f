-- browser-use cloud allows maxSteps 1..10000; /v1 and /api/v2 share that range now.
alter table tasks drop constraint tasks_max_steps_check;
alter table tasks add constraint tasks_max_steps_check check (max_steps between 1 and 10000);

-- The files an agent left in its workspace when its task ended (write_file / replace_file,
-- saved extractions; not todo.md): browser-use cloud's `outputFiles`. A file over the caps
-- (10 MiB each, 50 MiB per task) is recorded without its bytes, with the reason.
create table task_output_files (
    id             uuid primary key,
    task_id        uuid not null references tasks (id) on delete cascade,
    file_name      text not null check (length(file_name) between 1 and 255),
    content_type   text not null,
    size           bigint not null check (size >= 0),
    bytes          bytea,
    skipped_reason text,
    -- Per-file HMAC key of the short-lived download links (`downloadUrl`); never returned.
    download_key   bytea not null check (length(download_key) = 32),
    created_at     timestamptz not null default now(),
    unique (task_id, file_name),
    check ((bytes is null) = (skipped_reason is not null)),
    check (bytes is null or length(bytes) = size)
);

-- browser-use's highlight_elements (v1 `highlight_elements`, v2 `highlightElements`): the
-- step screenshots show the indexed elements' boxes and indices.
alter table tasks add column highlight_elements boolean not null default false;
