package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// The retained scenario: does the cost of recording, dispatching and
// operating grow with the history a deployment keeps? Two databases in the
// same run, one empty and one holding Sizes.RetainedIntents finished
// intents (mixed kinds and terminal states, realistic payloads, their
// attempts and events) and as many processed markers, as 30 days of
// retention at a modest rate would leave. Recording (Consume, 8 consumers)
// and dispatch (a drain of Sizes.DispatchIntents keyed intents) must keep
// 90% of the empty database's rate; stats and every dashboard page and API
// read must answer within 20 ms. The share of HOT updates on outbox_intents
// during the drain says how much of the intents' index maintenance the
// state changes cost.

// retainedPageTarget is the bound on stats and every page.
const retainedPageTarget = 20 * time.Millisecond

// retainedInDoubt is how many old in_doubt intents the retained database
// holds besides its finished ones: what an operator's in_doubt list finds
// among the history.
const retainedInDoubt = 40

// fillHistorySQL writes finished intents as a deployment keeps them: n
// (from params, a SELECT of n, t0, span and consumer) created evenly over
// span from t0, of four kinds (realistic payloads), 92% succeeded, 5%
// failed and 3% cancelled, each finished a few seconds after it was
// created. Every column of the intents' rows but those extra names is
// written here; extraValues are the expressions that fill those, over the
// CTE rows (g, created, finished, kind, state, key, msg). It bypasses the
// store on purpose: a million rows through the API would take longer than
// the rest of the bench.
func fillHistorySQL(params, extra, extraValues string) string {
	return `
WITH params AS (` + params + `
), rows AS (
    SELECT g, created, created + interval '1 second' * (g % 7) AS finished, kind, state,
        consumer || ':' || msg AS key, msg
    FROM (SELECT g, consumer, left(consumer, 1) || '-' || g AS msg,
            t0 + span * (g::float8 / n) AS created,
            CASE g % 4 WHEN 0 THEN 'stripe.payment_intent' WHEN 1 THEN 'sendgrid.email'
                       WHEN 2 THEN 'stripe.refund' ELSE 'webhook.post' END AS kind,
            CASE WHEN g % 100 < 92 THEN 'succeeded' WHEN g % 100 < 97 THEN 'failed' ELSE 'cancelled' END AS state
        FROM params, generate_series(1, (SELECT n FROM params)) AS g) r
)
INSERT INTO outbox_intents (idempotency_key, kind, provider, name, consumer, message_id, reference, payload, state,
                            attempt_count, provider_ref, last_error, created_at, updated_at, finished_at,
                            provider_key, key_namespace, key_first_used_at, may_have_acted` + extra + `)
SELECT key, kind, split_part(kind, '.', 1), '', (SELECT consumer FROM params), msg,
    CASE WHEN g % 3 = 0 THEN 'order-' || (g / 3) END,
    CASE WHEN kind LIKE 'stripe.%' THEN jsonb_build_object(
            'amount', 100 + g % 9900, 'currency', 'usd', 'customer', 'cus_' || (g % 50000),
            'payment_method', 'pm_card_visa', 'confirm', true,
            'description', 'Order ' || g || ' for customer ' || (g % 50000),
            'metadata', jsonb_build_object('order_id', 'order-' || g, 'cart', md5(g::text) || md5((g + 1)::text)))
         ELSE jsonb_build_object(
            'from', jsonb_build_object('email', 'shop@example.com', 'name', 'Example Shop'),
            'to', jsonb_build_array(jsonb_build_object('email', 'buyer' || (g % 50000) || '@example.com')),
            'subject', 'Your receipt for order ' || g,
            'text', 'Thanks for your order ' || g || '. ' || repeat('We will let you know when it ships. ', 4))
    END,
    state,
    CASE state WHEN 'cancelled' THEN 0 WHEN 'failed' THEN 3 ELSE 1 + (g % 17 = 0)::int END,
    CASE WHEN state = 'succeeded' THEN 'ref_' || md5(g::text) END,
    CASE WHEN state = 'failed' THEN 'provider refused: card_declined' END,
    created, finished, finished,
    CASE WHEN state <> 'cancelled' THEN key END,
    CASE WHEN state <> 'cancelled' THEN 'benchns0' END,
    CASE WHEN state <> 'cancelled' THEN created END,
    state <> 'cancelled'` + extraValues + `
FROM rows
ORDER BY g`
}

