-- Intents still waiting go back to pending (the sweep gives them a
-- dispatch job), so they are performed, without their order.
DROP FUNCTION outbox_order_settled(bigint, text);
DROP FUNCTION outbox_order_record(jsonb, text);
DROP FUNCTION outbox_order_fill(jsonb, jsonb, text);
DROP TABLE outbox_intent_dependencies;
DROP TABLE outbox_ordering_keys;
UPDATE outbox_intents SET state = 'pending', updated_at = now() WHERE state = 'waiting';
DROP INDEX outbox_intents_ordering_idx;
DROP INDEX outbox_intents_unfinished_idx;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (state, created_at)
    WHERE state IN ('pending', 'dispatching', 'in_doubt');
ALTER TABLE outbox_intents
    DROP CONSTRAINT outbox_intents_ordering_key_check,
    DROP CONSTRAINT outbox_intents_waiting_for_check,
    DROP COLUMN key_seq,
    DROP COLUMN ordering_key,
    DROP COLUMN waiting_for,
    DROP CONSTRAINT outbox_intents_state_check,
    ADD CONSTRAINT outbox_intents_state_check
        CHECK (state IN ('pending', 'dispatching', 'succeeded', 'failed', 'in_doubt', 'cancelled'));
