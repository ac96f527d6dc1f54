package dispatcher

// The dispatcher's SQL, in one place. Tables are created by
// migrations/001_outbox.up.sql (resend_requested_at by 002).

const loadIntentSQL = `
SELECT id, idempotency_key, kind, provider, payload, state, attempt_count, created_at, resend_requested_at IS NOT NULL
FROM outbox_intents
WHERE id = $1`

// claimForWriteAheadSQL moves a pending intent to dispatching and opens its
// attempt, committed before a call to a provider without a key.
const claimForWriteAheadSQL = `
WITH claimed AS (
    UPDATE outbox_intents
    SET state = 'dispatching', attempt_count = attempt_count + 1, updated_at = now()
    WHERE id = $1 AND state = 'pending'
    RETURNING id, attempt_count
)
INSERT INTO outbox_attempts (intent_id, attempt, started_at)
SELECT id, attempt_count, $2 FROM claimed
RETURNING attempt`

// intentStateSQL reads an intent's state, after the settlement's update in
// the same transaction.
const intentStateSQL = `SELECT state FROM outbox_intents WHERE id = $1`

// closeOpenAttemptSQL records the outcome of a write-ahead attempt.
const closeOpenAttemptSQL = `
UPDATE outbox_attempts
SET finished_at = $3, outcome = $4, http_status = $5, provider_ref = $6, replayed = $7, error = $8
WHERE intent_id = $1 AND attempt = $2 AND outcome IS NULL`

// insertFinishedAttemptSQL records an attempt at a keyed provider, which
// had no write-ahead row.
const insertFinishedAttemptSQL = `
INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// updateIntentOutcomeSQL records a settlement while the intent is still in
// the state the attempt started from ($6), with an event ($8: from $6 to
// $2, reason $9) when asked ($7), and returns how many intents it updated:
// 0 when an operator moved the intent meanwhile. It also clears an
// operator's resend request: it covered the one attempt whose outcome this
// records.
const updateIntentOutcomeSQL = `
WITH updated AS (
    UPDATE outbox_intents
    SET state = $2,
        resend_requested_at = NULL,
        attempt_count = $3,
        provider_ref = coalesce($4, provider_ref),
        last_error = $5,
        updated_at = now(),
        finished_at = CASE WHEN $2 IN ('succeeded', 'failed', 'cancelled') THEN now() END
    WHERE id = $1 AND state = $6
    RETURNING id
),
event AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, 'dispatcher', $6, $2, $8
    FROM updated
    WHERE $7::boolean
)
SELECT count(*) FROM updated`

// completeJobSQL completes the running dispatch job $1 unless its intent $2
// is pending (another attempt is due). It writes what River's JobCompleteTx
// writes for a job without metadata updates (River's
// JobSetStateIfRunningMany with state completed): state completed and
// finalized_at, only while the job is running. River's completer, run after
// the worker returns, then finds the job no longer running and leaves it.
// Sent after the outcome in the same transaction, it commits with it.
const completeJobSQL = `
UPDATE river_job
SET state = 'completed', finalized_at = now()
WHERE id = $1
  AND state = 'running'
  AND (SELECT state FROM outbox_intents WHERE id = $2) <> 'pending'`

// strandedIntentsSQL finds unfinished intents with no live dispatch job.
// River's GIN index on river_job.args serves the containment test.
const strandedIntentsSQL = `
SELECT i.id
FROM outbox_intents i
WHERE i.state IN ('pending', 'dispatching')
  AND i.created_at < now() - ($1::bigint * interval '1 microsecond')
  AND NOT EXISTS (
      SELECT 1 FROM river_job j
      WHERE j.kind = 'outbox_dispatch'
        AND j.args @> jsonb_build_object('intent_id', i.id)
        AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
  )
ORDER BY i.id
LIMIT $2`

// pruneMarkersSQL deletes up to $2 processed markers older than $1
// microseconds (the dedup window), oldest first, skipping rows another
// transaction holds.
const pruneMarkersSQL = `
WITH doomed AS (
    SELECT consumer, message_id FROM outbox_processed_messages
    WHERE processed_at < now() - ($1::bigint * interval '1 microsecond')
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_processed_messages p
USING doomed d
WHERE p.consumer = d.consumer AND p.message_id = d.message_id`

// pruneIntentsSQL deletes up to $2 terminal intents that finished more than
// $1 microseconds ago (the audit retention), oldest first; their attempts
// and events go with them (ON DELETE CASCADE). in_doubt and unfinished
// intents have no finished_at and are never touched.
const pruneIntentsSQL = `
WITH doomed AS (
    SELECT id FROM outbox_intents
    WHERE finished_at < now() - ($1::bigint * interval '1 microsecond')
      AND state IN ('succeeded', 'failed', 'cancelled')
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_intents i
USING doomed d
WHERE i.id = d.id`
