ALTER TABLE outbox_intents DROP COLUMN resend_requested_at;