// fillMarkersSQL writes the processed marker of every intent's message,
// processed when the intent was created.
const fillMarkersSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id, processed_at)
SELECT consumer, message_id, created_at FROM outbox_intents
ON CONFLICT DO NOTHING`

// fillRetainedSQL writes $1 finished intents spread over the last 30 days
// (fillHistorySQL); fillRetainedHistorySQL writes an attempt for each one
// that was tried, a recorded and a final event for each, and a processed
// marker for each, and fillRetainedInDoubtSQL retainedInDoubt old in_doubt
// intents.
var fillRetainedSQL = fillHistorySQL(`
    SELECT $1::bigint AS n, now() - interval '30 days' AS t0, interval '30 days' AS span, 'retained' AS consumer`, "", "")

// fillRetainedInDoubtSQL adds the old in_doubt intents.
const fillRetainedInDoubtSQL = `
INSERT INTO outbox_intents (idempotency_key, kind, provider, consumer, message_id, payload, state, attempt_count,
                            created_at, updated_at, provider_key, key_namespace, key_first_used_at, may_have_acted,
                            recheck_at, recheck_count)
SELECT 'retained:doubt-' || g, 'stripe.payment_intent', 'stripe', 'retained', 'doubt-' || g,
    '{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}',
    'in_doubt', 1, now() - interval '29 days' + interval '1 hour' * g, now() - interval '28 days',
    'retained:doubt-' || g, 'benchns0', now() - interval '29 days', true, now() + interval '30 days', 5
FROM generate_series(1, $1::int) AS g`

// fillRetainedHistorySQL writes the attempts, events and markers of the
// intents above.
var fillRetainedHistorySQL = []string{`
INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref, error)
SELECT i.id, a, i.created_at, i.finished_at,
    CASE WHEN a < i.attempt_count THEN 'retry' WHEN i.state = 'succeeded' THEN 'succeeded' ELSE 'failed' END,
    CASE WHEN a < i.attempt_count THEN 503 WHEN i.state = 'succeeded' THEN 200 ELSE 402 END,
    CASE WHEN a = i.attempt_count THEN i.provider_ref END,
    CASE WHEN a < i.attempt_count THEN 'HTTP 503' ELSE i.last_error END
