-- The functions of migrations 006 and 008 (their last versions), for the
-- binaries of schema version 10, which call them.
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
