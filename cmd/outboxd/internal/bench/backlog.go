package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
)

// The backlog scenario: an incident's shape. Sizes.BacklogIntents keyed
// intents are recorded at once (a provider came back after an outage, a
// backfill), then one dispatcher drains them against the zero-latency
// Stripe double while an operator's screens and an API client read every
// few hundred milliseconds, and an operator runs outboxd stats every few
// seconds. The drain must not slow as it goes (its last
// tenth at 90% of its first tenth's rate or more), and stats, the
// dashboard's pages and the API must answer within 50 ms throughout.

// backlogReadTarget is the bound on every read during the drain.
const backlogReadTarget = 50 * time.Millisecond

// backlogReadEvery spaces the rounds of reads during the drain.
const backlogReadEvery = 300 * time.Millisecond

// fillBacklogSQL writes $1 pending intents, queued, as recording them
// leaves them (keyed Stripe payments of distinct customers), and
// retainedInDoubt in_doubt ones an operator's in_doubt list finds.
var fillBacklogSQL = []string{`
INSERT INTO outbox_intents (idempotency_key, kind, provider, consumer, message_id, reference, payload, queued)
SELECT 'backlog:b-' || g, 'stripe.payment_intent', 'stripe', 'backlog', 'b-' || g, 'order-' || g,
    jsonb_build_object('amount', 100 + g % 9900, 'currency', 'usd', 'customer', 'cus_' || (g % 50000),
        'payment_method', 'pm_card_visa', 'confirm', true, 'description', 'Order ' || g),
    true
FROM generate_series(1, $1::bigint) AS g
ORDER BY g`, `
INSERT INTO outbox_intents (idempotency_key, kind, provider, consumer, message_id, payload, state, attempt_count,
                            provider_key, key_namespace, key_first_used_at, may_have_acted, recheck_at, recheck_count)
SELECT 'backlog:doubt-' || g, 'sendgrid.email', 'sendgrid', 'backlog', 'doubt-' || g,
    '{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}',
    'in_doubt', 1, 'backlog:doubt-' || g, 'benchns0', now() - interval '1 hour', true, now() + interval '30 days', 5
FROM generate_series(1, $1::int) AS g`}

// tenths times a drain: the moment each tenth of it settled.
type tenths struct {
	n        int64
	settled  atomic.Int64
	at       [11]atomic.Int64 // UnixNano of the k-th tenth; at[0] is the start
	done     chan struct{}
	doneOnce sync.Once
}

func newTenths(n int) *tenths { return &tenths{n: int64(n), done: make(chan struct{})} }

func (t *tenths) AttemptFinished(string, providers.Outcome, time.Duration) {}

func (t *tenths) IntentSettled(string, intenttype.State, time.Duration) {
	k := t.settled.Add(1)
	if tenth := k * 10 / t.n; k*10%t.n == 0 && tenth >= 1 && tenth <= 10 {
		t.at[tenth].Store(time.Now().UnixNano())
	}
	if k >= t.n {
		t.doneOnce.Do(func() { close(t.done) })
	}
}

// rate is the drain's rate over the k-th tenth (1-based), intents/s.
func (t *tenths) rate(k int) float64 {
	d := time.Duration(t.at[k].Load() - t.at[k-1].Load())
	if d <= 0 {
		return 0
	}
	return float64(t.n) / 10 / d.Seconds()
}

// backlogRead is one read timed during the drain.
type backlogRead struct {
	name string
	call func(ctx context.Context) error
	// every is how many rounds of reads apart it runs: 1, or more for a
	// command an operator runs now and then, not a screen that refreshes.
	every int
	took  []time.Duration
}

func (r *runner) backlogRows(ctx context.Context) ([]Row, error) {
	n, workers := r.sizes.BacklogIntents, r.sizes.Workers
	db, err := r.newDatabase(ctx, "backlog", workers+10)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, db)
	r.progress("backlog: %d intents recorded at once, then drained by one dispatcher (%d workers) while stats, the dashboard and the API are read", n, workers)
	if _, err := db.pool.Exec(ctx, fillBacklogSQL[0], n); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, fillBacklogSQL[1], retainedInDoubt); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return nil, err
	}
	dbl, err := startDoubles(nil, false)
	if err != nil {
		return nil, err
	}
	defer dbl.Close()
	reads, err := r.backlogReads(db)
	if err != nil {
		return nil, err
	}
	t := newTenths(n)
	d, err := dispatcher.New(db.pool, r.dispatcherConfig(dbl.Registry(), workers, t))
	if err != nil {
		return nil, err
	}
	t.at[0].Store(time.Now().UnixNano())
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	readErr := readDuring(ctx, t.done, reads)
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		return nil, err
	}
	if readErr != nil {
		return nil, readErr
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return nil, fmt.Errorf("%d intents were performed twice", dup)
	}
	return backlogReport(n, t, reads), nil
}

