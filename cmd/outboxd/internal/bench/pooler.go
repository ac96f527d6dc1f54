package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/testkit/pgbouncer"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// poolerRate is the rate at which the pooler rows measure commit → call,
// well below either side's sustainable rate: the pooler's own cost, not a
// queue's.
const poolerRate = 200

// poolerConsumers is how many Consume calls the pooler rows run at once:
// the consume scenario's largest count.
const poolerConsumers = 32

// poolerSide is what one side of the pooler rows measured.
type poolerSide struct {
	consumed float64 // messages/s through Consume, poolerConsumers at once
	rate     float64 // intents/s dispatched
	p50, p99 time.Duration
}

// poolerRows runs the same keyed dispatch, then the same paced consumers,
// connected directly (LISTEN, pgx's default statement cache) and through
// a PgBouncer in transaction mode (PollOnly, default_query_exec_mode=exec;
// docs/operating.md, "Behind a connection pooler"), each in a database of
// its own.
func (r *runner) poolerRows(ctx context.Context) ([]Row, error) {
	workers := r.sizes.Workers
	bouncer, err := pgbouncer.Start(ctx, r.cfg.ServerURL, workers+10)
	if errors.Is(err, pgbouncer.ErrNotInstalled) {
		return nil, fmt.Errorf("%w; make bench installs it", err)
	}
	if err != nil {
		return nil, err
	}
	defer bouncer.Close()
	direct, err := r.poolerSide(ctx, poolerDirect, nil)
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	unprepared, err := r.poolerSide(ctx, poolerDirectUnprepared, nil)
	if err != nil {
		return nil, fmt.Errorf("direct, as behind a pooler: %w", err)
	}
	pooled, err := r.poolerSide(ctx, poolerThrough, bouncer)
	if err != nil {
		return nil, fmt.Errorf("through PgBouncer: %w", err)
	}
	return poolerReport(workers, direct, unprepared, pooled), nil
}

// poolerReport compares the sides two ways: the pooler's hop (through
// PgBouncer against the same settings connected directly) and the
// pooler's settings (those against pgx's defaults and a LISTEN).
func poolerReport(workers int, direct, unprepared, pooled poolerSide) []Row {
	const (
		through  = "Through PgBouncer (transaction mode; --poll-only, default_query_exec_mode=exec)"
		settings = "Connected directly with a pooler's settings (--poll-only, default_query_exec_mode=exec)"
		hopBase  = "the same settings connected directly, same run"
		base     = "connected directly with pgx's defaults and a LISTEN, same run"
	)
	consume := fmt.Sprintf("Consume, 1 intent/message, %d consumers", poolerConsumers)
	dispatch := fmt.Sprintf("dispatch keyed (Stripe double), %d workers", workers)
	hopNote := fmt.Sprintf("one more hop; PgBouncer's process shares the machine's %d CPUs with Postgres and the bench", runtime.NumCPU())
	settingsNote := "each statement parsed and planned at each execution instead of prepared once a session; PgBouncer 1.21+ with max_prepared_statements would keep pgx's default, untried here (Debian 12 ships 1.18)"
	rows := []Row{
		ratioRow(fmt.Sprintf("%s: %s", through, consume), "messages/s", pooled.consumed, hopBase, unprepared.consumed, 0.8),
		ratioRow(fmt.Sprintf("%s: %s", settings, consume), "messages/s", unprepared.consumed, base, direct.consumed, 0.5),
		ratioRow(fmt.Sprintf("%s: %s", through, dispatch), "intents/s", pooled.rate, hopBase, unprepared.rate, 0.8),
		ratioRow(fmt.Sprintf("%s: %s", settings, dispatch), "intents/s", unprepared.rate, base, direct.rate, 0.5),
	}
	rows[0].Note, rows[2].Note = hopNote, hopNote
	rows[1].Note, rows[3].Note = settingsNote, settingsNote
	latency := func(q string, got, against, limit time.Duration) Row {
		return Row{
			Measure: fmt.Sprintf("%s: commit → provider call, %s, at %d intents/s", through, q, poolerRate), Unit: "ms",
			Figure: ms(got), Baseline: base, BaselineFigure: ms(against), Ratio: ms(got) / max(ms(against), 0.001),
			Target: fmt.Sprintf("≤ %.0f ms", ms(limit)), Met: got <= limit,
			Note: fmt.Sprintf("the poll interval, %s, bounds what an intent recorded into an idle queue waits for its claim", dispatcher.DefaultPollOnlyFetchInterval),
		}
	}
	return append(rows, latency("p50", pooled.p50, direct.p50, 10*time.Millisecond), latency("p99", pooled.p99, direct.p99, 50*time.Millisecond))
}

