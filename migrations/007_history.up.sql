-- Cost must not grow with history: reading the counts and finding the
-- unfinished intents take time in what is unfinished, not in what is kept.

-- Dropping indexes needs this lock anyway: taken first, it cannot deadlock
-- with a transaction that reads then writes the table, and it keeps any
-- intent from finishing or being deleted between the backfill below and the
-- commit. Reads and writes of outbox_intents wait while this migration runs
-- (a few seconds per million intents).
LOCK TABLE outbox_intents IN ACCESS EXCLUSIVE MODE;

-- Counts of finished intents by kind and state. Finishing is for good (a
-- terminal state is never left), so a count only grows when an intent
-- finishes and shrinks when retention deletes it; internal/intentstore
-- writes both in the transaction that does it. Unfinished intents are
-- counted live from the index below. Each transaction adds to the row of
-- its own slot (its backend's pid modulo 64), so concurrent settlements do
-- not queue on one hot row; a count is the sum over its slots.
CREATE TABLE outbox_intent_counts (
    kind  text     NOT NULL,
    state text     NOT NULL,
    slot  smallint NOT NULL,
    n     bigint   NOT NULL,
    PRIMARY KEY (kind, state, slot)
);

-- Backfill from the intents already finished. An older outboxd still
-- running after this commits would finish intents without counting them:
-- stop the old processes first (a newer schema keeps them from starting).
INSERT INTO outbox_intent_counts (kind, state, slot, n)
SELECT kind, state, 0, count(*)
FROM outbox_intents
WHERE finished_at IS NOT NULL
GROUP BY kind, state;

-- An update can be HOT (no new index entries, the old version pruned in
-- place) only when no index covers a column it changes, predicates
-- included. Claims and retries change state but not finished_at, so the
-- unfinished intents are now found by finished_at IS NULL (every
-- non-terminal state) instead of an index on state, and the in_doubt
-- recheck reads them instead of an index on recheck_at. Only the
-- transition to a terminal state writes index entries.
DROP INDEX outbox_intents_unfinished_idx;
DROP INDEX outbox_intents_recheck_idx;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (id) WHERE finished_at IS NULL;

-- Room on each page for the new versions of its rows: a HOT update needs
-- its new version on the same page. Applies to pages written from now on.
ALTER TABLE outbox_intents SET (fillfactor = 80);
