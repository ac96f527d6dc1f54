package chaos

// The suite's own table: one business row per handled message, with no
// unique constraint, so a message handled twice would show as two rows.
const createOrdersSQL = `
CREATE TABLE IF NOT EXISTS chaos_orders (
    consumer     text        NOT NULL,
    message_id   text        NOT NULL,
    amount_cents integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
)`

const insertOrderSQL = `INSERT INTO chaos_orders (consumer, message_id, amount_cents) VALUES ($1, $2, $3)`

// terminateBackendsSQL terminates each client backend of the current
// database, other than the caller's, with probability $1.
const terminateBackendsSQL = `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE datname = current_database()
  AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
  AND random() < $1`

// openCountsSQL counts intents still to be worked (in_doubt ones with a
// look-up still scheduled included), and dispatch jobs left
// running longer than $1 microseconds (orphans of killed dispatchers that
// River's rescuer has not taken back yet).
const openCountsSQL = `
SELECT
    (SELECT count(*) FROM outbox_intents),
    (SELECT count(*) FROM outbox_intents WHERE state IN ('pending', 'dispatching')
        OR (state = 'in_doubt' AND recheck_at IS NOT NULL)),
    (SELECT count(*) FROM river_job
      WHERE kind = 'outbox_dispatch' AND state = 'running'
        AND attempted_at < now() - $1::bigint * interval '1 microsecond')`

const intentsSQL = `
SELECT i.id, i.kind, i.state, coalesce(i.consumer, ''), coalesce(i.message_id, ''), i.attempt_count, coalesce(i.last_error, ''),
       i.may_have_acted, coalesce(i.provider_ref, ''), i.recheck_at IS NOT NULL,
       coalesce(e.actor, ''), coalesce(e.to_state, '')
FROM outbox_intents i
LEFT JOIN LATERAL (
    SELECT actor, to_state FROM outbox_intent_events WHERE intent_id = i.id ORDER BY at DESC, id DESC NULLS LAST LIMIT 1
) e ON true
ORDER BY i.id`

const namespaceSQL = `SELECT namespace FROM outbox_namespace`

// inDoubtEventsSQL counts the in_doubt intents the dispatchers settled by
// a later look-up (from in_doubt, by the dispatcher), and the intents sent
// back to pending after a consistent read proved their effect absent.
const inDoubtEventsSQL = `
SELECT
    (SELECT count(*) FROM outbox_intent_events WHERE actor = 'dispatcher' AND from_state = 'in_doubt'),
    (SELECT count(*) FROM outbox_intent_events WHERE actor = 'dispatcher' AND from_state = 'in_doubt' AND to_state = 'succeeded'),
    (SELECT count(*) FROM outbox_intent_events WHERE to_state = 'pending' AND reason LIKE '%proved it absent%')`

const attemptsSQL = `
SELECT intent_id, attempt, started_at, finished_at, coalesce(outcome, ''), coalesce(http_status, 0), coalesce(error, '')
FROM outbox_intent_attempts
WHERE intent_id = ANY($1)
ORDER BY intent_id, attempt`

// consistencySQL checks the consumer's transaction: every processed marker
// has exactly its two intents (a payment and an email) and one business
// row; every intent recorded by a consumer has its marker.
const consistencySQL = `
SELECT
    (SELECT count(*) FROM outbox_processed_messages WHERE consumer = ANY($1)),
    (SELECT count(*) FROM outbox_processed_messages m WHERE m.consumer = ANY($1) AND (
        SELECT count(*) FILTER (WHERE i.kind = $2) = 1 AND count(*) FILTER (WHERE i.kind = $3) = 1
            AND count(*) FILTER (WHERE i.kind = $4) <= 1 AND count(*) FILTER (WHERE i.kind = $5) <= 1
            AND count(*) FILTER (WHERE i.kind = $6) <= 1
            AND count(*) FILTER (WHERE i.kind NOT IN ($2, $3, $4, $5, $6)) = 0
        FROM outbox_intents i WHERE i.consumer = m.consumer AND i.message_id = m.message_id) IS NOT TRUE),
    (SELECT count(*) FROM outbox_intents i WHERE i.consumer IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM outbox_processed_messages m WHERE m.consumer = i.consumer AND m.message_id = i.message_id)),
    (SELECT count(*) FROM (SELECT DISTINCT consumer, message_id FROM chaos_orders) t),
    (SELECT count(*) FROM (SELECT 1 FROM chaos_orders GROUP BY consumer, message_id HAVING count(*) <> 1) t),
    (SELECT count(*) FROM outbox_processed_messages m WHERE m.consumer = ANY($1)
        AND NOT EXISTS (SELECT 1 FROM chaos_orders o WHERE o.consumer = m.consumer AND o.message_id = m.message_id)),
    (SELECT count(*) FROM outbox_intent_attempts WHERE replayed),
    (SELECT count(*) FROM outbox_intent_events WHERE reason LIKE 'reconciled%')`

// dependentsSQL lists the intents of kinds $1 that come after others (the
// refunds, captures and cancels), with their message's payment: the intent's kind,
// state and amount, the payment's PaymentIntent id, whether every
// predecessor succeeded and when the last of them finished, whether one
// failed or was cancelled, whether one is still in_doubt or waiting, and
// when the intent was first attempted.
const dependentsSQL = `
SELECT f.id, f.kind, f.state, coalesce((f.payload->>'amount')::bigint, 0), coalesce(p.provider_ref, ''),
       coalesce(bool_and(a.state = 'succeeded'), false), max(a.finished_at),
       coalesce(bool_or(a.state IN ('failed', 'cancelled')), false),
       coalesce(bool_or(a.state IN ('in_doubt', 'waiting')), false),
       (SELECT min(t.started_at) FROM outbox_intent_attempts t WHERE t.intent_id = f.id)
FROM outbox_intents f
JOIN outbox_intents p ON p.consumer = f.consumer AND p.message_id = f.message_id AND p.kind = $2
LEFT JOIN outbox_intent_dependencies d ON d.intent_id = f.id
LEFT JOIN outbox_intents a ON a.id = d.after_id
WHERE f.kind = ANY($1)
GROUP BY f.id, p.provider_ref
ORDER BY f.id`