// backlogReads are the reads of the scenario: what an operator and an API
// client look at during an incident.
func (r *runner) backlogReads(db *database) ([]*backlogRead, error) {
	reg, err := recordingRegistry()
	if err != nil {
		return nil, err
	}
	store, err := audit.New(db.pool, reg)
	if err != nil {
		return nil, err
	}
	client, err := r.recordingClient(db.pool)
	if err != nil {
		return nil, err
	}
	admin, err := adminhttp.NewHandler(adminhttp.Config{Addr: "127.0.0.1:0", Audit: store, Intents: client,
		Pool: db.pool, DisableRiverUI: true, Logger: r.cfg.Logger})
	if err != nil {
		return nil, err
	}
	page := func(path string) func(context.Context) error {
		return func(ctx context.Context) error { return get(ctx, admin, path) }
	}
	return []*backlogRead{
		{name: "outboxd stats (audit.Store.Stats)", every: 10, call: func(ctx context.Context) error {
			_, err := store.Stats(ctx)
			return err
		}},
		{name: "dashboard: first page", call: page("/")},
		{name: "dashboard: list of in_doubt intents", call: page("/?state=in_doubt")},
		{name: "dashboard: list of pending intents", call: page("/?state=pending")},
		{name: "API: stats", call: page("/api/v1/stats")},
		{name: "API: list of in_doubt intents", call: page("/api/v1/intents?state=in_doubt")},
	}, nil
}

// readDuring runs every read once a backlogReadEvery until done is closed,
// and records how long each took.
func readDuring(ctx context.Context, done <-chan struct{}, reads []*backlogRead) error {
	tick := time.NewTicker(backlogReadEvery)
	defer tick.Stop()
	for round := 0; ; round++ {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		for _, rd := range reads {
			if round%max(rd.every, 1) != 0 {
				continue
			}
			start := time.Now()
			if err := rd.call(ctx); err != nil {
				return fmt.Errorf("%s during the drain: %w", rd.name, err)
			}
			rd.took = append(rd.took, time.Since(start))
		}
	}
}

// backlogReport makes the scenario's rows: the drain's last tenth against
// its first, and each read's 90th percentile against the bound.
func backlogReport(n int, t *tenths, reads []*backlogRead) []Row {
	first, last := t.rate(1), t.rate(10)
	var perTenth []string
	for k := 1; k <= 10; k++ {
		perTenth = append(perTenth, fmt.Sprintf("%.0f", t.rate(k)))
	}
	drain := ratioRow(fmt.Sprintf("Backlog of %s intents recorded at once: drain rate over the last tenth", count(n)), "intents/s",
		last, "the first tenth, same drain", first, 0.90)
	drain.Note = fmt.Sprintf("intents/s in each tenth: %v; the whole drain %.1f s", perTenth,
		time.Duration(t.at[10].Load()-t.at[0].Load()).Seconds())
	rows := []Row{drain}
	for _, rd := range reads {
		if len(rd.took) == 0 {
			continue
		}
		ts := slices.Clone(rd.took)
		slices.Sort(ts)
		p90 := ts[(len(ts)*9)/10]
		row := Row{Measure: fmt.Sprintf("%s during the drain of %s, 90th percentile", rd.name, count(n)), Unit: "ms",
			Figure: ms(p90), Baseline: "the median read", BaselineFigure: ms(ts[len(ts)/2]),
			Target: fmt.Sprintf("≤ %d ms", backlogReadTarget.Milliseconds()), Met: p90 <= backlogReadTarget,
			Note: fmt.Sprintf("%d reads, %s apart; slowest %.1f ms", len(ts), time.Duration(max(rd.every, 1))*backlogReadEvery, ms(ts[len(ts)-1]))}
		if row.BaselineFigure > 0 {
			row.Ratio = row.Figure / row.BaselineFigure
		}
		rows = append(rows, row)
	}
	return rows
}
