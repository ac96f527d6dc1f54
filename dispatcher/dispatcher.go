package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/tracing"
)

// maxAttemptsLimit keeps our bound under River's own limit for a dispatch
// job, so River never discards a job the dispatcher would still try.
const maxAttemptsLimit = intentstore.DispatchMaxAttempts - 10

// Dispatcher runs River workers that perform intents. Create it with New,
// then Start it; Stop waits for attempts in flight.
type Dispatcher struct {
	config *Config
	pool   *pgxpool.Pool
	store  *intentstore.Store
	tracer trace.Tracer
	// client is the River client on the dispatch queue: the jobs of
	// intents that need a later attempt or a take-over, and the periodic
	// maintenance.
	client *river.Client[pgx.Tx]
	// queue claims and works the queued intents (queue.go); set by Start.
	queue *queue
	// workers bounds the intents worked at once, by the queue and by
	// River's jobs together (Config.MaxWorkers).
	workers workers
	// namespace is the deployment's (intentstore.Store.Namespace), read by
	// Start before any work.
	namespace string
	// rules say which intents a job claims as it loads them; set by Start.
	rules *intentstore.ClaimRules

	// lastClaim is the latest claimTime handed out.
	claimMu   sync.Mutex
	lastClaim time.Time
}

// claimTime is Config.Now, at the microsecond Postgres keeps, and never the
// same one twice in this dispatcher: an attempt's started_at is what tells
// its claim from another when a worker releases one whose answer it lost
// (intentstore.ReleaseUnsent).
func (d *Dispatcher) claimTime() time.Time {
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	t := d.config.Now().Truncate(time.Microsecond)
	if !t.After(d.lastClaim) {
		t = d.lastClaim.Add(time.Microsecond)
	}
	d.lastClaim = t
	return t
}

// New returns a Dispatcher working the intents in the database behind pool,
// which must have been migrated (outboxd migrate). Several dispatchers, in
// one process or many, may share a database: River hands each job to one of
// them, and elects one leader to run the sweep and the retention passes
// (see PruneOnce).
func New(pool *pgxpool.Pool, config *Config) (*Dispatcher, error) {
	if pool == nil {
		return nil, errors.New("dispatcher: pool is required")
	}
	cfg, err := config.withDefaults()
	if err != nil {
		return nil, err
	}
	store, err := intentstore.New(pool, &intentstore.Config{RetryFor: cfg.SettleRetryFor, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{config: cfg, pool: pool, store: store, tracer: tracing.Tracer(cfg.TracerProvider), workers: newWorkers(cfg.MaxWorkers)}
	if d.client, err = d.newClient(pool, cfg); err != nil {
		return nil, err
	}
	return d, nil
}

// newClient returns the River client of the dispatch queue, working up to
// MaxWorkers jobs at once (a dispatch job takes one of the dispatcher's
// workers before it calls a provider). Every dispatcher's client has
// every worker and the periodic jobs: whichever is elected leader runs
// those.
func (d *Dispatcher) newClient(pool *pgxpool.Pool, cfg *Config) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &dispatchWorker{d: d}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &sweepWorker{d: d}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &retentionWorker{d: d}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &activityRollUpWorker{d: d}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &recheckWorker{d: d}); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, &countsWorker{d: d}); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{intentstore.DispatchQueue: {MaxWorkers: cfg.MaxWorkers}},
		Workers:              workers,
		JobTimeout:           cfg.jobTimeout(),
		RescueStuckJobsAfter: cfg.RescueStuckJobsAfter,
		RetryPolicy:          &backoffPolicy{base: cfg.RetryBackoff, max: cfg.RetryBackoffMax},
		FetchCooldown:        cfg.FetchCooldown,
		FetchPollInterval:    cfg.FetchPollInterval,
		// River's jobs are the rare paths (a retry at its backoff, a
		// take-over): polling finds them soon enough, and River keeps no
		// LISTEN connection of its own, woken by every recording's
		// notification for nothing (Postgres signals every listener).
		PollOnly:   true,
		Logger:     cfg.Logger,
		Middleware: riverMiddleware(cfg.TracerProvider),
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(cfg.SweepInterval),
				func() (river.JobArgs, *river.InsertOpts) { return sweepArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
			d.retentionJob(),
			d.activityRollUpJob(),
			d.countsJob(),
			river.NewPeriodicJob(river.PeriodicInterval(cfg.RecheckInterval),
				func() (river.JobArgs, *river.InsertOpts) { return recheckArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("dispatcher: river client: %w", err)
	}
	return client, nil
}

// riverMiddleware traces River's work of every job (a "river.work/<kind>"
// span, the parent of the attempt's span) when tp is set. Metrics stay
// with this package's own collector: the middleware is given a no-op meter,
// not the global one.
func riverMiddleware(tp trace.TracerProvider) []rivertype.Middleware {
	if tp == nil {
		return nil
	}
	return []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		TracerProvider:              tp,
		MeterProvider:               metricnoop.NewMeterProvider(),
		EnableWorkSpanJobKindSuffix: true,
	})}
}

// Start begins working intents. It returns once River has started and the
// queue is fetching; work goes on in the background until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	if err := d.prepare(ctx); err != nil {
		return err
	}
	// River stops hard when its start context ends; shutdown goes through
	// Stop instead, so it can be graceful.
	if err := d.client.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	d.startQueue(ctx)
	return nil
}

