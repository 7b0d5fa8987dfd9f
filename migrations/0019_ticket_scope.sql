-- WebSocket tickets carry a scope (issue 45): `view` opens the event stream and the live view's
-- frames only; `control` also lets its socket send take-over inputs. Tickets issued before this
-- migration (they live 30 s) are `view`.
alter table ws_tickets
    add column scope text not null default 'view' check (scope in ('view', 'control'));
