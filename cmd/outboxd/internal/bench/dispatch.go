package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// paymentPayload is the keyed intent the dispatch scenarios perform.
const paymentPayload = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`

// waitLimit bounds any single wait of a scenario, so a broken run fails
// instead of hanging.
const waitLimit = 3 * time.Minute

// kindPayload is what to record for a provider kind.
func kindPayload(kind string) json.RawMessage {
	if kind == stripeprovider.KindPaymentIntent {
		return json.RawMessage(paymentPayload)
	}
	return json.RawMessage(emailPayload)
}

// recordIntents records n intents of kind through ConsumeBatch, one per
// message, and returns their ids.
func recordIntents(ctx context.Context, client *intents.Client, prefix, kind string, n int) ([]int64, error) {
	payload := kindPayload(kind)
	var ids []int64
	for start := 0; start < n; start += 500 {
		msgs := make([]intents.Message, min(500, n-start))
		for i := range msgs {
			msgs[i] = intents.Message{Consumer: "bench", ID: fmt.Sprint(prefix, start+i)}
		}
		res, err := client.ConsumeBatch(ctx, msgs, func(_ context.Context, _ pgx.Tx, _ intents.Message, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: kind, Payload: payload})
		})
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			ids = append(ids, r.Intents[0].ID)
		}
	}
	return ids, nil
}

// settledCounter is a dispatcher.Observer that counts settled intents and
// says when a number of them is reached.
type settledCounter struct {
	target    int64
	marks     *steadyMarks // nil: not recorded
	settled   atomic.Int64
	succeeded atomic.Int64
	done      chan struct{}
	once      sync.Once
}

func newSettledCounter(target int) *settledCounter {
	return &settledCounter{target: int64(target), done: make(chan struct{})}
}

func (c *settledCounter) AttemptFinished(string, providers.Outcome, time.Duration) {}

func (c *settledCounter) IntentSettled(_ string, state intenttype.State, _ time.Duration) {
	if state == intenttype.StateSucceeded {
		c.succeeded.Add(1)
	}
	n := c.settled.Add(1)
	c.marks.reached(n)
	if n >= c.target {
		c.once.Do(func() { close(c.done) })
	}
}

// steadyMarks times a run's steady state: the moments its lo-th and hi-th
// operations finish (a tenth and nine tenths of n), so that a rate read
// from them counts neither the start (River's client starting, its first
// fetch, every worker's first claim) nor the drain of the last calls in
// flight. Its methods are safe on a nil *steadyMarks, which records
// nothing.
type steadyMarks struct {
	lo, hi     int64
	loAt, hiAt atomic.Int64 // UnixNano
}

func newSteadyMarks(n int) *steadyMarks {
	return &steadyMarks{lo: int64(max(n/10, 1)), hi: int64(max(n*9/10, 2))}
}

// reached records the time when count is lo or hi.
func (m *steadyMarks) reached(count int64) {
	if m == nil {
		return
	}
	switch count {
	case m.lo:
		m.loAt.Store(time.Now().UnixNano())
	case m.hi:
		m.hiAt.Store(time.Now().UnixNano())
	}
}

// rate is the operations per second between the marks, 0 if either was
// not reached.
func (m *steadyMarks) rate() float64 {
	lo, hi := m.loAt.Load(), m.hiAt.Load()
	if lo == 0 || hi <= lo {
		return 0
	}
	return float64(m.hi-m.lo) / time.Duration(hi-lo).Seconds()
}

func (c *settledCounter) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	select {
	case <-c.done:
		if s := c.succeeded.Load(); s < c.target {
			return fmt.Errorf("only %d of %d intents succeeded", s, c.target)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d of %d intents settled before the time limit", c.settled.Load(), c.target)
	}
}

// dispatcherConfig is the dispatcher every scenario runs: the defaults
// users get, with the given concurrency.
func (r *runner) dispatcherConfig(reg *providers.Registry, workers int, obs dispatcher.Observer) *dispatcher.Config {
	return &dispatcher.Config{Providers: reg, MaxWorkers: workers, FetchCooldown: r.cfg.FetchCooldown, Observer: obs, Logger: r.cfg.Logger}
}

// runDispatcher starts a dispatcher, waits until target intents settled,
// stops it, and returns the time from start to the last settlement.
func (r *runner) runDispatcher(ctx context.Context, pool *pgxpool.Pool, reg *providers.Registry, workers, target int, marks *steadyMarks) (time.Duration, error) {
	counter := newSettledCounter(target)
	counter.marks = marks
	d, err := dispatcher.New(pool, r.dispatcherConfig(reg, workers, counter))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	cpuStart := processCPU()
	if err := d.Start(ctx); err != nil {
		return 0, err
	}
	err = counter.wait(ctx)
	took := time.Since(start)
	r.progress("  %d intents settled in %s; this process used %s of CPU meanwhile", target, took.Round(time.Millisecond), (processCPU() - cpuStart).Round(time.Millisecond))
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if stopErr := d.Stop(stopCtx); err == nil && stopErr != nil {
		err = stopErr
	}
	return took, err
}

func (r *runner) dispatchRows(ctx context.Context) ([]Row, error) {
	workers, n := r.sizes.Workers, r.sizes.DispatchIntents
	var noop float64
	var rows []Row
	for _, kind := range []string{stripeprovider.KindPaymentIntent, sendgridprovider.KindEmail} {
		db, err := r.newDatabase(ctx, "dispatch", min(workers+10, 60))
		if err != nil {
			return nil, err
		}
		row, riverRate, err := r.dispatchRow(ctx, db, kind, workers, n, noop == 0)
		r.closeDatabase(ctx, db)
		if err != nil {
			return nil, err
		}
		if riverRate > 0 {
			noop = riverRate
		}
		row.Note = fmt.Sprintf("River no-op jobs, %d workers: %.0f jobs/s (this row is %.0f%% of it)", workers, noop, 100*row.Figure/noop)
		rows = append(rows, row)
	}
	return rows, nil
}

// dispatchRow measures one provider kind, its outcome-transaction
// baseline, and (withRiver) River working no-op jobs, in db.
func (r *runner) dispatchRow(ctx context.Context, db *database, kind string, workers, n int, withRiver bool) (Row, float64, error) {
	name, target := "keyed (Stripe double)", 0.45
	if kind == sendgridprovider.KindEmail {
		name, target = "unkeyed (SendGrid double)", 0.25
	}
	r.progress("dispatch %s: %d intents, %d workers, against the outcome transaction alone", name, n, workers)
	baseTime, err := outcomeBaseline(ctx, db.pool, kind, workers, n)
	if err != nil {
		return Row{}, 0, fmt.Errorf("outcome baseline: %w", err)
	}
	var riverRate float64
	if withRiver {
		r.progress("dispatch: %d River no-op jobs, %d workers", n, workers)
		took, err := r.riverJobs(ctx, db.pool, workers, n, 0, nil)
		if err != nil {
			return Row{}, 0, fmt.Errorf("river baseline: %w", err)
		}
		riverRate = float64(n) / took.Seconds()
	}

	dbl, err := startDoubles(nil, false)
	if err != nil {
		return Row{}, 0, err
	}
	defer dbl.Close()
	client, err := intents.NewClient(db.pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		return Row{}, 0, err
	}
	if _, err := recordIntents(ctx, client, "d-", kind, n); err != nil {
		return Row{}, 0, err
	}
	took, err := r.runDispatcher(ctx, db.pool, dbl.Registry(), workers, n, nil)
	if err != nil {
		return Row{}, 0, err
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return Row{}, 0, fmt.Errorf("%d intents were performed twice", dup)
	}
	row := ratioRow(fmt.Sprintf("Dispatch %s, %d workers", name, workers), "intents/s", float64(n)/took.Seconds(),
		"outcome tx only (lock, update, insert attempt), hand-written pgx", float64(n)/baseTime.Seconds(), target)
	return row, riverRate, nil
}

// outcomeBaseline runs only the outcome transaction of n intents at the
// given concurrency, as a naive hand-written worker would: lock the intent,
// update it, insert the attempt, one statement each.
func outcomeBaseline(ctx context.Context, pool *pgxpool.Pool, kind string, workers, n int) (time.Duration, error) {
	providerName := "stripe"
	if kind == sendgridprovider.KindEmail {
		providerName = "sendgrid"
	}
	rows, err := pool.Query(ctx, `
		INSERT INTO outbox_intents (idempotency_key, kind, provider, payload)
		SELECT 'baseline-' || g, $1, $2, $3 FROM generate_series(1, $4::integer) g
		RETURNING id`, kind, providerName, kindPayload(kind), n)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, err
	}
	var next atomic.Int64
	return timeParallel(ctx, workers, n, func(ctx context.Context) error {
		id := ids[next.Add(1)-1]
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var state string
			var attempts int
			if err := tx.QueryRow(ctx, `SELECT state, attempt_count FROM outbox_intents WHERE id = $1 FOR UPDATE`, id).Scan(&state, &attempts); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE outbox_intents SET state = 'succeeded', attempt_count = $2, provider_ref = $3, updated_at = now(), finished_at = now() WHERE id = $1`,
				id, attempts+1, "ref"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, provider_ref)
				VALUES ($1, $2, now(), now(), 'succeeded', 200, $3)`, id, attempts+1, "ref")
			return err
		})
	})
}

// benchJobArgs is the River baseline's job: it does nothing, or sleeps.
type benchJobArgs struct{}

func (benchJobArgs) Kind() string { return "bench_noop" }

func (benchJobArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: "bench"} }

type benchWorker struct {
	river.WorkerDefaults[benchJobArgs]
	sleep  time.Duration
	worked func(job *river.Job[benchJobArgs])
}

func (w *benchWorker) Work(ctx context.Context, job *river.Job[benchJobArgs]) error {
	if w.sleep > 0 {
		t := time.NewTimer(w.sleep)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.worked(job)
	return nil
}

// riverClient is a River client working benchJobArgs on queue "bench" with
// the dispatchers' fetch settings. Its inserts notify as River's
// do: at most once per FetchCooldown.
func (r *runner) riverClient(pool *pgxpool.Pool, workers int, sleep time.Duration, worked func(*river.Job[benchJobArgs])) (*river.Client[pgx.Tx], error) {
	ws := river.NewWorkers()
	if err := river.AddWorkerSafely(ws, &benchWorker{sleep: sleep, worked: worked}); err != nil {
		return nil, err
	}
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{"bench": {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     r.cfg.FetchCooldown,
		FetchPollInterval: dispatcher.DefaultFetchPollInterval,
	})
}

// riverJobs inserts n bench jobs, then works them with River at the given
// concurrency, each sleeping sleep, and returns the time from start to the
// last job worked.
func (r *runner) riverJobs(ctx context.Context, pool *pgxpool.Pool, workers, n int, sleep time.Duration, marks *steadyMarks) (time.Duration, error) {
	var worked atomic.Int64
	done := make(chan struct{})
	client, err := r.riverClient(pool, workers, sleep, func(*river.Job[benchJobArgs]) {
		count := worked.Add(1)
		marks.reached(count)
		if count == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: benchJobArgs{}}
	}
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	select {
	case <-done:
	case <-waitCtx.Done():
		err = fmt.Errorf("the River baseline worked %d of %d jobs before the time limit", worked.Load(), n)
	}
	took := time.Since(start)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	if stopErr := client.Stop(stopCtx); err == nil && stopErr != nil {
		err = stopErr
	}
	return took, err
}

func (r *runner) slowRows(ctx context.Context) ([]Row, error) {
	workers, n, delay := r.sizes.SlowWorkers, r.sizes.SlowIntents, r.sizes.SlowDelay
	db, err := r.newDatabase(ctx, "slow", 50)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, db)
	r.progress("slow provider: %d River jobs sleeping %s, %d workers", n, delay, workers)
	riverMarks, marks := newSteadyMarks(n), newSteadyMarks(n)
	riverTook, err := r.riverJobs(ctx, db.pool, workers, n, delay, riverMarks)
	if err != nil {
		return nil, fmt.Errorf("river baseline: %w", err)
	}
	faults := fault.New(1)
	if err := faults.SetRates(fault.Rates{Delay: 1, DelayFor: delay}); err != nil {
		return nil, err
	}
	dbl, err := startDoubles(faults, false)
	if err != nil {
		return nil, err
	}
	defer dbl.Close()
	client, err := intents.NewClient(db.pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		return nil, err
	}
	if _, err := recordIntents(ctx, client, "s-", stripeprovider.KindPaymentIntent, n); err != nil {
		return nil, err
	}
	r.progress("slow provider: %d intents against a Stripe double answering in %s, %d workers", n, delay, workers)
	took, err := r.runDispatcher(ctx, db.pool, dbl.Registry(), workers, n, marks)
	if err != nil {
		return nil, err
	}
	bound := float64(workers) / delay.Seconds()
	// The rates are read over the steady state, both sides alike: from
	// the tenth to the ninetieth percentile of the work done. The bound is
	// a steady-state rate; a run of a few seconds timed from Start would
	// charge it with the client's start and the last calls' drain.
	figure, riverFigure := marks.rate(), riverMarks.rate()
	if figure == 0 || riverFigure == 0 {
		return nil, fmt.Errorf("slow provider: %d intents are too few to time a steady state", n)
	}
	row := Row{
		Measure: fmt.Sprintf("Dispatch to a %s provider, %d workers", delay, workers), Unit: "intents/s", Figure: figure,
		Baseline: fmt.Sprintf("River jobs sleeping %s, %d workers", delay, workers), BaselineFigure: riverFigure,
		Target: fmt.Sprintf("≥ 80%% of the bound %d/%s = %.0f/s", workers, delay, bound),
		Met:    figure >= 0.8*bound,
		Note: fmt.Sprintf("%.0f%% of the bound; rates between the %dth and %dth settlement of %d (River: jobs worked); from Start to the last, %.0f/s (River %.0f/s)",
			100*figure/bound, marks.lo, marks.hi, n, float64(n)/took.Seconds(), float64(n)/riverTook.Seconds()),
	}
	row.Ratio = row.Figure / row.BaselineFigure
	return []Row{row}, nil
}

// latencyRows measures commit → call latency at half the sustainable rate
// (measured first when the e2e scenario did not run), so that the rows mean
// the same on any machine, and at Sizes.LatencyRate for context.
func (r *runner) latencyRows(ctx context.Context) ([]Row, error) {
	if r.sustainable == 0 {
		r.progress("latency: the e2e scenario did not run; measuring this module's sustainable rate first")
		tps, _, err := r.commitLimit(ctx)
		if err != nil {
			return nil, err
		}
		res, err := r.climb(ctx, outboxPeer(), 0, ladderRates(tps/commitsPerIntent))
		if err != nil {
			return nil, err
		}
		r.sustainable = res.sustainable.rate
	}
	var rows []Row
	if half := r.sustainable / 2; half > 0 {
		half, err := r.latencyAt(ctx, half, fmt.Sprintf("half the sustainable rate, %d intents/s", half))
		if err != nil {
			return nil, err
		}
		rows = append(rows, half...)
	} else {
		r.progress("latency: no sustainable rate was found, so there is no row at half of it")
	}
	fixed, err := r.latencyAt(ctx, r.sizes.LatencyRate, fmt.Sprintf("%d intents/s (context)", r.sizes.LatencyRate))
	if err != nil {
		return nil, err
	}
	return append(rows, fixed...), nil
}

// latencyAt measures commit → call latency at rate, against River's
// insert-to-work latency at the same rate.
func (r *runner) latencyAt(ctx context.Context, rate int, label string) ([]Row, error) {
	workers, duration := r.sizes.Workers, r.sizes.LatencyDuration
	total := max(int(float64(rate)*duration.Seconds()), 20)
	db, err := r.newDatabase(ctx, "latency", latencyConns)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, db)

	r.progress("latency: River's insert-to-work latency for no-op jobs at %d/s for %s", rate, duration)
	riverCPU := takeCPUSnapshot()
	riverLat, err := r.riverLatency(ctx, db.pool, workers, rate, total)
	if err != nil {
		return nil, fmt.Errorf("river baseline: %w", err)
	}
	riverUse := takeCPUSnapshot().since(riverCPU)

	dbl, err := startDoubles(nil, true)
	if err != nil {
		return nil, err
	}
	defer dbl.Close()
	client, err := intents.NewClient(db.pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		return nil, err
	}
	d, err := dispatcher.New(db.pool, r.dispatcherConfig(dbl.Registry(), workers, nil))
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
	}()
	r.progress("latency: consumer commit to provider call at %d intents/s for %s", rate, duration)
	cpu := takeCPUSnapshot()
	lat, err := commitToCall(ctx, client, dbl, "l-", rate, total, 0)
	if err != nil {
		return nil, err
	}
	use := takeCPUSnapshot().since(cpu)
	riverP50, riverP99 := percentile(riverLat, 0.50), percentile(riverLat, 0.99)
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	row := func(q string, got, base, limit time.Duration) Row {
		row := Row{
			Measure: fmt.Sprintf("Commit → provider call, %s, at %s", q, label), Unit: "ms",
			Figure: ms(got), Baseline: fmt.Sprintf("River insert → work, no-op jobs, %s, same rate", q), BaselineFigure: ms(base),
			Ratio: ms(got) / max(ms(base), 0.001), Target: fmt.Sprintf("≤ %.0f ms", ms(limit)), Met: got <= limit,
		}
		if q == "p99" { // one note for the pair
			row.Note = fmt.Sprintf("one pool of %d connections for the recorders and the dispatcher (River: its inserts and workers); %d workers; %s (River's run: %s)",
				latencyConns, workers, use, riverUse)
		}
		return row
	}
	return []Row{row("p50", p50, riverP50, 10*time.Millisecond), row("p99", p99, riverP99, 50*time.Millisecond)}, nil
}

// latencyConns is the pool each side of a latency row runs on: as many
// connections for the recorders as the e2e consumers have
// (e2eConsumerConns, the commit-limit baseline's clients), and a few for
// the dispatcher's claims and settlements and River's own queries. A pool
// sized to the workers instead (60 on a two-core machine) let a moment's
// stall grow into a convoy: the paced recorders, each on a goroutine of
// its own, took every connection, 60 backends queued for two cores, and
// commit → call p99 reached 100–400 ms in a run of three for both sides
// alike, where with 12 connections no run passed 22 ms (docs/performance.md,
// "Latency").
const latencyConns = e2eConsumerConns + 4

// commitToCall records total one-intent messages through client at rate
// per second, each a Consume of its own, waits until the doubles saw
// earlier more calls and then every one of them, and returns the sorted
// latencies from each commit's return to its call's arrival (the first
// tenth excluded: it warms up). prefix makes the message ids its own.
func commitToCall(ctx context.Context, client *intents.Client, dbl *doubles, prefix string, rate, total, earlier int) ([]time.Duration, error) {
	committed := make([]time.Time, total)
	ids := make([]int64, total)
	var seq atomic.Int64
	err := paced(ctx, rate, total, func(ctx context.Context, i int) error {
		res, err := client.Consume(ctx, intents.Message{Consumer: "bench", ID: fmt.Sprint(prefix, seq.Add(1))}, func(_ context.Context, _ pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(paymentPayload)})
		})
		if err != nil {
			return err
		}
		committed[i], ids[i] = time.Now(), res.Intents[0].ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	if err := dbl.arrivals.wait(waitCtx, earlier+total); err != nil {
		return nil, err
	}
	lat := make([]time.Duration, 0, total)
	for i := total / 10; i < total; i++ {
		at, _ := dbl.arrivals.get(ids[i])
		lat = append(lat, max(at.Sub(committed[i]), 0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, nil
}

// riverLatency inserts total no-op jobs at rate per second, each in its own
// transaction as a consumer would, and returns the sorted latencies from
// each insert's return to its work starting (the first tenth excluded).
func (r *runner) riverLatency(ctx context.Context, pool *pgxpool.Pool, workers, rate, total int) ([]time.Duration, error) {
	var mu sync.Mutex
	started := map[int64]time.Time{}
	client, err := r.riverClient(pool, workers, 0, func(job *river.Job[benchJobArgs]) {
		mu.Lock()
		started[job.ID] = time.Now()
		mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	inserted := make([]time.Time, total)
	ids := make([]int64, total)
	err = paced(ctx, rate, total, func(ctx context.Context, i int) error {
		res, err := client.Insert(ctx, benchJobArgs{}, nil)
		if err != nil {
			return err
		}
		inserted[i], ids[i] = time.Now(), res.Job.ID
		return nil
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(waitLimit)
	for {
		mu.Lock()
		n := len(started)
		mu.Unlock()
		if n >= total {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the River baseline worked %d of %d jobs before the time limit", n, total)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, total)
	for i := total / 10; i < total; i++ {
		lat = append(lat, max(started[ids[i]].Sub(inserted[i]), 0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, nil
}

// paced calls fn total times at rate calls per second, each call on its
// own goroutine when it is due, so one slow call does not delay the next.
func paced(ctx context.Context, rate, total int, fn func(ctx context.Context, i int) error) error {
	return pacedUntil(ctx, rate, total, nil, fn)
}

// pacedUntil is paced that also ends, without an error, once stop is
// closed (a nil stop never is), after the calls it started; total < 0
// calls until then. It stops calling at the first error.
func pacedUntil(ctx context.Context, rate, total int, stop <-chan struct{}, fn func(ctx context.Context, i int) error) error {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	var failed atomic.Bool
	var mu sync.Mutex
	for i := 0; total < 0 || i < total; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
			case <-ctx.Done():
				t.Stop()
				wg.Wait()
				return ctx.Err()
			}
		}
		if stopped(stop) || failed.Load() {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// stopped reports whether stop is closed.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
