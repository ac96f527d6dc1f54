-- Back to a River job per intent. Queued intents have none: the sweep of a
-- binary of schema 12 gives each one that is pending or dispatching a job
-- once SweepGrace has passed (a dispatching one is then taken over as
-- after a crash).
LOCK TABLE outbox_intents IN ACCESS EXCLUSIVE MODE;
DROP INDEX outbox_intents_unfinished_idx;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (id) WHERE finished_at IS NULL;
ALTER TABLE outbox_intents DROP COLUMN attempt_started_at;
ALTER TABLE outbox_intents DROP COLUMN claim_token;
ALTER TABLE outbox_intents DROP CONSTRAINT outbox_intents_queued_check;
ALTER TABLE outbox_intents DROP COLUMN queued;
