package intents

// insertProcessedMarkerSQL is the idempotent consumer. ON CONFLICT DO
// NOTHING makes a concurrent duplicate wait on the unique index until the
// first transaction ends, then return no row instead of failing: the
// transaction stays usable and the caller learns it is a duplicate.
const insertProcessedMarkerSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING`

// insertIntentsSQL stores a message's intents and their "recorded" events in
// one round trip, returning ids in input order.
const insertIntentsSQL = `
WITH input AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[])
        WITH ORDINALITY AS t(idempotency_key, kind, provider, name, payload, reference, ord)
),
inserted AS (
    INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id)
    SELECT idempotency_key, kind, provider, name, payload, reference, $7, $8
    FROM input
    ORDER BY ord
    RETURNING id, idempotency_key
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT id, $9, 'pending', 'recorded'
    FROM inserted
)
SELECT inserted.id
FROM inserted
JOIN input USING (idempotency_key)
ORDER BY input.ord`
