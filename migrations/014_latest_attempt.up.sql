-- An intent's row holds its latest attempt, and outbox_attempts every
-- other (docs/DESIGN.md, "The price of one intent in Postgres"): a claim
-- moves the attempt before it there, and a first attempt that succeeds
-- writes no attempt row at all, only the intent's own. So does the audit
-- trail: outbox_events holds every transition but the two the intent's row
-- already says, a plain intent's recording (created_at, and its consumer)
-- and the success the provider answered to the attempt the dispatcher made
-- (finished_at, and the attempt). The views below give every attempt and every event, stored or
-- said by the row, and are what readers read.
ALTER TABLE outbox_intents
    ADD COLUMN attempt_finished_at timestamptz,
    ADD COLUMN attempt_outcome text,
    ADD COLUMN attempt_http_status integer,
    ADD COLUMN attempt_provider_ref text,
    ADD COLUMN attempt_replayed boolean NOT NULL DEFAULT false,
    ADD COLUMN attempt_error text,
    ADD CONSTRAINT outbox_intents_attempt_check CHECK (
        (attempt_finished_at IS NULL) = (attempt_outcome IS NULL)
        AND attempt_outcome IN ('succeeded', 'retry', 'failed', 'ambiguous'));

-- Every attempt: those moved to outbox_attempts, and the latest where the
-- intent's row holds it. (Intents attempted before this migration have
-- their latest attempt in outbox_attempts already; it is the one shown.)
CREATE VIEW outbox_intent_attempts AS
SELECT a.id, a.intent_id, a.attempt, a.started_at, a.finished_at, a.outcome, a.http_status, a.provider_ref,
    a.replayed, a.error
FROM outbox_attempts a
UNION ALL
SELECT NULL, i.id, i.attempt_count, i.attempt_started_at, i.attempt_finished_at, i.attempt_outcome,
    i.attempt_http_status, i.attempt_provider_ref, i.attempt_replayed, i.attempt_error
FROM outbox_intents i
WHERE i.attempt_count > 0 AND i.attempt_started_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM outbox_attempts a WHERE a.intent_id = i.id AND a.attempt = i.attempt_count);

-- Every event: those stored, an intent's recording where no event says it
-- (actor as recording writes it: the consumer, or "recorder" outside one),
-- and a success no event says (the dispatcher's, from its latest attempt).
-- Ordered by (at, id): the recording first, a success last.
CREATE VIEW outbox_intent_events AS
SELECT e.id, e.intent_id, e.at, e.actor, e.from_state, e.to_state, e.reason, e.action_id
FROM outbox_events e
UNION ALL
SELECT NULL, i.id, i.created_at, coalesce('consumer:' || i.consumer, 'recorder'), NULL, 'pending', 'recorded', NULL
FROM outbox_intents i
WHERE NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.intent_id = i.id AND e.from_state IS NULL)
UNION ALL
SELECT NULL, i.id, i.finished_at, 'dispatcher', 'dispatching', 'succeeded',
    CASE WHEN i.attempt_replayed THEN 'provider replayed the first response for the key' ELSE '' END, NULL
FROM outbox_intents i
WHERE i.state = 'succeeded' AND i.attempt_outcome = 'succeeded'
  AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.intent_id = i.id AND e.to_state = 'succeeded');