FROM outbox_intents i, generate_series(1, i.attempt_count) AS a
WHERE i.finished_at IS NOT NULL
ORDER BY i.id, a`, `
INSERT INTO outbox_events (intent_id, at, actor, from_state, to_state, reason)
SELECT id, at, actor, from_state, to_state, reason FROM (
    SELECT id, created_at AS at, 'consumer:retained' AS actor, NULL AS from_state, 'pending' AS to_state, 'recorded' AS reason, 1 AS o
    FROM outbox_intents
  UNION ALL
    SELECT id, coalesce(finished_at, updated_at), CASE WHEN state = 'cancelled' THEN 'operator:ann' ELSE 'dispatcher' END,
        CASE WHEN state = 'cancelled' THEN 'pending' ELSE 'dispatching' END, state,
        CASE state WHEN 'succeeded' THEN 'provider performed it' WHEN 'cancelled' THEN 'customer changed their mind'
                   WHEN 'in_doubt' THEN 'ambiguous and not reconciled' ELSE 'refused for good' END, 2
    FROM outbox_intents
) e
ORDER BY id, o`, fillMarkersSQL}

// retainedDB is one side of the comparison.
type retainedDB struct {
	label string
	db    *database
	audit *audit.Store
	admin http.Handler
	// oldID is an intent whose detail page is read: a retained one in the
	// full database, a fresh one in the empty database.
	oldID int64
}

func (r *runner) retainedRows(ctx context.Context) ([]Row, error) {
	n := r.sizes.RetainedIntents
	workers := r.sizes.Workers
	empty, err := r.newDatabase(ctx, "retained_empty", workers+10)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, empty)
	full, err := r.newDatabase(ctx, "retained_full", workers+10)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, full)
	r.progress("retained: filling one database with %d finished intents, their attempts, events and markers", n)
	started := time.Now()
	if err := fillRetained(ctx, full.pool, n); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	var heap, indexes int64
	if err := full.pool.QueryRow(ctx, `SELECT pg_relation_size('outbox_intents'), pg_indexes_size('outbox_intents')`).Scan(&heap, &indexes); err != nil {
		return nil, err
	}
	r.progress("  filled in %s; outbox_intents: %d MiB of rows, %d MiB of indexes", time.Since(started).Round(time.Second), heap>>20, indexes>>20)
	for _, db := range []*database{empty, full} {
		if _, err := db.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
			return nil, err
		}
	}
	reg, err := recordingRegistry()
	if err != nil {
		return nil, err
	}
	sides := []*retainedDB{{label: "empty", db: empty}, {label: "retained", db: full}}
	for _, s := range sides {
		if s.audit, err = audit.New(s.db.pool, reg); err != nil {
			return nil, err
		}
		client, err := r.recordingClient(s.db.pool)
		if err != nil {
			return nil, err
		}
		s.admin, err = adminhttp.NewHandler(adminhttp.Config{Addr: "127.0.0.1:0", Audit: s.audit, Intents: client,
			Pool: s.db.pool, DisableRiverUI: true, Logger: r.cfg.Logger})
		if err != nil {
			return nil, err
		}
	}

	// The drain first: a dispatcher would also work the intents Consume
	// records, which then stay pending, a backlog for the reads to see.
	drainRows, err := r.retainedDrain(ctx, sides)
	if err != nil {
		return nil, err
	}
	row, err := r.retainedConsume(ctx, sides)
	if err != nil {
		return nil, err
	}
	rows := append([]Row{row}, drainRows...)
	// The detail page of the empty side reads one of the intents just
	// drained; the retained side's reads an old one, from the middle.
	if err := empty.pool.QueryRow(ctx, `SELECT max(id) FROM outbox_intents`).Scan(&sides[0].oldID); err != nil {
		return nil, err
	}
	if err := full.pool.QueryRow(ctx, `SELECT id FROM outbox_intents WHERE idempotency_key = $1`, fmt.Sprint("retained:r-", max(1, n/2))).Scan(&sides[1].oldID); err != nil {
		return nil, err
	}
	readRows, err := r.retainedReads(ctx, sides)
	if err != nil {
		return nil, err
	}
	return append(rows, readRows...), nil
}

// fillRetained writes n finished intents and their history into pool's
// database (see fillRetainedSQL), and brings the store's counts in line
// with them.
func fillRetained(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if _, err := pool.Exec(ctx, fillRetainedSQL, n); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, fillRetainedInDoubtSQL, retainedInDoubt); err != nil {
		return err
	}
	for _, q := range fillRetainedHistorySQL {
		if _, err := pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	return recount(ctx, pool)
}

// recount brings the store's finished counts in line with rows written
// behind its back: stats read them, and retention takes off what it
// deletes.
func recount(ctx context.Context, pool *pgxpool.Pool) error {
	store, err := intentstore.New(pool, nil)
	if err != nil {
		return err
	}
	return store.Recount(ctx)
}

// retainedConsume measures Consume at 8 consumers on both databases,
// interleaved so that neither is favoured by a quieter machine.
func (r *runner) retainedConsume(ctx context.Context, sides []*retainedDB) (Row, error) {
	const consumers = 8
	var seq atomic.Int64
	consume := func(s *retainedDB) (func(context.Context) error, error) {
		client, err := r.recordingClient(s.db.pool)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			_, err := client.Consume(ctx, intents.Message{Consumer: "bench", ID: fmt.Sprint("c-", seq.Add(1))}, recordEmail)
			return err
		}, nil
	}
	onEmpty, err := consume(sides[0])
	if err != nil {
		return Row{}, err
	}
	onFull, err := consume(sides[1])
	if err != nil {
		return Row{}, err
	}
	n := r.sizes.ConsumeMessages
	r.progress("retained: %d messages through Consume, %d consumers, on the empty and the retained database", n, consumers)
	emptyTime, fullTime, err := alternate(ctx, consumers, n, onEmpty, onFull)
	if err != nil {
		return Row{}, err
	}
	return ratioRow(fmt.Sprintf("Consume with %s retained intents and markers, %d consumers", count(r.sizes.RetainedIntents), consumers), "msg/s",
		float64(n)/fullTime.Seconds(), "empty database", float64(n)/emptyTime.Seconds(), 0.90), nil
}

// retainedDrain records keyed intents in both databases and drains each
// with a dispatcher, in eight rounds (empty, retained, retained, empty,
// then the reverse) so that neither side is favoured by a machine whose
// load changes, and reports the rates and the share of HOT updates on
// outbox_intents.
func (r *runner) retainedDrain(ctx context.Context, sides []*retainedDB) ([]Row, error) {
	n, workers := r.sizes.DispatchIntents, r.sizes.Workers
	dbl, err := startDoubles(nil, false)
	if err != nil {
		return nil, err
	}
	defer dbl.Close()
	took := make([]time.Duration, len(sides))
	drained := make([]int, len(sides))
	hot := make([]hotShare, len(sides))
	order := []int{0, 1, 1, 0, 1, 0, 0, 1}
	for round, i := range order {
		s := sides[i]
		// Each side drains n in all.
		share := n/4 + boolInt(round/2 < n%4)
		client, err := intents.NewClient(s.db.pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
		if err != nil {
			return nil, err
		}
		if _, err := recordIntents(ctx, client, fmt.Sprint("drain-", round, "-"), stripeprovider.KindPaymentIntent, share); err != nil {
			return nil, err
		}
		r.progress("retained: draining %d keyed intents, %d workers, on the %s database", share, workers, s.label)
		before, err := readHot(ctx, s.db.pool)
		if err != nil {
			return nil, err
		}
		// A pool of its own, closed after the drain: a backend reports its
		// table statistics when it exits, so they are complete afterwards.
		pool, err := pgxpool.New(ctx, s.db.url)
		if err != nil {
			return nil, err
		}
		d, err := r.runDispatcher(ctx, pool, dbl.Registry(), workers, share, nil)
		pool.Close()
		if err != nil {
			return nil, err
		}
		took[i] += d
		drained[i] += share
		h, err := waitHot(ctx, s.db.pool, before, int64(2*share))
		if err != nil {
			return nil, err
		}
		hot[i].updates += h.updates
		hot[i].hot += h.hot
		hot[i].indexBlocks += h.indexBlocks
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return nil, fmt.Errorf("%d intents were performed twice", dup)
	}
	rate := func(i int) float64 { return float64(drained[i]) / took[i].Seconds() }
	drain := ratioRow(fmt.Sprintf("Dispatch with %s retained intents, keyed, %d workers", count(r.sizes.RetainedIntents), workers), "intents/s",
		rate(1), "empty database", rate(0), 0.90)
	hotRow := Row{Measure: "HOT updates of outbox_intents during that drain", Unit: "%", Figure: hot[1].percent(),
		Baseline: "empty database", BaselineFigure: hot[0].percent(), Target: "≥ 45% (every claim)", Met: hot[1].percent() >= 45,
		Note: fmt.Sprintf("retained: %s (%.1f an intent); empty: %s (%.1f an intent)",
			hot[1], float64(hot[1].indexBlocks)/float64(drained[1]), hot[0], float64(hot[0].indexBlocks)/float64(drained[0]))}
	if hotRow.BaselineFigure > 0 {
		hotRow.Ratio = hotRow.Figure / hotRow.BaselineFigure
	}
	return []Row{drain, hotRow}, nil
}

// hotShare is the updates of outbox_intents over an interval, how many of
// them were HOT (no index entry written), and the index blocks the table's
// indexes had to touch (read or hit in the buffer cache) meanwhile: a
// measure of index maintenance that the machine's load does not blur.
type hotShare struct{ updates, hot, indexBlocks int64 }

func (h hotShare) percent() float64 {
	if h.updates == 0 {
		return 0
	}
	return 100 * float64(h.hot) / float64(h.updates)
}

func (h hotShare) String() string {
	return fmt.Sprintf("%d of %d updates HOT, %d index blocks touched", h.hot, h.updates, h.indexBlocks)
}

func readHot(ctx context.Context, pool *pgxpool.Pool) (hotShare, error) {
	var h hotShare
	err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd,
		(SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0)::bigint FROM pg_statio_user_indexes WHERE relname = 'outbox_intents')
		FROM pg_stat_user_tables WHERE relname = 'outbox_intents'`).Scan(&h.updates, &h.hot, &h.indexBlocks)
	return h, err
}

