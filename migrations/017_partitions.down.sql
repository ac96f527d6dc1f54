-- Back to one table each: every partition's rows are moved into the first
-- partition, which takes the table's name, identity and constraints again;
-- the keys go back to a unique constraint of the intents.
LOCK TABLE outbox_intents, outbox_attempts, outbox_events, outbox_intent_dependencies IN ACCESS EXCLUSIVE MODE;

DROP VIEW outbox_intent_attempts;
DROP VIEW outbox_intent_events;
ALTER TABLE outbox_intent_dependencies
    DROP CONSTRAINT outbox_intent_dependencies_intent_id_fkey,
    DROP CONSTRAINT outbox_intent_dependencies_after_id_fkey;
ALTER TABLE outbox_attempts DROP CONSTRAINT outbox_attempts_intent_id_fkey;
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_intent_id_fkey;

CREATE TEMPORARY TABLE outbox_next_ids ON COMMIT DROP AS SELECT
    coalesce((SELECT max(id) FROM outbox_intents), 0) + 1 AS intent,
    coalesce((SELECT max(id) FROM outbox_attempts), 0) + 1 AS attempt,
    coalesce((SELECT max(id) FROM outbox_events), 0) + 1 AS event;

DO $$
DECLARE
    t text;
    i record;
BEGIN
    FOREACH t IN ARRAY ARRAY['outbox_events', 'outbox_attempts', 'outbox_intents'] LOOP
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', t, t || '_p0');
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', t || '_p0', t);
        EXECUTE format('DROP TABLE %I', t);
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t || '_p0', t);
        FOR i IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = t::regclass LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', i.relname, replace(i.relname, t || '_p0_', t || '_'));
        END LOOP;
    END LOOP;
END $$;

DO $$
DECLARE
    n record;
BEGIN
    SELECT * INTO n FROM outbox_next_ids;
    EXECUTE format('ALTER TABLE outbox_intents ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', n.intent);
    EXECUTE format('ALTER TABLE outbox_attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', n.attempt);
    EXECUTE format('ALTER TABLE outbox_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', n.event);
END $$;

ALTER TABLE outbox_intents ADD CONSTRAINT outbox_intents_idempotency_key_key UNIQUE (idempotency_key);
DROP TABLE outbox_intent_keys;

ALTER TABLE outbox_attempts
    DROP CONSTRAINT outbox_attempts_pkey,
    ADD CONSTRAINT outbox_attempts_pkey PRIMARY KEY (id),
    ADD CONSTRAINT outbox_attempts_intent_attempt_key UNIQUE (intent_id, attempt);
ALTER TABLE outbox_events
    DROP CONSTRAINT outbox_events_pkey,
    ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (id);
CREATE INDEX outbox_events_intent_idx ON outbox_events (intent_id, id);
CREATE TRIGGER outbox_events_append_only BEFORE UPDATE ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outbox_events_forbid_update();

ALTER TABLE outbox_attempts ADD CONSTRAINT outbox_attempts_intent_id_fkey
    FOREIGN KEY (intent_id) REFERENCES outbox_intents (id) ON DELETE CASCADE;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_intent_id_fkey
    FOREIGN KEY (intent_id) REFERENCES outbox_intents (id) ON DELETE CASCADE;
ALTER TABLE outbox_intent_dependencies
    ADD CONSTRAINT outbox_intent_dependencies_intent_id_fkey
        FOREIGN KEY (intent_id) REFERENCES outbox_intents (id) ON DELETE CASCADE,
    ADD CONSTRAINT outbox_intent_dependencies_after_id_fkey
        FOREIGN KEY (after_id) REFERENCES outbox_intents (id) ON DELETE CASCADE;

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
