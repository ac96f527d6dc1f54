-- The dispatchers' last count of the intents by kind and state, saved for
-- the readers while counting is slow (a backlog: counting reads every
-- unfinished intent). One row, rewritten in place by the dispatchers'
-- leader every few seconds at most, never on an intent's path
-- (internal/intentstore, countsnapshot.go).
CREATE TABLE outbox_counts_saved (
    one                   boolean     PRIMARY KEY DEFAULT true CHECK (one),
    by_kind_state         jsonb       NOT NULL,
    oldest_pending_micros bigint      NOT NULL,
    counted_at            timestamptz NOT NULL,
    took_micros           bigint      NOT NULL
);
