-- Ordered intents and per-key order (docs/DESIGN.md, "Ordered intents").
--
-- An intent may come after other intents (outbox_intent_dependencies) and
-- may belong to an ordering key (outbox_intents.ordering_key, numbered by
-- key_seq in the order its recorders took the key's row). Until its turn it
-- is 'waiting': no dispatch job exists for it and the sweep leaves it alone.
-- The transaction that finishes a predecessor (a settlement, an operator's
-- action) releases it: outbox_order_settled, called by internal/intentstore
-- in that transaction, moves it to pending (the caller inserts its dispatch
-- job in the same statement) or to cancelled with the reason.

ALTER TABLE outbox_intents
    DROP CONSTRAINT outbox_intents_state_check,
    ADD CONSTRAINT outbox_intents_state_check
        CHECK (state IN ('waiting', 'pending', 'dispatching', 'succeeded', 'failed', 'in_doubt', 'cancelled')),
    -- How many predecessors named with "after" have not succeeded yet.
    ADD COLUMN waiting_for  integer NOT NULL DEFAULT 0,
    ADD COLUMN ordering_key text,
    ADD COLUMN key_seq      bigint,
    ADD CONSTRAINT outbox_intents_waiting_for_check CHECK (waiting_for >= 0),
    ADD CONSTRAINT outbox_intents_ordering_key_check
        CHECK ((ordering_key IS NULL) = (key_seq IS NULL) AND length(ordering_key) BETWEEN 1 AND 200);

DROP INDEX outbox_intents_unfinished_idx;
CREATE INDEX outbox_intents_unfinished_idx ON outbox_intents (state, created_at)
    WHERE state IN ('waiting', 'pending', 'dispatching', 'in_doubt');
-- A key's turn: its unfinished intents in recorded order.
-- Unfinished is finished_at IS NULL (outbox_intents_finished_check), not a
-- list of states: an index whose predicate names state makes every update
-- of state write all the table's indexes (no HOT update; see 007).
CREATE INDEX outbox_intents_ordering_idx ON outbox_intents (ordering_key, key_seq)
    WHERE ordering_key IS NOT NULL AND finished_at IS NULL;

-- One row per ordering key ever used. Its row lock serialises the
-- recorders of one key (and the releases of its next intent), never those
-- of other keys; last_seq numbers the key's intents.
CREATE TABLE outbox_ordering_keys (
    ordering_key text   PRIMARY KEY,
    last_seq     bigint NOT NULL
);

-- intent_id comes after after_id: it is performed only once after_id
-- succeeded. fill names payload fields set from after_id's result when it
-- does ({"payment_intent": "provider_ref"}). satisfied turns on once, in
-- the transaction where after_id finished (or at record time when it had).
CREATE TABLE outbox_intent_dependencies (
    intent_id bigint  NOT NULL REFERENCES outbox_intents (id) ON DELETE CASCADE,
    after_id  bigint  NOT NULL REFERENCES outbox_intents (id) ON DELETE CASCADE,
    fill      jsonb   NOT NULL DEFAULT '{}',
    satisfied boolean NOT NULL DEFAULT false,
    PRIMARY KEY (intent_id, after_id),
    CONSTRAINT outbox_intent_dependencies_self_check CHECK (intent_id <> after_id)
);
CREATE INDEX outbox_intent_dependencies_after_idx ON outbox_intent_dependencies (after_id);

-- outbox_order_fill sets payload's fields named by fill to ref.
CREATE FUNCTION outbox_order_fill(payload jsonb, fill jsonb, ref text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    f record;
BEGIN
    FOR f IN SELECT key FROM jsonb_each_text(fill) LOOP
        payload := jsonb_set(payload, ARRAY[f.key], to_jsonb(ref), true);
    END LOOP;
    RETURN payload;
END;
$$;

-- outbox_order_record applies the order of intents just inserted (as
-- pending, each with its dispatch job and "recorded" event) in the calling
-- transaction. items is an array of {"key", "ordering_key", "after":
-- [{"key", "fill"}]}, a predecessor named in the same call listed before
-- its successors. The predecessors named are locked FOR SHARE (so none
-- finishes unseen: its settlement waits for this commit, then releases),
-- then the ordering keys' rows, in a fixed order, and each keyed intent
-- is numbered in its key. An intent whose predecessors all succeeded and
-- whose key has no earlier unfinished intent stays pending, its fields
-- filled; one that waits becomes waiting, with no dispatch job; one whose
-- predecessor failed or was cancelled is recorded cancelled, with the
-- reason. The "recorded" event is rewritten to name the state it was
-- recorded in. Intents with only an ordering key (the common case, a
-- stream) are handled a whole batch per statement; those with
-- predecessors one by one.
CREATE FUNCTION outbox_order_record(items jsonb, job_kind text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ids   bigint[];
    okeys text[];
    gated boolean[];
    dep   jsonb;
    item  jsonb;
    me    record;
    pred  record;
    n     integer;
    waits integer;
    why   text;
    waiting_on text[];
    new_state text;
BEGIN
    PERFORM 1 FROM outbox_intents
    WHERE idempotency_key = ANY (ARRAY(
        SELECT d->>'key' FROM jsonb_array_elements(items) AS i, jsonb_array_elements(i->'after') AS d))
    ORDER BY id
    FOR SHARE;

    SELECT array_agg(i.id ORDER BY t.ord), array_agg(t.item->>'ordering_key' ORDER BY t.ord)
    INTO ids, okeys
    FROM jsonb_array_elements(items) WITH ORDINALITY AS t(item, ord)
    JOIN outbox_intents i ON i.idempotency_key = t.item->>'key'
    WHERE i.idempotency_key = ANY (ARRAY(SELECT e->>'key' FROM jsonb_array_elements(items) AS e));
    n := jsonb_array_length(items);
    IF cardinality(ids) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'outbox_order_record: % of % intents found', coalesce(cardinality(ids), 0), n;
    END IF;

    -- Lock the keys (sorted: recorders of several keys cannot deadlock) and
    -- number the intents of each in order.
    WITH counts AS (
        SELECT ok, count(*) AS c FROM unnest(okeys) AS ok WHERE ok IS NOT NULL GROUP BY ok
    ),
    bumped AS (
        INSERT INTO outbox_ordering_keys AS o (ordering_key, last_seq)
        SELECT ok, c FROM counts ORDER BY ok
        ON CONFLICT (ordering_key) DO UPDATE SET last_seq = o.last_seq + EXCLUDED.last_seq
        RETURNING o.ordering_key, o.last_seq
    ),
    numbered AS (
        SELECT u.id, u.ok, row_number() OVER (PARTITION BY u.ok ORDER BY u.ord) AS rn
        FROM unnest(ids, okeys) WITH ORDINALITY AS u(id, ok, ord)
        WHERE u.ok IS NOT NULL
    )
    UPDATE outbox_intents i
    SET ordering_key = nb.ok, key_seq = b.last_seq - c.c + nb.rn
    FROM numbered nb
    JOIN bumped b ON b.ordering_key = nb.ok
    JOIN counts c ON c.ok = nb.ok
    WHERE i.id = nb.id AND i.id = ANY (ids);

    -- An intent waits for its turn while an earlier one of its key is
    -- unfinished (read after the key's lock: every earlier one is seen).
    SELECT array_agg(g ORDER BY ord) INTO gated
    FROM (
        SELECT u.ord, EXISTS (
            SELECT 1 FROM outbox_intents self, outbox_intents o
            WHERE self.id = u.id AND o.ordering_key = self.ordering_key AND o.key_seq < self.key_seq
              AND o.finished_at IS NULL) AS g
        FROM unnest(ids) WITH ORDINALITY AS u(id, ord)
    ) x;

    -- Intents with predecessors, one by one, predecessors first: each is
    -- decided before a successor of the same call reads its state.
    FOR k IN 1 .. n LOOP
        item := items->(k - 1);
        CONTINUE WHEN coalesce(jsonb_array_length(item->'after'), 0) = 0;
        SELECT id, idempotency_key INTO STRICT me FROM outbox_intents WHERE id = ids[k];
        waits := 0;
        why := NULL;
        waiting_on := '{}';
        FOR dep IN SELECT * FROM jsonb_array_elements(item->'after') LOOP
            SELECT id, idempotency_key, state, provider_ref INTO pred
            FROM outbox_intents WHERE idempotency_key = dep->>'key';
            IF NOT FOUND THEN
                RAISE EXCEPTION 'intent % comes after key %, which is not recorded', me.idempotency_key, dep->>'key';
            END IF;
            IF pred.state = 'succeeded' THEN
                IF dep->'fill' <> '{}' AND pred.provider_ref IS NULL THEN
                    why := coalesce(why, format('intent %s (%s) it comes after succeeded without a provider reference to fill %s',
                        pred.id, pred.idempotency_key, dep->'fill'));
                ELSE
                    UPDATE outbox_intents SET payload = outbox_order_fill(payload, dep->'fill', pred.provider_ref)
                    WHERE id = me.id;
                END IF;
            ELSIF pred.state IN ('failed', 'cancelled') THEN
                why := coalesce(why, format('intent %s (%s) it comes after is %s', pred.id, pred.idempotency_key, pred.state));
            ELSE
                waits := waits + 1;
                waiting_on := waiting_on || format('intent %s (%s) to succeed', pred.id, pred.idempotency_key);
            END IF;
            INSERT INTO outbox_intent_dependencies (intent_id, after_id, fill, satisfied)
            VALUES (me.id, pred.id, coalesce(dep->'fill', '{}'), pred.state IN ('succeeded', 'failed', 'cancelled'));
        END LOOP;
        IF gated[k] THEN
            waiting_on := waiting_on || format('the earlier intents of ordering key %s to finish', okeys[k]);
        END IF;
        CONTINUE WHEN why IS NULL AND waits = 0 AND NOT gated[k];
        IF why IS NOT NULL THEN
            new_state := 'cancelled';
            why := 'recorded cancelled: ' || why;
            UPDATE outbox_intents SET state = 'cancelled', finished_at = now(), last_error = why WHERE id = me.id;
        ELSE
            new_state := 'waiting';
            why := 'recorded; waits for ' || array_to_string(waiting_on, ', and ');
            UPDATE outbox_intents SET state = 'waiting', waiting_for = waits WHERE id = me.id;
        END IF;
        gated[k] := false; -- decided
        DELETE FROM river_job
        WHERE unique_key = sha256(convert_to('&kind=' || job_kind || '&args={"intent_id":' || me.id::text || '}', 'UTF8'))
          AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state);
        WITH recorded AS (
            DELETE FROM outbox_events WHERE intent_id = me.id AND to_state = 'pending' RETURNING actor
        )
        INSERT INTO outbox_events (intent_id, actor, to_state, reason)
        SELECT me.id, actor, new_state, why FROM recorded;
    END LOOP;

    -- The others that wait for their turn, all at once. (Ids as arrays, so
    -- that each statement looks its rows up by index, not by a join the
    -- planner may make a scan of.)
    SELECT coalesce(array_agg(u.id), '{}') INTO ids FROM unnest(ids, gated) AS u(id, g) WHERE u.g;
    IF cardinality(ids) = 0 THEN
        RETURN;
    END IF;
    UPDATE outbox_intents SET state = 'waiting' WHERE id = ANY (ids);
    DELETE FROM river_job
    WHERE unique_key = ANY (ARRAY(
            SELECT sha256(convert_to('&kind=' || job_kind || '&args={"intent_id":' || u.id::text || '}', 'UTF8'))
            FROM unnest(ids) AS u(id)))
      AND unique_states IS NOT NULL AND river_job_state_in_bitmask(unique_states, state);
    WITH recorded AS (
        DELETE FROM outbox_events e
        WHERE e.intent_id = ANY (ids) AND e.to_state = 'pending'
        RETURNING e.intent_id, e.actor
    )
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT r.intent_id, r.actor, 'waiting', format('recorded; waits for the earlier intents of ordering key %s to finish',
        (SELECT i.ordering_key FROM outbox_intents i WHERE i.id = r.intent_id))
    FROM recorded r;
END;
$$;

-- outbox_order_settled is called in every transaction that may have
-- finished an intent (a settlement, an operator's action) with its id. If
-- the intent is finished, it decides each intent waiting for it, once (the
-- dependency row's satisfied flag): succeeded fills the successor's fields
-- and counts down its waiting_for; failed or cancelled cancels the
-- successor with the reason, and so on down the chain. Then, under the
-- rows of the ordering keys concerned (locked in a fixed order, after the
-- intents, as every caller does), it moves to pending each waiting intent
-- that nothing holds any longer: no predecessor left and no earlier
-- unfinished intent of its key. It returns those ids; the caller inserts
-- their dispatch jobs in the same statement. Safe to call again: a second
-- call finds nothing left to do.
CREATE FUNCTION outbox_order_settled(finished_id bigint, notice text) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    work bigint[] := ARRAY[finished_id];
    x    bigint;
    xr   record;
    e    record;
    left_ integer;
    why  text;
    keys text[] := '{}';
    cand bigint[] := '{}';
    cand_why text[] := '{}';
    c    record;
    i    integer;
    k    text;
    released boolean := false;
BEGIN
    WHILE cardinality(work) > 0 LOOP
        x := work[1];
        work := work[2:];
        SELECT id, idempotency_key, state, provider_ref, ordering_key INTO xr FROM outbox_intents WHERE id = x;
        CONTINUE WHEN NOT FOUND OR xr.state NOT IN ('succeeded', 'failed', 'cancelled');
        IF xr.ordering_key IS NOT NULL AND NOT xr.ordering_key = ANY (keys) THEN
            keys := keys || xr.ordering_key;
        END IF;
        FOR e IN
            UPDATE outbox_intent_dependencies SET satisfied = true
            WHERE after_id = x AND NOT satisfied
            RETURNING intent_id, fill
        LOOP
            why := NULL;
            IF xr.state <> 'succeeded' THEN
                why := format('not performed: intent %s (%s) it comes after is %s', x, xr.idempotency_key, xr.state);
            ELSIF e.fill <> '{}' AND xr.provider_ref IS NULL THEN
                why := format('not performed: intent %s (%s) it comes after succeeded without a provider reference to fill %s',
                    x, xr.idempotency_key, e.fill);
            END IF;
            IF why IS NULL THEN
                UPDATE outbox_intents
                SET waiting_for = waiting_for - 1, payload = outbox_order_fill(payload, e.fill, xr.provider_ref)
                WHERE id = e.intent_id AND state = 'waiting'
                RETURNING waiting_for INTO left_;
                IF FOUND AND left_ = 0 THEN
                    cand := cand || e.intent_id;
                    cand_why := cand_why || format('released: intent %s (%s) it came after succeeded', x, xr.idempotency_key);
                END IF;
            ELSE
                UPDATE outbox_intents
                SET state = 'cancelled', waiting_for = waiting_for - 1, last_error = why,
                    updated_at = now(), finished_at = now()
                WHERE id = e.intent_id AND state = 'waiting';
                IF FOUND THEN
                    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
                    VALUES (e.intent_id, 'dispatcher', 'waiting', 'cancelled', why);
                    work := work || e.intent_id;
                END IF;
            END IF;
        END LOOP;
    END LOOP;

    -- The keys concerned: of the finished intents (their next one's turn)
    -- and of the intents whose last predecessor just succeeded.
    SELECT keys || coalesce(array_agg(DISTINCT ordering_key), '{}') INTO keys
    FROM outbox_intents WHERE id = ANY (cand) AND ordering_key IS NOT NULL;
    IF cardinality(keys) = 0 AND cardinality(cand) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM outbox_ordering_keys WHERE ordering_key = ANY (keys) ORDER BY ordering_key FOR UPDATE;
    FOREACH k IN ARRAY keys LOOP
        SELECT id INTO c FROM outbox_intents
        WHERE ordering_key = k AND finished_at IS NULL
        ORDER BY key_seq LIMIT 1;
        IF FOUND THEN
            cand := cand || c.id;
            cand_why := cand_why || format('released: its turn in ordering key %s', k);
        END IF;
    END LOOP;
    FOR i IN 1 .. cardinality(cand) LOOP
        UPDATE outbox_intents me
        SET state = 'pending', updated_at = now()
        WHERE id = cand[i] AND state = 'waiting' AND waiting_for = 0
          AND (ordering_key IS NULL OR NOT EXISTS (
              SELECT 1 FROM outbox_intents o
              WHERE o.ordering_key = me.ordering_key AND o.key_seq < me.key_seq
                AND o.finished_at IS NULL));
        IF FOUND THEN
            INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
            VALUES (cand[i], 'dispatcher', 'waiting', 'pending', cand_why[i]);
            released := true;
            RETURN NEXT cand[i];
        END IF;
    END LOOP;
    IF released THEN
        PERFORM pg_notify(current_schema() || '.river_insert', notice);
    END IF;
END;
$$;
