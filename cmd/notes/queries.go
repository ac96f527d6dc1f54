package main

// The example's SQL, in one place. The outbox's own tables come from
// migrations; these are the service's business tables.

// schemaLockKey serialises concurrent schema creation by several processes
// on one database ("notesch").
const schemaLockKey = 0x6e6f7465736368

const createSchemaSQL = `
CREATE TABLE IF NOT EXISTS notes (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    title           text        NOT NULL,
    body            text        NOT NULL,
    author_email    text        NOT NULL,
    -- The POST's Idempotency-Key header: a retried POST finds its note here.
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Set by the tagger, in the transaction that stores the tags.
    tagged_at       timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS notes_idempotency_key_idx ON notes (idempotency_key);
CREATE TABLE IF NOT EXISTS note_tags (
    note_id bigint NOT NULL REFERENCES notes (id) ON DELETE CASCADE,
    tag     text   NOT NULL,
    PRIMARY KEY (note_id, tag)
);`

// insertNoteSQL inserts a note unless its idempotency key is taken. A
// concurrent POST with the same key waits for the first to commit, then
// inserts nothing.
const insertNoteSQL = `
INSERT INTO notes (title, body, author_email, idempotency_key)
VALUES ($1, $2, $3, $4)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, created_at`

const noteColumns = `id, title, body, author_email, created_at, tagged_at,
    coalesce((SELECT array_agg(tag ORDER BY tag) FROM note_tags t WHERE t.note_id = notes.id), '{}')`

const noteKeyExistsSQL = `SELECT EXISTS (SELECT 1 FROM notes WHERE idempotency_key = $1)`

const noteByKeySQL = `SELECT ` + noteColumns + ` FROM notes WHERE idempotency_key = $1`

const noteByIDSQL = `SELECT ` + noteColumns + ` FROM notes WHERE id = $1`

const insertTagsSQL = `
INSERT INTO note_tags (note_id, tag) SELECT $1, unnest($2::text[])
ON CONFLICT DO NOTHING`

const markTaggedSQL = `UPDATE notes SET tagged_at = now() WHERE id = $1`

// progressSQL counts what the scenario waits for among the notes it made.
const progressSQL = `
SELECT
    count(*) FILTER (WHERE n.tagged_at IS NOT NULL),
    (SELECT count(*) FROM outbox_intents i WHERE i.kind = $2 AND i.reference = ANY($3::text[])),
    (SELECT count(*) FROM outbox_intents i WHERE i.kind = $2 AND i.reference = ANY($3::text[])
        AND i.state IN ('succeeded', 'failed', 'in_doubt', 'cancelled'))
FROM notes n WHERE n.id = ANY($1::bigint[])`

// reportSQL gathers the report's database side for the scenario's notes:
// notes tagged, tags stored, NoteCreated publish attempts (all and
// succeeded), processed markers of the tagger, email intents by state.
const reportSQL = `
SELECT
    (SELECT count(*) FROM notes WHERE id = ANY($1::bigint[]) AND tagged_at IS NOT NULL),
    (SELECT count(*) FROM note_tags WHERE note_id = ANY($1::bigint[])),
    (SELECT count(*) FROM outbox_intent_attempts a JOIN outbox_intents i ON i.id = a.intent_id
        WHERE i.kind = $2 AND i.reference = ANY($4::text[])),
    (SELECT count(*) FROM outbox_intent_attempts a JOIN outbox_intents i ON i.id = a.intent_id
        WHERE i.kind = $2 AND i.reference = ANY($4::text[]) AND a.outcome = 'succeeded'),
    (SELECT count(*) FROM outbox_intents WHERE kind = $2 AND reference = ANY($4::text[])),
    (SELECT count(*) FROM outbox_processed_messages WHERE consumer = $5 AND message_id = ANY($6::text[])),
    (SELECT count(*) FROM outbox_intents WHERE kind = $3 AND reference = ANY($4::text[])),
    (SELECT count(*) FROM outbox_intents WHERE kind = $3 AND reference = ANY($4::text[]) AND state = 'succeeded'),
    (SELECT count(*) FROM outbox_intents WHERE kind = $3 AND reference = ANY($4::text[]) AND state = 'in_doubt'),
    (SELECT count(*) FROM outbox_intents WHERE kind = $3 AND reference = ANY($4::text[]) AND state IN ('failed', 'cancelled'))`

// publishedIDSQL reads the message-id a NoteCreated intent was published
// with (the provider key the dispatcher fixed at its first attempt).
const publishedIDSQL = `SELECT coalesce(provider_key, idempotency_key) FROM outbox_intents WHERE idempotency_key = $1`
