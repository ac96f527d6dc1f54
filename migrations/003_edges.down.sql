DROP INDEX outbox_intents_recheck_idx;
ALTER TABLE outbox_intents ADD COLUMN resend_requested_at timestamptz;
ALTER TABLE outbox_intents
    DROP CONSTRAINT outbox_intents_claim_check,
    DROP COLUMN provider_key,
    DROP COLUMN key_namespace,
    DROP COLUMN key_generation,
    DROP COLUMN key_first_used_at,
    DROP COLUMN may_have_acted,
    DROP COLUMN claimed_attempt,
    DROP COLUMN budget_from,
    DROP COLUMN recheck_at,
    DROP COLUMN recheck_count;
DROP TABLE outbox_namespace;
