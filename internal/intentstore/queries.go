package intentstore

// The statements on the outbox's tables that change them, and on the River
// rows they touch, but those of ordering, which are beside the Go that
// queues them (order.go). Tables are created by migrations/001 to 011.
// Parameters are named (pgx.NamedArgs); the statements run for every intent
// are rewritten into positional form once (named.go).

const namespaceSQL = `SELECT namespace FROM outbox_namespace`

// insertMarkerSQL is the idempotent consumer. ON CONFLICT DO NOTHING makes a
// concurrent duplicate wait on the unique index until the first transaction
// ends, then return no row instead of failing: the transaction stays usable
// and the caller learns it is a duplicate.
const insertMarkerSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
VALUES (@consumer, @message_id)
ON CONFLICT (consumer, message_id) DO NOTHING`

// insertMarkersSQL is insertMarkerSQL for a batch: it returns the markers it
// inserted, so the caller learns which messages are new. Rows are inserted
// in (consumer, message_id) order, so two batches that share messages wait
// on each other's markers in the same order and cannot deadlock.
const insertMarkersSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
SELECT consumer, message_id
FROM unnest(@consumers::text[], @message_ids::text[]) AS t(consumer, message_id)
ORDER BY consumer, message_id
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING consumer, message_id`

// insertIntentsSQL stores intents, their "recorded" events and their River
// dispatch jobs in one statement, returning each stored intent's id with its
// key, in id order (the caller checks the keys against its input, and
// puts them back in input order by key should they differ). consumer,
// message_id, the trace context and the event's actor are per row, so one
// statement serves a whole batch of messages. It neither numbers nor sorts
// its input, and the only join is the events' hash join to their actors:
// numbering, sorting and joining the input back for the output was, for a
// batch of a hundred intents, most of what the statement cost beyond the
// rows themselves.
//
// The river_job rows are exactly what River's InsertManyTx writes for
// DispatchArgs (see dispatchJob and TestDispatchJobsMatchRiver): args
// {"intent_id":N}; kind, queue, priority, max_attempts and the unique-states
// bitmask from DispatchArgs.InsertOpts; metadata and tags empty; created_at
// and scheduled_at the database's now(); state available; and unique_key
// River's ByArgs key, the SHA-256 of "&kind=<kind>&args=<args with sorted
// keys, compact>". So River's unique index sees these jobs as River's own:
// the sweep's insert of the same intent is skipped as a duplicate while this
// job is live. The conflict clause is River's; a fresh intent id cannot
// conflict, it is there so that a conflict would be skipped as River skips
// it, never fail the message.
const insertIntentsSQL = `
WITH input AS (
    SELECT *
    FROM unnest(@keys::text[], @kinds::text[], @providers::text[], @names::text[], @payloads::jsonb[],
                @references::text[], @consumers::text[], @message_ids::text[], @actors::text[],
                @trace_parents::text[], @trace_states::text[])
        AS t(idempotency_key, kind, provider, name, payload, reference, consumer, message_id, actor,
             trace_parent, trace_state)
),
stored AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id,
                                trace_parent, trace_state)
    SELECT idempotency_key, kind, provider, name, payload, reference, consumer, message_id, trace_parent, trace_state
    FROM input
    RETURNING id, idempotency_key
),
inserted AS (
    SELECT stored.id, input.actor
    FROM stored
    JOIN input USING (idempotency_key)
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT id, actor, 'pending', 'recorded'
    FROM inserted
),
` + insertJobsCTE + `
SELECT id, idempotency_key FROM stored ORDER BY id`

// insertIntentSQL is insertIntentsSQL for the common case of one intent,
// with plain parameters instead of arrays: less work for both sides.
const insertIntentSQL = `
WITH stored AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id,
                                trace_parent, trace_state)
    VALUES (@key, @kind, @provider, @name, @payload, @reference, @consumer, @message_id, @trace_parent, @trace_state)
    RETURNING id
),
inserted AS (
    SELECT id FROM stored
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT id, @actor, 'pending', 'recorded'
    FROM inserted
),
` + insertJobsCTE + `
SELECT id FROM stored`

