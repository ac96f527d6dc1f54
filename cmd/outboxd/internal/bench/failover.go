package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgcluster"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// The failover rows run on a primary and a streaming standby of their
// own (pgcluster: initdb and pg_basebackup), never on the server at
// --database-url, which they must not stop. Every side of them runs on
// that pair, so the ratios compare like with like; the pair's absolute
// figures are not those of the other rows' server.

// standbyMode is how the primary of the failover rows waits for its
// standby.
type standbyMode struct {
	name                      string
	settings                  pgcluster.Settings
	consumeNote, dispatchNote string
}

// sameMachine is said of every figure with a synchronous standby.
const sameMachine = "; the standby runs on the same machine, so a wait is a loopback round trip: across a network each waiting commit also pays the network's"

var (
	standbyAsync = standbyMode{name: "the standby asynchronous (no synchronous_standby_names)",
		settings: pgcluster.Settings{"synchronous_standby_names": "''", "synchronous_commit": "on"}}
	standbyEveryCommit = standbyMode{name: "a synchronous standby, every commit waiting (synchronous_commit = on)",
		settings:     pgcluster.Settings{"synchronous_standby_names": "'standby1'", "synchronous_commit": "on"},
		consumeNote:  "every recording waits for the standby" + sameMachine,
		dispatchNote: "every claim and every settlement waits for the standby" + sameMachine}
	standbyClaimsOnly = standbyMode{name: "a synchronous standby, only claims waiting (synchronous_commit = local)",
		settings:     pgcluster.Settings{"synchronous_standby_names": "'standby1'", "synchronous_commit": "local"},
		consumeNote:  "recording does not wait for the standby",
		dispatchNote: "each claimed batch waits for the standby (the claim raises its own synchronous_commit to on), settlements do not" + sameMachine}
)

// standbySide is what one standbyMode measured.
type standbySide struct {
	consumed float64 // messages/s through Consume
	rate     float64 // emails/s dispatched, in the steady state
}

// failoverResult is what the failover itself measured.
type failoverResult struct {
	n                   int
	promotion, recovery time.Duration
	twice, never, lost  int
}

func (r *runner) failoverRows(ctx context.Context) ([]Row, error) {
	dir, err := os.MkdirTemp("", "outboxd-bench-failover-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // the servers' user reaches it
		return nil, err
	}
	r.progress("failover: a primary and a streaming standby of this scenario's own, in %s", dir)
	primary, err := pgcluster.StartPrimary(ctx, dir, "primary", pgcluster.Settings{"fsync": "on", "shared_buffers": "'128MB'"})
	if err != nil {
		return nil, err
	}
	defer primary.Stop()
	standby, err := primary.StartStandby(ctx, dir, "standby1", primary.Addr())
	if err != nil {
		return nil, err
	}
	defer standby.Stop()
	sides := map[string]standbySide{}
	for i, mode := range []standbyMode{standbyAsync, standbyEveryCommit, standbyClaimsOnly} {
		if sides[mode.name], err = r.standbySide(ctx, primary, fmt.Sprint("side", i), mode); err != nil {
			return nil, fmt.Errorf("%s: %w", mode.name, err)
		}
	}
	res, err := r.failOver(ctx, primary, standby)
	if err != nil {
		return nil, fmt.Errorf("failover: %w", err)
	}
	return failoverReport(r.sizes.Workers, sides, res), nil
}