// poolerMode is how one side of the pooler rows connects.
type poolerMode int

const (
	// poolerDirect connects to Postgres with pgx's defaults and LISTENs.
	poolerDirect poolerMode = iota
	// poolerDirectUnprepared connects to Postgres with what a pooler
	// needs (no prepared statements, polling), without the pooler.
	poolerDirectUnprepared
	// poolerThrough connects through the pooler.
	poolerThrough
)

func (m poolerMode) String() string {
	return [...]string{"connected directly", "connected directly, as behind a pooler", "through PgBouncer"}[m]
}

// poolerSide measures one side in a fresh database: the drain rate of
// DispatchIntents recorded intents, then commit → call while consumers
// record at poolerRate for LatencyDuration. bouncer is used by
// poolerThrough only.
func (r *runner) poolerSide(ctx context.Context, mode poolerMode, bouncer *pgbouncer.Server) (poolerSide, error) {
	workers, n := r.sizes.Workers, r.sizes.DispatchIntents
	db, err := r.newDatabase(ctx, "pooler", min(workers+10, 60))
	if err != nil {
		return poolerSide{}, err
	}
	defer r.closeDatabase(ctx, db)
	pool, name := db.pool, mode.String()
	if mode != poolerDirect {
		url := db.url
		if mode == poolerThrough {
			if url, err = bouncer.URL(db.url); err != nil {
				return poolerSide{}, err
			}
		}
		if pool, err = unpreparedPool(ctx, url, min(workers+10, 60)); err != nil {
			return poolerSide{}, err
		}
		defer pool.Close()
	}
	dbl, err := startDoubles(nil, true)
	if err != nil {
		return poolerSide{}, err
	}
	defer dbl.Close()
	client, err := intents.NewClient(pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		return poolerSide{}, err
	}
	var side poolerSide
	r.progress("pooler, %s: %d messages through Consume, %d consumers", name, n, poolerConsumers)
	var seq atomic.Int64
	took, err := timeParallel(ctx, poolerConsumers, n, func(ctx context.Context) error {
		_, err := client.Consume(ctx, intents.Message{Consumer: "bench", ID: fmt.Sprint("p-", seq.Add(1))}, func(_ context.Context, _ pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(paymentPayload)})
		})
		return err
	})
	if err != nil {
		return poolerSide{}, err
	}
	side.consumed = float64(n) / took.Seconds()
	counter := newSettledCounter(n)
	cfg := r.dispatcherConfig(dbl.Registry(), workers, counter)
	cfg.PollOnly = mode != poolerDirect
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		return poolerSide{}, err
	}
	start := time.Now()
	if err := d.Start(ctx); err != nil {
		return poolerSide{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
	}()
	if err := counter.wait(ctx); err != nil {
		return poolerSide{}, err
	}
	side.rate = float64(n) / time.Since(start).Seconds()

	r.progress("pooler, %s: consumer commit to provider call at %d intents/s for %s", name, poolerRate, r.sizes.LatencyDuration)
	total := max(int(poolerRate*r.sizes.LatencyDuration.Seconds()), 20)
	lat, err := commitToCall(ctx, client, dbl, "pl-", poolerRate, total, n)
	if err != nil {
		return poolerSide{}, err
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return poolerSide{}, fmt.Errorf("%d intents were performed twice", dup)
	}
	side.p50, side.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return side, nil
}

// unpreparedPool opens a pool of maxConns on dbURL with pgx preparing no
// statement (default_query_exec_mode=exec).
func unpreparedPool(ctx context.Context, dbURL string, maxConns int) (*pgxpool.Pool, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	return pgxpool.NewWithConfig(ctx, cfg)
}
