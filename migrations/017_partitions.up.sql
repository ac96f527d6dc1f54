-- History partitioned by intent id (docs/DESIGN.md, "Partitions"): an
-- intent, its attempts and its events live in the partitions of one id
-- range, so that retention drops a range whose intents all finished before
-- the audit retention (DETACH and DROP) instead of deleting its rows one by
-- one. Ids grow with time, so a range is a span of time; the dispatchers'
-- leader makes the next ranges ahead of the sequence, each about a day of
-- recent recording (intentstore.Partitions). Lookups by id, which the hot
-- path makes, read one partition.
--
-- A unique index of a partitioned table holds only within each partition,
-- so the idempotency key's uniqueness moves to a table of its own,
-- outbox_intent_keys, written in the statement that inserts the intent and
-- pruned by range with the partitions.
--
-- The existing tables become the first partitions, [MINVALUE, next id): no
-- row is copied. Each partitioned table also has a default partition that
-- catches an id no range was made for yet (a burst faster than the leader),
-- so recording never fails for want of a partition.
LOCK TABLE outbox_intents, outbox_attempts, outbox_events, outbox_intent_dependencies IN ACCESS EXCLUSIVE MODE;

CREATE TABLE outbox_intent_keys (
    idempotency_key text   NOT NULL,
    intent_id       bigint NOT NULL,
    CONSTRAINT outbox_intent_keys_pkey PRIMARY KEY (idempotency_key)
);
INSERT INTO outbox_intent_keys (idempotency_key, intent_id)
SELECT idempotency_key, id FROM outbox_intents ORDER BY id;
-- Keys are inserted in id order: a BRIN index finds a range's keys for
-- retention at almost no cost to each insert.
CREATE INDEX outbox_intent_keys_intent_idx ON outbox_intent_keys USING brin (intent_id);

DROP VIEW outbox_intent_attempts;
DROP VIEW outbox_intent_events;
ALTER TABLE outbox_attempts DROP CONSTRAINT outbox_attempts_intent_id_fkey;
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_intent_id_fkey;
ALTER TABLE outbox_intent_dependencies
    DROP CONSTRAINT outbox_intent_dependencies_intent_id_fkey,
    DROP CONSTRAINT outbox_intent_dependencies_after_id_fkey;

-- The tables and their indexes take the first partition's names.
DO $$
DECLARE
    t text;
    i record;
BEGIN
    FOREACH t IN ARRAY ARRAY['outbox_intents', 'outbox_attempts', 'outbox_events'] LOOP
        FOR i IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = t::regclass LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', i.relname, replace(i.relname, t || '_', t || '_p0_'));
        END LOOP;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t, t || '_p0');
    END LOOP;
END $$;

-- The identities move to the partitioned tables, each going on from where
-- it was (a partition has none of its own).
CREATE TEMPORARY TABLE outbox_next_ids ON COMMIT DROP AS SELECT
    coalesce((SELECT max(id) FROM outbox_intents_p0), 0) + 1 AS intent,
    coalesce((SELECT max(id) FROM outbox_attempts_p0), 0) + 1 AS attempt,
    coalesce((SELECT max(id) FROM outbox_events_p0), 0) + 1 AS event;
ALTER TABLE outbox_intents_p0 ALTER COLUMN id DROP IDENTITY;
ALTER TABLE outbox_attempts_p0 ALTER COLUMN id DROP IDENTITY;
ALTER TABLE outbox_events_p0 ALTER COLUMN id DROP IDENTITY;

