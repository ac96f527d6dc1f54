DROP FUNCTION outbox_order_record(jsonb);

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
