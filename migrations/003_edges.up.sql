-- The intent's identity at the provider and its claims (DESIGN.md,
-- "Invariants at the edges").

-- One namespace per database: it tells this deployment's objects at a
-- provider from any other deployment's sharing the same account. A database
-- re-created from scratch gets a new one; a restored copy keeps it, and so
-- recognises the effects its intents already caused.
CREATE TABLE outbox_namespace (
    singleton  boolean     PRIMARY KEY DEFAULT true,
    namespace  text        NOT NULL DEFAULT substr(md5(gen_random_uuid()::text), 1, 16),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_namespace_singleton_check CHECK (singleton),
    CONSTRAINT outbox_namespace_namespace_check CHECK (namespace ~ '^[a-z0-9]{8,32}$')
);
INSERT INTO outbox_namespace DEFAULT VALUES;

ALTER TABLE outbox_intents
    -- The idempotency key the provider is sent, with the namespace it
    -- embeds; set by the first claim of each key generation. NULL namespace
    -- with a key: attempted before namespaces existed.
    ADD COLUMN provider_key      text,
    ADD COLUMN key_namespace     text,
    ADD COLUMN key_generation    integer     NOT NULL DEFAULT 0,
    ADD COLUMN key_first_used_at timestamptz,
    -- Sticky: an attempt may have reached the provider. Cleared only when
    -- absence is proven (a new key generation).
    ADD COLUMN may_have_acted    boolean     NOT NULL DEFAULT false,
    -- The attempt that holds the intent while it is dispatching: only its
    -- settle changes the intent's state.
    ADD COLUMN claimed_attempt   integer,
    -- attempt_count when the current attempt budget began (an operator's
    -- resend grants a fresh one).
    ADD COLUMN budget_from       integer     NOT NULL DEFAULT 0,
    -- When an in_doubt intent is next looked up at its provider.
    ADD COLUMN recheck_at        timestamptz,
    ADD COLUMN recheck_count     integer     NOT NULL DEFAULT 0,
    ADD CONSTRAINT outbox_intents_claim_check CHECK ((state = 'dispatching') = (claimed_attempt IS NOT NULL));

-- Existing intents: what was already sent keeps its key, and any attempt
-- that did not end in a known outcome may have acted.
UPDATE outbox_intents i
SET provider_key = CASE WHEN a.first_started IS NOT NULL THEN i.idempotency_key END,
    key_first_used_at = a.first_started,
    may_have_acted = i.state IN ('dispatching', 'in_doubt') OR coalesce(a.unsure, false),
    claimed_attempt = CASE WHEN i.state = 'dispatching' THEN i.attempt_count END,
    budget_from = CASE WHEN i.resend_requested_at IS NOT NULL THEN i.attempt_count ELSE 0 END
FROM (
    SELECT i2.id,
        min(a2.started_at) AS first_started,
        bool_or(a2.outcome IS NULL OR a2.outcome IN ('retry', 'ambiguous')) AS unsure
    FROM outbox_intents i2
    LEFT JOIN outbox_attempts a2 ON a2.intent_id = i2.id
    GROUP BY i2.id
) a
WHERE a.id = i.id;

-- The resend request is replaced by a new key generation and budget.
ALTER TABLE outbox_intents DROP COLUMN resend_requested_at;

-- The recheck job looks for in_doubt intents that are due.
CREATE INDEX outbox_intents_recheck_idx ON outbox_intents (recheck_at) WHERE recheck_at IS NOT NULL;
