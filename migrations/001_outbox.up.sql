-- Processed markers: one row per (consumer, message) that was handled. The
-- primary key is the idempotent consumer: a redelivery's insert conflicts.
CREATE TABLE outbox_processed_messages (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id),
    CONSTRAINT outbox_processed_messages_consumer_check CHECK (length(consumer) BETWEEN 1 AND 200),
    CONSTRAINT outbox_processed_messages_message_id_check CHECK (length(message_id) BETWEEN 1 AND 200)
);
CREATE INDEX outbox_processed_messages_processed_at_idx ON outbox_processed_messages (processed_at);

-- Intents: the system of record for every external effect. consumer and
-- message_id name the message that recorded it (NULL for intents recorded
-- outside a consumer); they are not a foreign key because processed markers
-- are pruned after the dedup window while intents stay for the audit.
CREATE TABLE outbox_intents (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL,
    kind            text        NOT NULL,
    provider        text        NOT NULL,
    name            text        NOT NULL DEFAULT '',
    consumer        text,
    message_id      text,
    reference       text,
    payload         jsonb       NOT NULL,
    state           text        NOT NULL DEFAULT 'pending',
    attempt_count   integer     NOT NULL DEFAULT 0,
    provider_ref    text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    CONSTRAINT outbox_intents_idempotency_key_key UNIQUE (idempotency_key),
    CONSTRAINT outbox_intents_idempotency_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT outbox_intents_state_check CHECK (state IN ('pending', 'dispatching', 'succeeded', 'failed', 'in_doubt', 'cancelled')),
    CONSTRAINT outbox_intents_finished_check CHECK ((finished_at IS NOT NULL) = (state IN ('succeeded', 'failed', 'cancelled')))
);
-- The sweep and the operator views look for unfinished intents by age.
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (state, created_at)
    WHERE state IN ('pending', 'dispatching', 'in_doubt');
CREATE INDEX outbox_intents_message_idx ON outbox_intents (consumer, message_id);
CREATE INDEX outbox_intents_reference_idx ON outbox_intents (reference) WHERE reference IS NOT NULL;
CREATE INDEX outbox_intents_finished_at_idx ON outbox_intents (finished_at) WHERE finished_at IS NOT NULL;

-- Attempts: one row per try at an intent. For providers without an
-- idempotency key the row is committed (outcome NULL) before the call: a row
-- still open after the call is the evidence of an ambiguous attempt.
CREATE TABLE outbox_attempts (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id    bigint      NOT NULL REFERENCES outbox_intents (id) ON DELETE CASCADE,
    attempt      integer     NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz,
    outcome      text,
    http_status  integer,
    provider_ref text,
    replayed     boolean     NOT NULL DEFAULT false,
    error        text,
    CONSTRAINT outbox_attempts_intent_attempt_key UNIQUE (intent_id, attempt),
    CONSTRAINT outbox_attempts_outcome_check CHECK (outcome IN ('succeeded', 'retry', 'failed', 'ambiguous')),
    CONSTRAINT outbox_attempts_finished_check CHECK ((finished_at IS NULL) = (outcome IS NULL))
);

-- Events: the append-only log of every state change, with who and why.
CREATE TABLE outbox_events (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id  bigint      NOT NULL REFERENCES outbox_intents (id) ON DELETE CASCADE,
    at         timestamptz NOT NULL DEFAULT now(),
    actor      text        NOT NULL,
    from_state text,
    to_state   text        NOT NULL,
    reason     text        NOT NULL DEFAULT ''
);
CREATE INDEX outbox_events_intent_idx ON outbox_events (intent_id, id);

-- Events are history: they may be deleted with their intent by retention,
-- but never rewritten.
CREATE FUNCTION outbox_events_forbid_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outbox_events is append-only';
END;
$$;
CREATE TRIGGER outbox_events_append_only BEFORE UPDATE ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outbox_events_forbid_update();