// prepare reads what every decision needs from the database: the
// deployment's namespace.
func (d *Dispatcher) prepare(ctx context.Context) error {
	ns, err := d.store.Namespace(ctx)
	if err != nil {
		return fmt.Errorf("dispatcher: %w (has the database been migrated? outboxd migrate)", err)
	}
	d.namespace = ns
	d.rules = d.claimRules(ns)
	if err := d.checkSessions(ctx); err != nil {
		return err
	}
	return d.checkStandbys(ctx)
}

// checkStandbys warns when standbys stream from the database
// asynchronously and a provider without an idempotency key is served: a
// failover to such a standby can lose a claim, and the call it allowed
// can then be made a second time (DESIGN.md, invariant 16). It is a
// warning, not a refusal: an operator may accept that risk knowingly.
func (d *Dispatcher) checkStandbys(ctx context.Context) error {
	var keyless []string
	for _, p := range d.config.Providers.Providers() {
		if !p.Capabilities().IdempotencyKeys {
			keyless = append(keyless, p.Name())
		}
	}
	if len(keyless) == 0 {
		return nil
	}
	n, err := intentstore.AsyncStandbys(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	if n > 0 {
		d.config.Logger.WarnContext(ctx, "standbys stream from this database asynchronously (synchronous_standby_names is empty): a failover to one can lose a claim, and a provider without an idempotency key can then be called twice; name the standby in synchronous_standby_names (docs/operating.md, \"Failover and standbys\")",
			"standbys", n, "providers", strings.Join(keyless, ","))
	}
	return nil
}

// ErrSessionsPooled is matched (errors.Is) by the error Start returns when
// its pool reaches Postgres through a pooler in transaction mode
// (intentstore.SessionsPooled) and the configuration needs a session: a
// LISTEN (set Config.PollOnly) or statements prepared once and reused (set
// pgx's default_query_exec_mode to exec or simple_protocol).
var ErrSessionsPooled = errors.New("the pool reaches Postgres through a pooler in transaction mode (PgBouncer pool_mode = transaction), which keeps no session")

// checkSessions refuses, before anything is claimed, a configuration that
// a transaction pooler would break: notifications sent to another client,
// or prepared statements that "do not exist" at random.
func (d *Dispatcher) checkSessions(ctx context.Context) error {
	pooled, err := intentstore.SessionsPooled(ctx, d.pool)
	if err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	if !pooled {
		return nil
	}
	var need []string
	if !d.config.PollOnly {
		need = append(need, "set Config.PollOnly (outboxd run --poll-only): a LISTEN needs a session")
	}
	if intentstore.Prepares(d.pool.Config().ConnConfig) {
		need = append(need, "add default_query_exec_mode=exec to the database URL (or set pgx's DefaultQueryExecMode to QueryExecModeExec): pgx's default prepares statements in a session")
	}
	if len(need) == 0 {
		return nil
	}
	return fmt.Errorf("dispatcher: %w: %s (docs/operating.md, \"Behind a connection pooler\")", ErrSessionsPooled, strings.Join(need, "; "))
}

// claimRules are the intentstore.ClaimRules of this dispatcher's decisions
// (see work): its attempt budgets and the key limits of its providers.
func (d *Dispatcher) claimRules(namespace string) *intentstore.ClaimRules {
	limits := map[string]int{}
	for _, p := range d.config.Providers.Providers() {
		limits[p.Name()] = p.Capabilities().MaxKeyLength
	}
	return &intentstore.ClaimRules{
		Namespace: namespace, MaxAttempts: d.config.MaxAttempts, MaxAttemptsByKind: d.config.MaxAttemptsByKind, MaxKeyLength: limits,
	}
}

// Stop stops fetching new intents and waits for attempts in flight to
// record their outcome: a worker returns only once its settlement has
// committed, so when Stop returns no outcome is waiting to be written. If
// ctx ends first, attempts still running are cancelled (a cancelled call is
// classified like any other lost call, and its settlement is still
// written) and Stop returns ctx's error.
func (d *Dispatcher) Stop(ctx context.Context) error {
	var riverErr, queueErr error
	var wg sync.WaitGroup
	wg.Go(func() { riverErr = d.stopClient(ctx, d.client) })
	if d.queue != nil {
		wg.Go(func() { queueErr = d.queue.stop(ctx, 10*time.Second) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(riverErr, queueErr)
}

func (d *Dispatcher) stopClient(ctx context.Context, c *river.Client[pgx.Tx]) error {
	err := c.Stop(ctx)
	if err != nil && ctx.Err() != nil {
		cancelCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.StopAndCancel(cancelCtx)
		return ctx.Err()
	}
	return err
}

// backoffPolicy spaces attempts exponentially with ±20% jitter, so many
// intents failing together do not retry together.
type backoffPolicy struct{ base, max time.Duration }

func (p *backoffPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	delay := p.base
	for i := 1; i < job.Attempt && delay < p.max; i++ {
		delay *= 2
	}
	delay = min(delay, p.max)
	jittered := time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64()))
	return time.Now().Add(jittered)
}
