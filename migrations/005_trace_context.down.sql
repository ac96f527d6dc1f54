ALTER TABLE outbox_intents
    DROP COLUMN trace_parent,
    DROP COLUMN trace_state;