// insertJobsCTE inserts a River dispatch job for every row of the CTE
// "inserted" (column id): the intents to dispatch now; see
// insertIntentsSQL.
const insertJobsCTE = `jobs AS (
    INSERT INTO river_job (args, kind, queue, priority, max_attempts, state, metadata, tags, unique_key, unique_states)
    SELECT jsonb_build_object('intent_id', id), @job_kind::text, @job_queue::text, @job_priority::smallint, @job_max_attempts::smallint,
        'available', '{}'::jsonb, '{}'::varchar(255)[],
        sha256(convert_to('&kind=' || @job_kind::text || '&args={"intent_id":' || id::text || '}', 'UTF8')),
        nullif(@job_unique_states::integer, 0)::bit(8)
    FROM inserted
    ORDER BY id
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL
            AND unique_states IS NOT NULL
            AND river_job_state_in_bitmask(unique_states, state)
        DO NOTHING
)`

// enqueueSQL inserts dispatch jobs for existing intents that are pending or
// dispatching (the sweep, an operator's resend, a proven absence), skipping
// any intent that has a live job.
const enqueueSQL = `
WITH inserted AS (
    SELECT id FROM outbox_intents
    WHERE id = ANY(@ids::bigint[]) AND state IN ('pending', 'dispatching')
),
` + insertJobsCTE + `
SELECT count(*) FROM inserted`

// notifySQL wakes dispatchers listening for new jobs on the dispatch queue,
// as River's own insert does: the channel is River's insert topic in the
// current schema and the payload names the queue. Sent inside a transaction,
// it is delivered when (and only if) it commits.
const notifySQL = `SELECT pg_notify(current_schema() || '.river_insert', @notice)`

// intentColumns is what loadSQL reads, in the order scanRow reads.
const intentColumns = `id, idempotency_key, kind, provider, payload, state, attempt_count, budget_from,
    may_have_acted, claimed_attempt, coalesce(provider_key, ''), coalesce(key_namespace, ''), key_generation,
    key_first_used_at, recheck_count, created_at, coalesce(trace_parent, ''), coalesce(trace_state, ''),
    (SELECT max(a.started_at) FROM outbox_attempts a WHERE a.intent_id = outbox_intents.id)`

const loadSQL = `SELECT ` + intentColumns + ` FROM outbox_intents WHERE id = @id`

// claimSQL is the claim every provider call happens under: one statement,
// so one implicit transaction and one round trip, committed before the call.
// It moves the intent from the state and attempt count the worker saw to
// dispatching, records which attempt holds it, fixes the key the provider is
// sent (the first claim of a key generation derives it, and starts the key's
// window), and opens the attempt's row. Taking over an attempt found open
// after a crash (from dispatching) closes that attempt as ambiguous and
// makes "may have acted" durable. No row: the intent moved meanwhile.
const claimSQL = `
WITH claimed AS (
    UPDATE outbox_intents
    SET state = 'dispatching',
        attempt_count = attempt_count + 1,
        claimed_attempt = attempt_count + 1,
        provider_key = coalesce(provider_key, @provider_key),
        key_namespace = CASE WHEN provider_key IS NULL THEN @namespace ELSE key_namespace END,
        key_first_used_at = coalesce(key_first_used_at, @now),
        may_have_acted = may_have_acted OR @take_over,
        updated_at = now()
    WHERE id = @id AND state = @from::text AND attempt_count = @seen_attempts AND key_generation = @seen_generation
    RETURNING id, attempt_count, provider_key, coalesce(key_namespace, '') AS key_namespace, key_first_used_at
),
closed AS (
    UPDATE outbox_attempts
    SET finished_at = @now, outcome = 'ambiguous', error = @take_over_error
    WHERE @take_over AND intent_id = @id AND outcome IS NULL AND EXISTS (SELECT 1 FROM claimed)
),
opened AS (
    INSERT INTO outbox_attempts (intent_id, attempt, started_at)
    SELECT id, attempt_count, @now FROM claimed
)
SELECT attempt_count, provider_key, key_namespace, key_first_used_at FROM claimed`

