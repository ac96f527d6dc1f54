-- The activity chart by the minute: what the dashboard's chart needs of the
-- finished intents, counted once instead of on every page load. A chart of
-- the last hour used to read every intent finished in that hour (3.6
-- million at 1,000 intents/s); it now reads at most one row a minute, plus
-- what finished since the last roll-up and what is unfinished.
--
-- Nothing on the hot path writes these tables: internal/intentstore rolls
-- the finished intents up afterwards, in order of finished_at, up to a
-- horizon before which no transaction still running could commit a
-- finished intent (finished_at is the finishing transaction's now(), its
-- start). Finishing is for good, so an intent rolled up never changes its
-- minute or its counts.

-- One row per minute (date_bin from 2000-01-01 UTC, whatever the session's
-- time zone). Among the intents finished in the rolled-up range:
-- recorded counts those created in the minute, succeeded and finished
-- those that succeeded and that finished (any terminal state) in it.
CREATE TABLE outbox_activity_minutes (
    minute    timestamptz NOT NULL PRIMARY KEY,
    recorded  bigint      NOT NULL,
    succeeded bigint      NOT NULL,
    finished  bigint      NOT NULL
);

-- The rolled-up range of finished_at, [rolled_from, rolled_until): one
-- row. Intents finished outside it are counted live from their own rows.
-- It starts empty, now: the intents finished before this migration are
-- never rolled up, and a chart reaching back before it reads them live.
CREATE TABLE outbox_activity_rollup (
    only_row     boolean     NOT NULL PRIMARY KEY DEFAULT true,
    rolled_from  timestamptz NOT NULL,
    rolled_until timestamptz NOT NULL,
    CONSTRAINT outbox_activity_rollup_only_row_check CHECK (only_row),
    CONSTRAINT outbox_activity_rollup_range_check CHECK (rolled_from <= rolled_until)
);
INSERT INTO outbox_activity_rollup (rolled_from, rolled_until) VALUES (now(), now());
