-- A task's browser viewport (browser-use's `viewport`), in CSS pixels. Null = the worker's
-- default (browser-use's 1920×1080 unless the operator set another); both or neither.
alter table tasks add column viewport_width integer check (viewport_width > 0);
alter table tasks add column viewport_height integer check (viewport_height > 0);
alter table tasks add constraint tasks_viewport_both_or_neither
    check ((viewport_width is null) = (viewport_height is null));
