-- Name of the operator's upstream proxy (browserd --proxies NAME=URL) that carries the task's
-- browser traffic after the egress checks; null = none. Only the name: URLs and credentials
-- stay in the operator's configuration.
alter table tasks add column proxy text
    check (proxy is null or length(proxy) between 1 and 64);
