package audit

// The audit's SQL, in one place. Tables are created by
// migrations/001 to 003. Every write is internal/intentstore's.

// intentColumns is what every query returning intents selects, in the order
// scanIntent reads.
const intentColumns = `id, idempotency_key, kind, provider, name, coalesce(consumer, ''), coalesce(message_id, ''),
    coalesce(reference, ''), payload, state, attempt_count, coalesce(provider_ref, ''), coalesce(last_error, ''),
    created_at, updated_at, finished_at, coalesce(provider_key, ''), coalesce(key_namespace, ''), key_generation,
    may_have_acted, recheck_at, coalesce(ordering_key, '')`

// listIntentsSQL is List's keyset query: a NULL parameter does not filter;
// $9 is the id of the previous page's last intent.
const listIntentsSQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE ($1::text[] IS NULL OR state = ANY($1))
  AND ($2::text[] IS NULL OR kind = ANY($2))
  AND ($3::text[] IS NULL OR provider = ANY($3))
  AND ($4::text IS NULL OR consumer = $4)
  AND ($5::text IS NULL OR message_id = $5)
  AND ($6::text IS NULL OR reference = $6)
  AND ($7::timestamptz IS NULL OR created_at >= $7)
  AND ($8::timestamptz IS NULL OR created_at < $8)
  AND ($9::bigint IS NULL OR id < $9)
ORDER BY id DESC
LIMIT $10`

const intentByIDSQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE id = $1`

const intentByKeySQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE idempotency_key = $1`

// afterSQL lists the intents one comes after (intents.After).
const afterSQL = `
SELECT d.after_id, a.idempotency_key, a.state, d.fill
FROM outbox_intent_dependencies d
JOIN outbox_intents a ON a.id = d.after_id
WHERE d.intent_id = $1
ORDER BY d.after_id`

const attemptsSQL = `
SELECT id, intent_id, attempt, started_at, finished_at, coalesce(outcome, ''), coalesce(http_status, 0),
    coalesce(provider_ref, ''), replayed, coalesce(error, '')
FROM outbox_attempts
WHERE intent_id = $1
ORDER BY attempt, id`

const eventsSQL = `
SELECT id, intent_id, at, actor, coalesce(from_state, ''), to_state, reason
FROM outbox_events
WHERE intent_id = $1
ORDER BY id`

const countByKindStateSQL = `
SELECT kind, state, count(*)
FROM outbox_intents
GROUP BY kind, state`

// oldestPendingAgeSQL measures by the database's clock, in microseconds;
// NULL when nothing is pending or dispatching.
const oldestPendingAgeSQL = `
SELECT (extract(epoch FROM now() - min(created_at)) * 1000000)::bigint
FROM outbox_intents
WHERE state IN ('pending', 'dispatching')`

// activitySQL is Activity's one read: every intent that was waiting,
// pending or dispatching at some point of the window, grouped by state and by the
// buckets ($1 is the window's start, $2 a bucket's length in seconds) of
// its creation (-1: before the window) and of its end (when it finished,
// or last changed for an in_doubt one; NULL while still waiting, pending
// or dispatching). Each branch is served by an index: the unfinished one on
// (state, created_at) and the one on finished_at.
const activitySQL = `
WITH touched AS (
    SELECT state, created_at, NULL::timestamptz AS ended_at
    FROM outbox_intents
    WHERE state IN ('waiting', 'pending', 'dispatching')
  UNION ALL
    SELECT state, created_at, finished_at
    FROM outbox_intents
    WHERE finished_at IS NOT NULL AND finished_at >= $1
  UNION ALL
    SELECT state, created_at, updated_at
    FROM outbox_intents
    WHERE state = 'in_doubt' AND updated_at >= $1
)
SELECT state,
    greatest(-1, floor(extract(epoch FROM created_at - $1::timestamptz) / $2::float8))::int,
    floor(extract(epoch FROM ended_at - $1::timestamptz) / $2::float8)::int,
    count(*)
FROM touched
GROUP BY 1, 2, 3`

// payloadSQL reads an intent's payload as recorded, for Reveal.
const payloadSQL = `SELECT payload FROM outbox_intents WHERE id = $1`
