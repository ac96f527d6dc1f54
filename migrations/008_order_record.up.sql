-- Ordered intents are recorded without a dispatch job and without their
-- "recorded" event: outbox_order_record writes each one's event as it
-- decides it (waiting, cancelled, or pending), and returns the ones that go
-- at once, whose jobs the caller inserts (internal/intentstore). Before,
-- every ordered intent got a job and an event that the function deleted
-- again for each that waits: most of a batch of one ordering key.
-- items: [{"key", "actor", "after": [{"key", "fill"}], "ordering_key"}].
DROP FUNCTION outbox_order_record(jsonb, text);

CREATE FUNCTION outbox_order_record(items jsonb) RETURNS SETOF bigint
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
    decided boolean[];
    bkeys text[];
    bfirst bigint[];
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
    decided := array_fill(false, ARRAY[n]);

    -- Lock the keys (sorted: recorders of several keys cannot deadlock) and
    -- reserve numbers for the intents of each.
    WITH counts AS (
        SELECT ok, count(*) AS c FROM unnest(okeys) AS ok WHERE ok IS NOT NULL GROUP BY ok
    ),
    bumped AS (
        INSERT INTO outbox_ordering_keys AS o (ordering_key, last_seq)
        SELECT ok, c FROM counts ORDER BY ok
        ON CONFLICT (ordering_key) DO UPDATE SET last_seq = o.last_seq + EXCLUDED.last_seq
        RETURNING o.ordering_key, o.last_seq
    )
    SELECT coalesce(array_agg(b.ordering_key), '{}'), coalesce(array_agg(b.last_seq - c.c), '{}') INTO bkeys, bfirst
    FROM bumped b JOIN counts c ON c.ok = b.ordering_key;

    -- Number the intents in order, and make each wait for its turn while an
    -- earlier one of its key is unfinished: one before it in this call, or
    -- one recorded before, read here under the key's lock (a statement of
    -- its own, so its snapshot is taken after the lock: every earlier one
    -- is seen; this call's own intents have no key yet in it). The ones
    -- that come after others are decided below; the rest wait from here.
    WITH numbered AS (
        SELECT u.id, u.ok, u.ord, row_number() OVER (PARTITION BY u.ok ORDER BY u.ord) AS rn
        FROM unnest(ids, okeys) WITH ORDINALITY AS u(id, ok, ord)
        WHERE u.ok IS NOT NULL
    ),
    keyed AS (
        SELECT nb.id, nb.ok, nb.ord, k.first_seq + nb.rn AS seq,
            nb.rn > 1 OR EXISTS (
                SELECT 1 FROM outbox_intents o
                WHERE o.ordering_key = nb.ok AND o.finished_at IS NULL) AS g,
            coalesce(jsonb_array_length(items->(nb.ord::int - 1)->'after'), 0) > 0 AS has_after
        FROM numbered nb
        JOIN unnest(bkeys, bfirst) AS k(ok, first_seq) ON k.ok = nb.ok
    ),
    updated AS (
        UPDATE outbox_intents i
        SET ordering_key = kd.ok, key_seq = kd.seq,
            state = CASE WHEN kd.g AND NOT kd.has_after THEN 'waiting' ELSE i.state END
        FROM keyed kd
        WHERE i.id = kd.id AND i.id = ANY (ids)
        RETURNING kd.ord, kd.g
    )
    SELECT array_agg(coalesce(up.g, false) ORDER BY u.ord) INTO gated
    FROM generate_series(1, n) AS u(ord)
    LEFT JOIN updated up ON up.ord = u.ord;

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
        decided[k] := true;
        INSERT INTO outbox_events (intent_id, actor, to_state, reason)
        VALUES (me.id, item->>'actor', new_state, why);
    END LOOP;

    -- The others that wait for their turn (made waiting above), all at
    -- once. (Ids as arrays, so that each statement looks its rows up by
    -- index, not by a join the planner may make a scan of.)
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT u.id, items->(u.ord::int - 1)->>'actor', 'waiting',
        format('recorded; waits for the earlier intents of ordering key %s to finish', okeys[u.ord])
    FROM unnest(ids, gated, decided) WITH ORDINALITY AS u(id, g, d, ord)
    WHERE u.g AND NOT u.d;

    -- The rest go at once: recorded pending, as an unordered intent is; the
    -- caller inserts their dispatch jobs.
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT u.id, items->(u.ord::int - 1)->>'actor', 'pending', 'recorded'
    FROM unnest(ids, gated, decided) WITH ORDINALITY AS u(id, g, d, ord)
    WHERE NOT u.g AND NOT u.d;
    RETURN QUERY
    SELECT u.id FROM unnest(ids, gated, decided) AS u(id, g, d) WHERE NOT u.g AND NOT u.d ORDER BY u.id;
END;
$$;
