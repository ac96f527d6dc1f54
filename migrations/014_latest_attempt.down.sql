-- Back to a row in outbox_attempts for every attempt and a stored event for
-- every transition: what the intents' rows say is written out first.
DROP VIEW outbox_intent_events;
DROP VIEW outbox_intent_attempts;

INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error)
SELECT i.id, i.attempt_count, i.attempt_started_at, i.attempt_finished_at, i.attempt_outcome, i.attempt_http_status,
    i.attempt_provider_ref, i.attempt_replayed, i.attempt_error
FROM outbox_intents i
WHERE i.attempt_count > 0 AND i.attempt_started_at IS NOT NULL
ON CONFLICT (intent_id, attempt) DO NOTHING;

INSERT INTO outbox_events (intent_id, at, actor, from_state, to_state, reason)
SELECT i.id, i.created_at, coalesce('consumer:' || i.consumer, 'recorder'), NULL, 'pending', 'recorded'
FROM outbox_intents i
WHERE NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.intent_id = i.id AND e.from_state IS NULL);

INSERT INTO outbox_events (intent_id, at, actor, from_state, to_state, reason)
SELECT i.id, i.finished_at, 'dispatcher', 'dispatching', 'succeeded',
    CASE WHEN i.attempt_replayed THEN 'provider replayed the first response for the key' ELSE '' END
FROM outbox_intents i
WHERE i.state = 'succeeded' AND i.attempt_outcome = 'succeeded'
  AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.intent_id = i.id AND e.to_state = 'succeeded');

ALTER TABLE outbox_intents
    DROP CONSTRAINT outbox_intents_attempt_check,
    DROP COLUMN attempt_error,
    DROP COLUMN attempt_replayed,
    DROP COLUMN attempt_provider_ref,
    DROP COLUMN attempt_http_status,
    DROP COLUMN attempt_outcome,
    DROP COLUMN attempt_finished_at;
