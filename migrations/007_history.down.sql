ALTER TABLE outbox_intents RESET (fillfactor);
DROP INDEX outbox_intents_unfinished_idx;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (state, created_at)
    WHERE state IN ('pending', 'dispatching', 'in_doubt');
CREATE INDEX outbox_intents_recheck_idx ON outbox_intents (recheck_at) WHERE recheck_at IS NOT NULL;
DROP TABLE outbox_intent_counts;