// waitHot waits until the statistics show at least want updates since
// before (the exited backends' reports arrive asynchronously), and returns
// the difference.
func waitHot(ctx context.Context, pool *pgxpool.Pool, before hotShare, want int64) (hotShare, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err := readHot(ctx, pool)
		if err != nil {
			return hotShare{}, err
		}
		d := hotShare{updates: after.updates - before.updates, hot: after.hot - before.hot, indexBlocks: after.indexBlocks - before.indexBlocks}
		if d.updates >= want || time.Now().After(deadline) {
			return d, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// retainedRead is one read an operator's screen or an API client makes.
type retainedRead struct {
	name string
	// path is a GET on the admin server; empty for a direct call.
	path func(s *retainedDB) string
	call func(ctx context.Context, s *retainedDB) error
}

func (r *runner) retainedReads(ctx context.Context, sides []*retainedDB) ([]Row, error) {
	reads := []retainedRead{
		{name: "stats (audit.Store.Stats: dashboard, CLI and API)", call: func(ctx context.Context, s *retainedDB) error {
			_, err := s.audit.Stats(ctx)
			return err
		}},
		{name: "activity chart (audit.Store.Activity, 60 × 1 min)", call: func(ctx context.Context, s *retainedDB) error {
			_, err := s.audit.Activity(ctx, time.Now().Truncate(time.Minute).Add(-59*time.Minute), time.Minute, 60)
			return err
		}},
		{name: "dashboard: intent list", path: func(*retainedDB) string { return "/" }},
		{name: "dashboard: list of in_doubt intents", path: func(*retainedDB) string { return "/?state=in_doubt" }},
		{name: "dashboard: list of one kind", path: func(*retainedDB) string { return "/?kind=sendgrid.email" }},
		{name: "dashboard: list of failed intents", path: func(*retainedDB) string { return "/?state=failed" }},
		{name: "dashboard: intent detail", path: func(s *retainedDB) string { return fmt.Sprint("/intents/", s.oldID) }},
		{name: "API: stats", path: func(*retainedDB) string { return "/api/v1/stats" }},
		{name: "API: list of in_doubt intents", path: func(*retainedDB) string { return "/api/v1/intents?state=in_doubt" }},
		{name: "API: list of one kind", path: func(*retainedDB) string { return "/api/v1/intents?kind=stripe.refund" }},
		{name: "API: intent detail", path: func(s *retainedDB) string { return fmt.Sprint("/api/v1/intents/", s.oldID) }},
	}
	const reps = 15
	var rows []Row
	for _, rd := range reads {
		if rd.call == nil {
			rd.call = func(ctx context.Context, s *retainedDB) error { return get(ctx, s.admin, rd.path(s)) }
		}
		// The sides take turns, read by read, so that a change in the
		// machine's load falls on both alike; the first reads of each side
		// (planning, cold pages) are not counted.
		times := make([][]time.Duration, len(sides))
		for rep := range reps + 2 {
			for i, s := range sides {
				start := time.Now()
				if err := rd.call(ctx, s); err != nil {
					return nil, fmt.Errorf("%s on the %s database: %w", rd.name, s.label, err)
				}
				if rep >= 2 {
					times[i] = append(times[i], time.Since(start))
				}
			}
		}
		medians, fastest := make([]time.Duration, len(sides)), make([]time.Duration, len(sides))
		for i, ts := range times {
			slices.Sort(ts)
			medians[i], fastest[i] = ts[len(ts)/2], ts[0]
		}
		row := Row{Measure: fmt.Sprintf("%s, %s retained", rd.name, count(r.sizes.RetainedIntents)), Unit: "ms",
			Figure: ms(medians[1]), Baseline: "empty database", BaselineFigure: ms(medians[0]),
			Target: fmt.Sprintf("≤ %d ms", retainedPageTarget.Milliseconds()), Met: medians[1] <= retainedPageTarget,
			Note: fmt.Sprintf("median of %d reads; fastest: %.2f ms retained, %.2f ms empty", reps, ms(fastest[1]), ms(fastest[0]))}
		if row.BaselineFigure > 0 {
			row.Ratio = row.Figure / row.BaselineFigure
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// get serves a GET from the admin server in this process, as a loopback
// client without a token would reach it, and fails on anything but 200.
func get(ctx context.Context, h http.Handler, path string) error {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1"+path, nil)
	req.RemoteAddr = "127.0.0.1:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	return nil
}

// count writes a row count compactly: 1M, 250k, 2000.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 10_000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
