package intents

// insertProcessedMarkerSQL is the idempotent consumer. ON CONFLICT DO
// NOTHING makes a concurrent duplicate wait on the unique index until the
// first transaction ends, then return no row instead of failing: the
// transaction stays usable and the caller learns it is a duplicate.
const insertProcessedMarkerSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING`

// insertProcessedMarkersSQL is insertProcessedMarkerSQL for a batch: it
// returns the markers it inserted, so the caller learns which messages are
// new. Rows are inserted in (consumer, message_id) order, so two batches
// that share messages wait on each other's markers in the same order and
// cannot deadlock.
const insertProcessedMarkersSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
SELECT consumer, message_id
FROM unnest($1::text[], $2::text[]) AS t(consumer, message_id)
ORDER BY consumer, message_id
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING consumer, message_id`

// insertIntentsSQL stores intents, their "recorded" events and their River
// dispatch jobs in one statement, returning the intents' ids in input order.
// consumer, message_id and the event's actor are per row, so one statement
// serves a whole batch of messages.
//
// The river_job rows are exactly what River's InsertManyTx writes for
// intenttype.DispatchArgs (see dispatchJob and TestDispatchJobsMatchRiver):
// args {"intent_id":N}; kind, queue, priority, max_attempts and the
// unique-states bitmask from DispatchArgs.InsertOpts ($10 to $14); metadata
// and tags empty; created_at and scheduled_at the database's now(); state
// available; and unique_key River's ByArgs key, the SHA-256 of
// "&kind=<kind>&args=<args with sorted keys, compact>". So River's unique
// index sees these jobs as River's own: the sweep's InsertMany of the same
// intent is skipped as a duplicate while this job is live. The conflict
// clause is River's; a fresh intent id cannot conflict, it is there so that
// a conflict would be skipped as River skips it, never fail the message.
const insertIntentsSQL = `
WITH input AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[], $7::text[], $8::text[], $9::text[])
        WITH ORDINALITY AS t(idempotency_key, kind, provider, name, payload, reference, consumer, message_id, actor, ord)
),
inserted AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id)
    SELECT idempotency_key, kind, provider, name, payload, reference, consumer, message_id
    FROM input
    ORDER BY ord
    RETURNING id, idempotency_key
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT inserted.id, input.actor, 'pending', 'recorded'
    FROM inserted
    JOIN input USING (idempotency_key)
),
` + insertDispatchJobsCTE + `
SELECT inserted.id
FROM inserted
JOIN input USING (idempotency_key)
ORDER BY input.ord`

// insertIntentSQL is insertIntentsSQL for the common case of one intent,
// with plain parameters instead of arrays: less work for both sides.
const insertIntentSQL = `
WITH inserted AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    RETURNING id
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT id, $9, 'pending', 'recorded'
    FROM inserted
),
` + insertDispatchJobsCTE + `
SELECT id FROM inserted`

// insertDispatchJobsCTE inserts a River dispatch job for every row of the
// CTE "inserted" (column id), with the job's constants in $10 to $14; see
// insertIntentsSQL.
const insertDispatchJobsCTE = `jobs AS (
    INSERT INTO river_job (args, kind, queue, priority, max_attempts, state, metadata, tags, unique_key, unique_states)
    SELECT jsonb_build_object('intent_id', id), $10::text, $11::text, $12::smallint, $13::smallint,
        'available', '{}'::jsonb, '{}'::varchar(255)[],
        sha256(convert_to('&kind=' || $10::text || '&args={"intent_id":' || id::text || '}', 'UTF8')),
        nullif($14::integer, 0)::bit(8)
    FROM inserted
    ORDER BY id
    ON CONFLICT (unique_key)
        WHERE unique_key IS NOT NULL
            AND unique_states IS NOT NULL
            AND river_job_state_in_bitmask(unique_states, state)
        DO NOTHING
)`

// notifyInsertSQL wakes dispatchers listening for new jobs on the dispatch
// queue, as River's own insert does: the channel is River's insert topic in
// the current schema and the payload names the queue. Sent inside the
// recording transaction, it is delivered when (and only if) it commits.
const notifyInsertSQL = `SELECT pg_notify(current_schema() || '.river_insert', $1)`
