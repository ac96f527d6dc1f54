-- An operator's resend of an in_doubt intent (internal/audit) sets
-- resend_requested_at: the operator has checked that the effect did not
-- happen, so the dispatcher performs the next attempt even past a keyed
-- provider's key window, which it would otherwise treat as ambiguous. The
-- dispatcher clears it when it records that attempt's outcome.
ALTER TABLE outbox_intents ADD COLUMN resend_requested_at timestamptz;
