package audit

import (
	"strings"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// The audit's SQL, in one place. Tables are created by
// migrations/001 to 011. Every write is internal/intentstore's.

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

// listUnfinishedSQL is listIntentsSQL for a filter that names only states
// an intent is in before it finishes: the partial index on unfinished
// intents serves it, so an in_doubt list costs what is unfinished, not
// what is retained.
var listUnfinishedSQL = strings.Replace(listIntentsSQL, "WHERE ", "WHERE finished_at IS NULL\n  AND ", 1)

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

// countByKindStateSQL counts intents by kind and state: the finished ones
// from the counts internal/intentstore keeps (migration 007), the others
// live through the index on unfinished intents. Its cost grows with the
// unfinished intents and the kinds, not with the retained history.
const countByKindStateSQL = `
SELECT kind, state, sum(n)::bigint
FROM outbox_intent_counts
GROUP BY kind, state
HAVING sum(n) <> 0
UNION ALL
SELECT kind, state, count(*)
FROM outbox_intents
WHERE finished_at IS NULL
GROUP BY kind, state`

// oldestPendingAgeSQL measures by the database's clock, in microseconds,
// the age of the oldest intent in one of the states $1 (pending or
// dispatching: a waiting intent waits for others, not for the dispatcher);
// NULL when there is none.
const oldestPendingAgeSQL = `
SELECT (extract(epoch FROM now() - min(created_at)) * 1000000)::bigint
FROM outbox_intents
WHERE finished_at IS NULL AND state = ANY($1)`

// activitySQL is Activity's one read, one snapshot: rows of (rolled up,
// state, creation bucket, end bucket, count), buckets counted from $1, the
// window's start, $2 seconds long, -1 for a creation before the window.
//
// Live rows, rolled up false: the intents waiting for an attempt (in one of
// the states $3: no end), the ones now in_doubt that last changed in the
// window (their end: that change), and those that finished in the window
// outside the rolled-up range of finished_at (migration 009). Each branch
// is served by an index: the one on unfinished intents, the one on
// finished_at.
//
// Rolled-up rows, when $4 (the window starts on a minute and its buckets
// are whole minutes), from the window's minutes: intents created in a
// minute and finished in the rolled-up range (a creation, no end), and the
// ones that succeeded or otherwise finished in a minute (an end, no
// creation). Without $4 the rolled-up range counts as empty and every
// finished intent is read live.
const activitySQL = `
WITH rolled AS MATERIALIZED (
    SELECT rolled_from, rolled_until FROM outbox_activity_rollup WHERE $4
  UNION ALL
    SELECT 'infinity', 'infinity' WHERE NOT $4
),
touched AS (
    SELECT state, created_at, NULL::timestamptz AS ended_at
    FROM outbox_intents
    WHERE finished_at IS NULL AND state = ANY($3)
  UNION ALL
    SELECT state, created_at, updated_at
    FROM outbox_intents
    WHERE finished_at IS NULL AND state = 'in_doubt' AND updated_at >= $1
  UNION ALL
    SELECT state, created_at, finished_at
    FROM outbox_intents
    WHERE finished_at >= $1 AND finished_at < (SELECT rolled_from FROM rolled)
  UNION ALL
    SELECT state, created_at, finished_at
    FROM outbox_intents
    WHERE finished_at >= greatest($1, (SELECT rolled_until FROM rolled))
)
SELECT false, state,
    greatest(-1, floor(extract(epoch FROM created_at - $1::timestamptz) / $2::float8))::int,
    floor(extract(epoch FROM ended_at - $1::timestamptz) / $2::float8)::int,
    count(*)
FROM touched
GROUP BY 2, 3, 4
UNION ALL
SELECT true, r.state, r.created, r.ended, r.n
FROM outbox_activity_minutes m
CROSS JOIN LATERAL (SELECT floor(extract(epoch FROM m.minute - $1::timestamptz) / $2::float8)::int) AS mb (b)
CROSS JOIN LATERAL (VALUES ('', mb.b, NULL::int, m.recorded),
                           ('succeeded', NULL, mb.b, m.succeeded),
                           ('finished', NULL, mb.b, m.finished - m.succeeded)) AS r (state, created, ended, n)
WHERE $4 AND m.minute >= $1 AND r.n <> 0`

// payloadSQL reads an intent's payload as recorded, for Reveal.
const payloadSQL = `SELECT payload FROM outbox_intents WHERE id = $1`

// waitingStates are the states of an intent waiting for an attempt: every
// state it can be in before it finishes but in_doubt, which waits for an
// operator or a look-up instead. From intenttype, so a state added there
// is counted without a change here.
func waitingStates() []string {
	var out []string
	for _, s := range intenttype.States {
		if !s.Terminal() && s != intenttype.StateInDoubt {
			out = append(out, string(s))
		}
	}
	return out
}

// onlyUnfinished reports whether every state of a non-empty list is one an
// intent is in before it finishes.
func onlyUnfinished(states []string) bool {
	for _, s := range states {
		if intenttype.State(s).Terminal() {
			return false
		}
	}
	return len(states) > 0
}