// standbySide measures Consume and the dispatch of emails (no key: every
// one claimed before its call) with the primary waiting for its standby
// as mode says, in a database of its own.
func (r *runner) standbySide(ctx context.Context, primary *pgcluster.Server, db string, mode standbyMode) (standbySide, error) {
	if err := primary.Configure(ctx, mode.settings); err != nil {
		return standbySide{}, err
	}
	c, err := r.openClusterSide(ctx, primary, db, primary)
	if err != nil {
		return standbySide{}, err
	}
	defer c.close()
	pool, dbl, client := c.pool, c.dbl, c.client
	n := r.sizes.ConsumeMessages
	r.progress("failover, %s: %d messages through Consume, %d consumers", mode.name, n, poolerConsumers)
	var seq atomic.Int64
	took, err := timeParallel(ctx, poolerConsumers, n, func(ctx context.Context) error {
		_, err := client.Consume(ctx, intents.Message{Consumer: "bench", ID: fmt.Sprint("c-", seq.Add(1))}, recordEmail)
		return err
	})
	if err != nil {
		return standbySide{}, err
	}
	side := standbySide{consumed: float64(n) / took.Seconds()}
	n = r.sizes.DispatchIntents
	if _, err := recordIntents(ctx, client, "d-", sendgridprovider.KindEmail, n); err != nil {
		return standbySide{}, err
	}
	r.progress("failover, %s: %d emails dispatched, %d workers", mode.name, n, r.sizes.Workers)
	marks := newSteadyMarks(n)
	if _, err := r.runDispatcher(ctx, pool, dbl.Registry(), r.sizes.Workers, n, marks); err != nil {
		return standbySide{}, err
	}
	side.rate = marks.rate()
	return side, nil
}

// failOver drains emails with every commit waiting for the standby,
// stops the primary as a crash would a quarter of the way, promotes the
// standby, and waits until the dispatcher, connected to both servers, has
// sent every email; it counts the emails sent twice or never at the
// double and the intents the promoted standby lacks.
func (r *runner) failOver(ctx context.Context, primary, standby *pgcluster.Server) (failoverResult, error) {
	if err := primary.Configure(ctx, standbyEveryCommit.settings); err != nil {
		return failoverResult{}, err
	}
	const db = "failover"
	c, err := r.openClusterSide(ctx, primary, db, primary, standby)
	if err != nil {
		return failoverResult{}, err
	}
	defer c.close()
	pool, dbl, client := c.pool, c.dbl, c.client
	res := failoverResult{n: r.sizes.DispatchIntents}
	ids, err := recordIntents(ctx, client, "f-", sendgridprovider.KindEmail, res.n)
	if err != nil {
		return res, err
	}
	settled := &settledTimes{}
	d, err := dispatcher.New(pool, r.dispatcherConfig(dbl.Registry(), r.sizes.Workers, settled))
	if err != nil {
		return res, err
	}
	if err := d.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Stop(stopCtx)
	}()
	if err := dbl.SendGrid().WaitForEmails(ctx, res.n/4); err != nil {
		return res, err
	}
	r.progress("failover: %d emails sent; the primary stopped immediately, the standby promoted", len(dbl.SendGrid().Emails()))
	killed := time.Now()
	if err := primary.StopImmediately(ctx); err != nil {
		return res, err
	}
	if err := standby.Promote(ctx); err != nil {
		return res, err
	}
	promoted := time.Now()
	if err := waitAllSucceeded(ctx, pool, ids); err != nil {
		return res, err
	}
	res.promotion, res.recovery = promoted.Sub(killed), settled.firstAfter(promoted).Sub(killed)
	return res, countEffects(ctx, pool, dbl.SendGrid().EffectsFor, ids, &res)
}

// clusterSide is a database of its own on the scenario's primary, with the
// doubles and a recording client.
type clusterSide struct {
	pool   *pgxpool.Pool
	dbl    *doubles
	client *intents.Client
}

// openClusterSide creates database db on primary, migrated, and opens it
// through a pool on servers (the primary, or the primary and its standby:
// a pool that follows a failover).
func (r *runner) openClusterSide(ctx context.Context, primary *pgcluster.Server, db string, servers ...*pgcluster.Server) (*clusterSide, error) {
	pool, err := migratedDatabase(ctx, primary, db, pgcluster.MultiHostURL(db, servers...), r.sizes.Workers+10)
	if err != nil {
		return nil, err
	}
	dbl, err := startDoubles(nil, false)
	if err != nil {
		pool.Close()
		return nil, err
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		dbl.Close()
		pool.Close()
		return nil, err
	}
	return &clusterSide{pool: pool, dbl: dbl, client: client}, nil
}

func (c *clusterSide) close() {
	c.dbl.Close()
	c.pool.Close()
}

