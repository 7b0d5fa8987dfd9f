-- How long a task's actions wait for the page to settle (ms); null = the worker's default
-- (browser-use's 2 s network-wait cap unless the operator set another), 0 = do not wait.
alter table tasks add column settle_timeout_ms integer
    check (settle_timeout_ms between 0 and 30000);