// loadClaimSQL reads an intent (the columns of loadSQL, as they were before
// this statement) and, when ClaimRules say the dispatcher would attempt it
// without a second look, claims it from pending as claimSQL does: the
// claim's columns are NULL when it did not. The rules: pending, no attempt
// that may have acted, attempts left in the budget (@max_attempts, or the
// kind's), a provider served here (@providers), and a provider key already
// fixed or derived whole within the provider's limit (@max_key_lengths):
// "namespace.generation/key", as intenttype.ProviderKey derives it when it
// fits. The guard is re-checked on the row as it is when the update runs,
// so of two jobs for one intent only one claims it.
const loadClaimSQL = `
WITH rules AS (
    SELECT i.id,
        coalesce(k.max_attempts, @max_attempts::integer) AS max_attempts,
        p.max_key_length,
        @namespace::text || '.' || i.key_generation::text || '/' || i.idempotency_key AS derived_key
    FROM outbox_intents i
    JOIN unnest(@providers::text[], @max_key_lengths::integer[]) AS p(name, max_key_length) ON p.name = i.provider
    LEFT JOIN unnest(@kinds::text[], @kind_max_attempts::integer[]) AS k(kind, max_attempts) ON k.kind = i.kind
    WHERE i.id = @id
),
claimed AS (
    UPDATE outbox_intents i
    SET state = 'dispatching',
        attempt_count = i.attempt_count + 1,
        claimed_attempt = i.attempt_count + 1,
        provider_key = coalesce(i.provider_key, r.derived_key),
        key_namespace = CASE WHEN i.provider_key IS NULL THEN @namespace::text ELSE i.key_namespace END,
        key_first_used_at = coalesce(i.key_first_used_at, @now),
        updated_at = now()
    FROM rules r
    WHERE i.id = r.id
      AND i.state = 'pending'
      AND NOT i.may_have_acted
      AND i.attempt_count - i.budget_from < r.max_attempts
      AND (i.provider_key IS NOT NULL OR octet_length(r.derived_key) <= r.max_key_length)
    RETURNING i.attempt_count AS claim_attempt, i.provider_key AS claim_key,
        coalesce(i.key_namespace, '') AS claim_namespace, i.key_first_used_at AS claim_first_used
),
opened AS (
    INSERT INTO outbox_attempts (intent_id, attempt, started_at)
    SELECT @id, claim_attempt, @now FROM claimed
)
SELECT ` + intentColumns + `, c.claim_attempt, c.claim_key, c.claim_namespace, c.claim_first_used
FROM outbox_intents
LEFT JOIN claimed c ON true
WHERE outbox_intents.id = @id`

// releaseUnsentSQL closes, as not called, the open attempt of intent @id
// started at @claimed_at (the claim whose answer its claimer lost), and
// moves the intent back to pending if that attempt still holds it (as a
// retry under the same key does: no event; the attempt row and last_error
// say why). Safe to repeat: once closed, nothing matches.
const releaseUnsentSQL = `
WITH closed AS (
    UPDATE outbox_attempts
    SET finished_at = @finished_at, outcome = 'retry', error = @error
    WHERE intent_id = @id AND started_at = @claimed_at AND outcome IS NULL
    RETURNING attempt
),
released AS (
    UPDATE outbox_intents i
    SET state = 'pending', claimed_attempt = NULL, last_error = @error, updated_at = now()
    FROM closed c
    WHERE i.id = @id AND i.state = 'dispatching' AND i.claimed_attempt = c.attempt
    RETURNING i.id
)
SELECT count(*) FROM released`