// waitAllSucceeded waits until every intent of ids has succeeded, as the
// database says: the promoted standby's rows, not the Observer's reports,
// are what the failover kept.
func waitAllSucceeded(ctx context.Context, pool *pgxpool.Pool, ids []int64) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	for {
		var left int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE id = ANY($1) AND state <> 'succeeded'`, ids).Scan(&left)
		if err == nil && left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d intents not succeeded (%v): %w", left, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countEffects counts the intents of ids sent more than once or never,
// and those the database no longer has.
func countEffects(ctx context.Context, pool *pgxpool.Pool, effects func(int64) int, ids []int64, res *failoverResult) error {
	for _, id := range ids {
		switch n := effects(id); {
		case n > 1:
			res.twice++
		case n == 0:
			res.never++
		}
	}
	var kept int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE id = ANY($1)`, ids).Scan(&kept); err != nil {
		return err
	}
	res.lost = len(ids) - kept
	return nil
}

// migratedDatabase creates database db on server and returns a pool of
// maxConns on url (db on server, or on more servers) with the outbox
// migrated.
func migratedDatabase(ctx context.Context, server *pgcluster.Server, db, url string, maxConns int) (*pgxpool.Pool, error) {
	if err := server.Exec(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := migrations.New(pool, nil).Up(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// settledTimes keeps when each settlement was reported, which is after it
// committed.
type settledTimes struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *settledTimes) AttemptFinished(kind string, outcome providers.Outcome, d time.Duration) {}

func (s *settledTimes) IntentSettled(kind string, state intenttype.State, since time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
}

// firstAfter is the first settlement reported after at.
func (s *settledTimes) firstAfter(at time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.times {
		if x.After(at) {
			return x
		}
	}
	return time.Time{}
}

// failoverReport compares each synchronous mode with the asynchronous
// standby, and states the failover's recovery and its effects.
func failoverReport(workers int, sides map[string]standbySide, res failoverResult) []Row {
	async := sides[standbyAsync.name]
	base := "with " + standbyAsync.name + ", same run"
	var rows []Row
	for _, mode := range []standbyMode{standbyClaimsOnly, standbyEveryCommit} {
		side := sides[mode.name]
		consume := ratioRow(fmt.Sprintf("With %s: Consume, 1 intent/message, %d consumers", mode.name, poolerConsumers), "messages/s", side.consumed, base, async.consumed, 0.8)
		dispatch := ratioRow(fmt.Sprintf("With %s: dispatch unkeyed (SendGrid double), %d workers", mode.name, workers), "intents/s", side.rate, base, async.rate, 0.8)
		consume.Note, dispatch.Note = mode.consumeNote, mode.dispatchNote
		rows = append(rows, consume, dispatch)
	}
	recovery := Row{
		Measure: fmt.Sprintf("Failover mid-drain (primary stopped immediately, synchronous standby promoted): from the stop to the first settlement on the promoted standby, %d workers", workers),
		Unit:    "s", Figure: res.recovery.Seconds(), Baseline: "the promotion alone (pg_ctl promote), same run", BaselineFigure: res.promotion.Seconds(),
		Target: "≤ 10 s", Met: res.recovery > 0 && res.recovery <= 10*time.Second,
		Note: "the dispatcher, connected to both servers (target_session_attrs=read-write), follows the promoted standby by itself; settlements in flight are sent again (--settle-retry-for)",
	}
	recovery.Ratio = recovery.Figure / max(recovery.BaselineFigure, 0.001)
	bad := res.twice + res.never + res.lost
	effects := Row{
		Measure: "Failover mid-drain: emails sent twice or never at the SendGrid double, and intents the promoted standby lacks", Unit: "intents",
		Figure: float64(bad), Baseline: "emails recorded", BaselineFigure: float64(res.n), Ratio: float64(bad) / float64(res.n),
		Target: "= 0", Met: bad == 0,
		Note: fmt.Sprintf("%d sent twice, %d never, %d lost", res.twice, res.never, res.lost),
	}
	return append(rows, recovery, effects)
}
