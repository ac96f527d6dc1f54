ALTER TABLE outbox_intents DROP COLUMN has_dependents;