CREATE TABLE outbox_intents (LIKE outbox_intents_p0 INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
    PARTITION BY RANGE (id);
ALTER TABLE outbox_intents ADD CONSTRAINT outbox_intents_pkey PRIMARY KEY (id);
CREATE INDEX outbox_intents_message_idx ON outbox_intents (consumer, message_id);
CREATE INDEX outbox_intents_reference_idx ON outbox_intents (reference) WHERE reference IS NOT NULL;
CREATE INDEX outbox_intents_finished_at_idx ON outbox_intents (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX outbox_intents_ordering_idx ON outbox_intents (ordering_key, key_seq)
    WHERE ordering_key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (queued, provider, id) WHERE finished_at IS NULL;
CREATE INDEX outbox_intents_held_idx ON outbox_intents (id) WHERE finished_at IS NULL AND NOT queued;
ALTER TABLE outbox_intents_p0 DROP CONSTRAINT outbox_intents_p0_idempotency_key_key;

-- Attempts and events are found by their intent, which their keys now
-- begin with: (intent, attempt) and (intent, id), the indexes they had.
CREATE TABLE outbox_attempts (LIKE outbox_attempts_p0 INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
    PARTITION BY RANGE (intent_id);
ALTER TABLE outbox_attempts ADD CONSTRAINT outbox_attempts_pkey PRIMARY KEY (intent_id, attempt);
ALTER TABLE outbox_attempts_p0
    DROP CONSTRAINT outbox_attempts_p0_pkey,
    DROP CONSTRAINT outbox_attempts_p0_intent_attempt_key,
    ADD CONSTRAINT outbox_attempts_p0_pkey PRIMARY KEY (intent_id, attempt);

CREATE TABLE outbox_events (LIKE outbox_events_p0 INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)
    PARTITION BY RANGE (intent_id);
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_pkey PRIMARY KEY (intent_id, id);
CREATE UNIQUE INDEX outbox_events_action_idx ON outbox_events (intent_id, action_id) WHERE action_id IS NOT NULL;
ALTER TABLE outbox_events_p0 DROP CONSTRAINT outbox_events_p0_pkey;
DROP INDEX outbox_events_p0_intent_idx;
ALTER TABLE outbox_events_p0 ADD CONSTRAINT outbox_events_p0_pkey PRIMARY KEY (intent_id, id);
DROP TRIGGER outbox_events_append_only ON outbox_events_p0;
CREATE TRIGGER outbox_events_append_only BEFORE UPDATE ON outbox_events
    FOR EACH ROW EXECUTE FUNCTION outbox_events_forbid_update();

DO $$
DECLARE
    n record;
BEGIN
    SELECT * INTO n FROM outbox_next_ids;
    EXECUTE format('ALTER TABLE outbox_intents ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', n.intent);
    EXECUTE format('ALTER TABLE outbox_attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', n.attempt);
    EXECUTE format('ALTER TABLE outbox_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (START WITH %s)', n.event);
    EXECUTE format('ALTER TABLE outbox_intents ATTACH PARTITION outbox_intents_p0 FOR VALUES FROM (MINVALUE) TO (%s)', n.intent);
    EXECUTE format('ALTER TABLE outbox_attempts ATTACH PARTITION outbox_attempts_p0 FOR VALUES FROM (MINVALUE) TO (%s)', n.intent);
    EXECUTE format('ALTER TABLE outbox_events ATTACH PARTITION outbox_events_p0 FOR VALUES FROM (MINVALUE) TO (%s)', n.intent);
END $$;
ALTER TABLE outbox_intents_p0 SET (fillfactor = 80);
CREATE TABLE outbox_intents_default PARTITION OF outbox_intents DEFAULT WITH (fillfactor = 80);
CREATE TABLE outbox_attempts_default PARTITION OF outbox_attempts DEFAULT;
CREATE TABLE outbox_events_default PARTITION OF outbox_events DEFAULT;
-- The first range after the existing rows; the leader makes the next ones.
DO $$
DECLARE
    n bigint := (SELECT intent FROM outbox_next_ids);
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['outbox_intents', 'outbox_attempts', 'outbox_events'] LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%s) TO (%s)%s',
            t || '_from_' || n, t, n, n + 100000, CASE WHEN t = 'outbox_intents' THEN ' WITH (fillfactor = 80)' ELSE '' END);
    END LOOP;
END $$;

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