// settleSQL moves an intent as a settlement says, only while the guard
// holds: from dispatching, only the attempt that holds the claim; from
// pending or in_doubt, only the state, attempt count and key generation the
// decision was made from. Late or stale settlements change nothing (0 rows).
// With close_attempt, it first records the outcome of the claimed attempt
// it settles; a late outcome (the claim was taken over) is still recorded,
// for the audit. "May have acted" only ever turns on, except with a new key generation
// (absence proven), which also forgets the old key and its window. An event
// is appended for every change of state but the routine ones (an attempt's
// claim, and a retry back to pending under the same key).
const settleSQL = `
WITH closed AS (
    UPDATE outbox_attempts
    SET finished_at = @finished_at, outcome = @outcome, http_status = @http_status,
        provider_ref = @attempt_provider_ref, replayed = @replayed, error = @attempt_error
    WHERE @close_attempt AND intent_id = @id AND attempt = @attempt
      AND (outcome IS NULL OR (outcome = 'ambiguous' AND starts_with(error, @take_over_prefix)))
),
updated AS (
    UPDATE outbox_intents
    SET state = @to::text,
        claimed_attempt = NULL,
        may_have_acted = (may_have_acted OR @may_have_acted) AND NOT @new_generation,
        key_generation = key_generation + CASE WHEN @new_generation THEN 1 ELSE 0 END,
        provider_key = CASE WHEN @new_generation THEN NULL ELSE provider_key END,
        key_namespace = CASE WHEN @new_generation THEN NULL ELSE key_namespace END,
        key_first_used_at = CASE WHEN @new_generation THEN NULL ELSE key_first_used_at END,
        provider_ref = coalesce(@provider_ref, provider_ref),
        last_error = @last_error,
        recheck_at = @recheck_at,
        recheck_count = @recheck_count,
        updated_at = now(),
        finished_at = CASE WHEN @to::text IN ('succeeded', 'failed', 'cancelled') THEN now() END
    WHERE id = @id
      AND state = @from::text
      AND CASE WHEN @from::text = 'dispatching' THEN claimed_attempt = @attempt
               ELSE attempt_count = @seen_attempts AND key_generation = @seen_generation END
    RETURNING id
),
event AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, 'dispatcher', @from::text, @to::text, @reason
    FROM updated
    WHERE @to::text <> @from::text AND (@to::text <> 'pending' OR @new_generation)
)
SELECT count(*) FROM updated`

// settledSQL ends a settlement, after settleSQL in its transaction, and
// returns whether it adopted a late success and the intent's state after
// it. With adopt, it settles an in_doubt intent as succeeded when an
// attempt whose claim was taken over (a rescued worker) learns late that
// the provider performed the effect, under the same key generation: a
// known outcome is never discarded. Then it deletes the running dispatch
// job @job_id (0: none) unless the intent still needs it (pending or
// dispatching), only while the job is running. Deleted rather than
// completed: the intent's row and its attempts are the record, and a
// completed job is only a row with seven indexes written once more (a
// non-HOT update) and deleted a day later by River's cleaner. River's
// completer, run after the worker returns, finds no running job by that id
// and leaves it (its update matches no row).
//
// The job is found by its primary key alone, its state compared as text:
// state = 'running' also matches the leading column of River's fetch index
// (state, queue, priority, scheduled_at, id), and when the statistics were
// taken with no job running (an ANALYZE between two bursts, the rows of a
// quiet queue) the generic plan walks that index instead, through every
// running entry and every dead one a completed job left: 257 buffers a
// settlement instead of 3, measured under load, and half the sustainable
// end-to-end rate.
const settledSQL = `
WITH adopted AS (
    UPDATE outbox_intents
    SET state = 'succeeded', provider_ref = coalesce(@provider_ref, provider_ref), last_error = NULL,
        recheck_at = NULL, updated_at = now(), finished_at = now()
    WHERE @adopt AND id = @id AND state = 'in_doubt' AND key_generation = @seen_generation
    RETURNING id, state
),
adopted_event AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, 'dispatcher', 'in_doubt', 'succeeded', @reason FROM adopted
),
after AS (
    SELECT coalesce((SELECT state FROM adopted), (SELECT state FROM outbox_intents WHERE id = @id)) AS state
),
done AS (
    DELETE FROM river_job
    WHERE id = @job_id AND state::text = 'running' AND (SELECT state FROM after) NOT IN ('pending', 'dispatching')
)
SELECT (SELECT count(*) FROM adopted), (SELECT state FROM after)`

// strandedSQL finds unfinished intents with no live dispatch job. River's
// GIN index on river_job.args serves the containment test.
const strandedSQL = `
SELECT i.id
FROM outbox_intents i
WHERE i.finished_at IS NULL AND i.state IN ('pending', 'dispatching')
  AND i.updated_at < now() - (@grace_us::bigint * interval '1 microsecond')
  AND NOT EXISTS (
      SELECT 1 FROM river_job j
      WHERE j.kind = @job_kind
        AND j.args @> jsonb_build_object('intent_id', i.id)
        AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
  )
ORDER BY i.id
LIMIT @limit`

// dueRechecksSQL finds in_doubt intents of the given providers whose next
// look-up at the provider is due, among the unfinished ones
// (outbox_intents_unfinished_idx). Only the providers the caller serves:
// the due look-ups of another's would fill every batch and starve the rest.
const dueRechecksSQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE finished_at IS NULL AND recheck_at <= @now AND state = 'in_doubt'
  AND provider = ANY(@providers::text[])
ORDER BY recheck_at
LIMIT @limit`

// pruneMarkersSQL deletes up to @limit processed markers older than the
// dedup window, oldest first, skipping rows another transaction holds.
const pruneMarkersSQL = `
WITH doomed AS (
    SELECT consumer, message_id FROM outbox_processed_messages
    WHERE processed_at < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY processed_at
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_processed_messages p
USING doomed d
WHERE p.consumer = d.consumer AND p.message_id = d.message_id`

// pruneIntentsSQL deletes up to @limit terminal intents that finished before
// the audit retention, oldest first; their attempts and events go with them
// (ON DELETE CASCADE). in_doubt and unfinished intents have no finished_at
// and are never touched. The finished counts lose what it deletes, in the
// same statement. It returns how many it deleted.
const pruneIntentsSQL = `
WITH doomed AS (
    SELECT id FROM outbox_intents
    WHERE finished_at < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY finished_at
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM outbox_intents i
    USING doomed d
    WHERE i.id = d.id
    RETURNING i.kind, i.state
),
counted AS (
    INSERT INTO outbox_intent_counts AS c (kind, state, slot, n)
    SELECT kind, state, ` + countSlot + `, -count(*)
    FROM deleted
    GROUP BY kind, state
    ORDER BY kind, state
    ON CONFLICT (kind, state, slot) DO UPDATE SET n = c.n + excluded.n
)
SELECT count(*) FROM deleted`

// lockIdleOrderingKeysSQL locks up to @limit ordering keys that no
// unfinished intent holds, skipping keys a recorder or a release holds
// now. deleteIdleOrderingKeysSQL then deletes those still idle, in the
// same transaction but under a new snapshot: a recorder that took a key
// after this statement's snapshot and committed before its lock is seen
// there, and one that comes after the lock waits for the delete and
// starts the key afresh. Numbering a key afresh is safe: key_seq is only
// ever compared between unfinished intents of a key, and an idle key has
// none.
const lockIdleOrderingKeysSQL = `
SELECT o.ordering_key
FROM outbox_ordering_keys o
WHERE NOT EXISTS (
    SELECT 1 FROM outbox_intents i
    WHERE i.ordering_key = o.ordering_key AND i.finished_at IS NULL)
ORDER BY o.ordering_key
LIMIT @limit
FOR UPDATE SKIP LOCKED`

// deleteIdleOrderingKeysSQL: see lockIdleOrderingKeysSQL.
const deleteIdleOrderingKeysSQL = `
DELETE FROM outbox_ordering_keys o
WHERE o.ordering_key = ANY(@keys::text[])
  AND NOT EXISTS (
    SELECT 1 FROM outbox_intents i
    WHERE i.ordering_key = o.ordering_key AND i.finished_at IS NULL)`

// countSlot is the row of outbox_intent_counts a transaction adds to: its
// backend's, so that concurrent transactions rarely share one and never
// queue on a single hot row (migration 007).
const countSlot = `(pg_backend_pid() % 64)::smallint`

// finishedSQL is the terminal states, as an SQL list: an intent is in one
// exactly when its finished_at is set (outbox_intents_finished_check).
const finishedSQL = `('succeeded', 'failed', 'cancelled')`

// countFinishedSQL adds the intents of @ids that this transaction moved to
// a terminal state to the finished counts, one aggregated write per (kind,
// state), together with the intents cancelled with them because they came
// after one of them (queueRelease cancels them in the same transaction,
// and so on down the dependencies). A row whose newest version
// this transaction wrote (xmin) and that is finished now was finished by
// this transaction: a terminal state is never left, and no statement of
// this package writes an intent that is already terminal. So a settlement
// whose guard failed adds nothing. It must run once per transaction for a
// given intent, after the statements that move it and release what comes
// after it.
//
// Finished is tested as a terminal state (finishedSQL), not as
// finished_at IS NOT NULL: that predicate matches the partial index on
// finished_at, and with statistics taken while few intents had finished
// (a new database, a burst) the planner walks that whole index for a
// handful of ids, milliseconds a settlement instead of microseconds.
const countFinishedSQL = `
WITH RECURSIVE finished (id, kind, state) AS (
    SELECT i.id, i.kind, i.state FROM outbox_intents i
    WHERE i.id = ANY(@ids::bigint[]) AND i.state IN ` + finishedSQL + ` AND i.xmin = pg_current_xact_id()::xid
  UNION
    SELECT i.id, i.kind, i.state
    FROM finished f
    JOIN outbox_intent_dependencies d ON d.after_id = f.id
    JOIN outbox_intents i ON i.id = d.intent_id
    WHERE i.state IN ` + finishedSQL + ` AND i.xmin = pg_current_xact_id()::xid
)
INSERT INTO outbox_intent_counts AS c (kind, state, slot, n)
SELECT kind, state, ` + countSlot + `, count(*)
FROM finished
GROUP BY kind, state
ORDER BY kind, state
ON CONFLICT (kind, state, slot) DO UPDATE SET n = c.n + excluded.n`

// countRecordedFinishedSQL adds to the finished counts the intents of
// @keys this transaction recorded already finished: cancelled at once
// because an intent they come after had failed or been cancelled
// (recordPlan).
const countRecordedFinishedSQL = `
INSERT INTO outbox_intent_counts AS c (kind, state, slot, n)
SELECT kind, state, ` + countSlot + `, count(*)
FROM outbox_intents
WHERE idempotency_key = ANY(@keys::text[]) AND state IN ` + finishedSQL + ` AND xmin = pg_current_xact_id()::xid
GROUP BY kind, state
ORDER BY kind, state
ON CONFLICT (kind, state, slot) DO UPDATE SET n = c.n + excluded.n`

// recountSQL rebuilds the finished counts from the intents themselves, and
// empties the activity roll-up; the caller holds a lock that keeps intents
// from finishing meanwhile.
var recountSQL = []string{
	`LOCK TABLE outbox_intents IN SHARE MODE`,
	`DELETE FROM outbox_intent_counts`,
	`INSERT INTO outbox_intent_counts (kind, state, slot, n)
SELECT kind, state, 0, count(*)
FROM outbox_intents
WHERE finished_at IS NOT NULL
GROUP BY kind, state`,
	// The activity roll-up starts afresh: the intents written another way
	// may have finished inside its range, and are read live from now on.
	`DELETE FROM outbox_activity_minutes`,
	`UPDATE outbox_activity_rollup SET rolled_from = now(), rolled_until = now()`,
}

// activityHorizonSQL reads where the activity roll-up may go on from and
// up to, and locks the roll-up's row (another roll-up running: no row).
// The horizon is a time before which no transaction still running can
// commit a finished intent: finished_at is its transaction's now(), so the
// oldest transaction running in this database bounds it. A session of
// another role whose start this one may not see (pg_stat_activity shows
// it without a start unless this role has pg_read_all_stats) is assumed to
// have started no more than a minute ago, and a prepared transaction a
// minute before it was prepared. The rows finished before the horizon must
// then be read by a later statement, whose snapshot is taken after this one
// saw those transactions gone.
const activityHorizonSQL = `
SELECT r.rolled_until, least(
    now(),
    (SELECT min(a.xact_start) FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'),
    (SELECT now() - interval '1 minute' FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type IS NULL
     LIMIT 1),
    (SELECT min(p.prepared) - interval '1 minute' FROM pg_prepared_xacts p
     WHERE p.database = current_database()))
FROM outbox_activity_rollup r
FOR UPDATE OF r SKIP LOCKED`

// activityStepSQL returns where a roll-up of at most @limit intents from
// @from may stop: the finished_at of the intent @limit places on, or,
// when every one of those shares @from, the next finished_at after it (the
// intents one transaction finished share its now(), and a range must end
// between two times). NULL when fewer than @limit intents remain.
const activityStepSQL = `
WITH nth AS (
    SELECT finished_at FROM outbox_intents
    WHERE finished_at >= @from
    ORDER BY finished_at
    OFFSET @limit LIMIT 1
)
SELECT CASE WHEN n.finished_at > @from THEN n.finished_at
    ELSE (SELECT min(finished_at) FROM outbox_intents WHERE finished_at > @from) END
FROM nth n`

// rollUpActivitySQL adds the intents finished in [@from, @until) to the
// minutes of their creation (recorded) and of their end (succeeded,
// finished), moves the rolled-up range's end to @until, and returns how
// many intents it added. The caller holds the roll-up's row lock, and
// @from is its rolled_until.
var rollUpActivitySQL = `
WITH finished AS (
    SELECT created_at, finished_at, state FROM outbox_intents
    WHERE finished_at >= @from AND finished_at < @until
),
counts (minute, recorded, succeeded, finished) AS (
    SELECT ` + activityMinute("finished_at") + `, 0, count(*) FILTER (WHERE state = 'succeeded'), count(*)
    FROM finished GROUP BY 1
  UNION ALL
    SELECT ` + activityMinute("created_at") + `, count(*), 0, 0
    FROM finished GROUP BY 1
),
added AS (
    INSERT INTO outbox_activity_minutes AS m (minute, recorded, succeeded, finished)
    SELECT minute, sum(recorded), sum(succeeded), sum(finished)
    FROM counts
    GROUP BY minute
    ORDER BY minute
    ON CONFLICT (minute) DO UPDATE
    SET recorded = m.recorded + excluded.recorded,
        succeeded = m.succeeded + excluded.succeeded,
        finished = m.finished + excluded.finished
)
UPDATE outbox_activity_rollup SET rolled_until = @until
RETURNING (SELECT count(*) FROM finished)`

// activityMinute is the minute the time column falls in, the same in every
// session's time zone.
func activityMinute(column string) string {
	return `date_bin('1 minute', ` + column + `, timestamptz '2000-01-01 00:00:00+00')`
}

// pruneActivitySQL deletes up to @limit minutes of the activity roll-up
// older than the audit retention, oldest first.
const pruneActivitySQL = `
DELETE FROM outbox_activity_minutes
WHERE minute IN (
    SELECT minute FROM outbox_activity_minutes
    WHERE minute < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY minute
    LIMIT @limit
    FOR UPDATE SKIP LOCKED)`

// lockForOperatorSQL takes the row lock an operator action holds until
// commit, so concurrent actions and the dispatcher's claims and settlements
// serialise with it.
const lockForOperatorSQL = `
SELECT state, may_have_acted, key_generation, attempt_count
FROM outbox_intents
WHERE id = @id
FOR UPDATE`

// actionAppliedSQL tells whether an action's event is already there. A
// statement of its own, run once the row lock is held: its snapshot then
// shows the event a concurrent run of the same action committed while this
// one waited for the lock (the lock's own statement would not, under READ
// COMMITTED).
const actionAppliedSQL = `
SELECT EXISTS (SELECT 1 FROM outbox_events WHERE intent_id = @id AND action_id = @action_id)`

// resendSQL is an operator's resend of an in_doubt intent: back to pending
// under a new key generation (the operator checked the effect did not
// happen, and the old key would replay its saved answer), with a fresh
// attempt budget.
const resendSQL = `
UPDATE outbox_intents
SET state = 'pending', key_generation = key_generation + 1, provider_key = NULL, key_namespace = NULL,
    key_first_used_at = NULL, may_have_acted = false, budget_from = attempt_count,
    recheck_at = NULL, recheck_count = 0, updated_at = now()
WHERE id = @id`

// finishSQL settles an intent as an operator decided: cancelled, succeeded
// or failed.
const finishSQL = `
UPDATE outbox_intents
SET state = @to::text, recheck_at = NULL, updated_at = now(), finished_at = now(),
    provider_ref = coalesce(@provider_ref::text, provider_ref)
WHERE id = @id`

const insertEventSQL = `
INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason, action_id)
VALUES (@id, @actor, @from::text, @to::text, @reason, @action_id)`

// insertRevealEventSQL records that an operator was shown an intent's
// payload: an event from the intent's state to the same state. FOR SHARE
// keeps the state from changing until the event is written, so the event
// names the state the intent was in.
const insertRevealEventSQL = `
WITH current AS (
    SELECT id, state FROM outbox_intents WHERE id = @id FOR SHARE
)
INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
SELECT id, @actor, state, state, @reason
FROM current
RETURNING to_state`
