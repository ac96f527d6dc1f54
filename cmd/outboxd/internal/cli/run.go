package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sethvargo/go-retry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/cmd/outboxd/internal/secret"
	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/dispatcher/metrics"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers"
)

func runDispatcher(ctx context.Context, args []string, env Env) error {
	fs, f := newRunFlags(env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	adminToken, err := loadAdminToken(env, f.adminAddr)
	if err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	logger, err := f.logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	logger = riverInfoAsDebug(logger) // River's routine INFO lines go out at DEBUG
	registry, err := f.providers.registry(ctx, env, true, nil, logger)
	if err != nil {
		return err
	}
	defer f.providers.close()
	tracerProvider, flushTraces, err := startTracing(ctx, env, logger)
	if err != nil {
		return err
	}
	// After the dispatcher stopped: its last spans are flushed too.
	defer flushTraces()
	cfg, err := f.dispatcherConfig(registry, tracerProvider, logger)
	if err != nil {
		return err
	}

	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	pool, err := openPoolWaiting(ctx, f.dbURL, int32(f.workers+10), logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := checkSchema(ctx, pool, logger); err != nil {
		return err
	}
	outboxMetrics := metrics.New(pool)
	cfg.Observer = outboxMetrics
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		return err
	}
	// The admin server listens before anything is dispatched: an address
	// taken (by another outboxd run, whose dashboard an operator would
	// read for this one's) fails the start, with nothing done.
	admin, err := startAdmin(ctx, adminParams{
		addr: f.adminAddr, token: adminToken, tlsTerminated: f.adminTLSTerminated,
		pool: pool, registry: registry, metrics: outboxMetrics, kindHint: f.providers.unknownKindHint,
		maxPayloadBytes: f.maxPayloadBytes,
		// /metrics serves the outbox's metrics, the database gauges, Go
		// and process.
		gatherer: outboxMetrics.Registry(), logger: logger,
		tracerProvider: cfg.TracerProvider,
	})
	if err != nil {
		return err
	}
	return dispatchUntilDone(ctx, d, admin, registry, f, logger)
}

// runFlags are the flags of outboxd run.
type runFlags struct {
	dbURL              databaseURL
	providers          providerFlags
	workers            int
	maxAttempts        int
	callTimeout        time.Duration
	retryBackoff       time.Duration
	retryBackoffMax    time.Duration
	sweepInterval      time.Duration
	rescueAfter        time.Duration
	fetchCooldown      time.Duration
	fetchLoops         int
	fetchPollInterval  time.Duration
	pollOnly           bool
	recheckDelay       time.Duration
	maxRechecks        int
	recheckInterval    time.Duration
	settleRetryFor     time.Duration
	absenceSettleTime  time.Duration
	grace              time.Duration
	dedupWindow        time.Duration
	auditRetention     time.Duration
	maxPayloadBytes    int
	adminAddr          string
	adminTLSTerminated bool
	logs               logFlags
}

// newRunFlags declares outboxd run's flags and its help.
func newRunFlags(env Env) (*flag.FlagSet, *runFlags) {
	f := &runFlags{}
	fs := newFlagSet("run", "run [flags]", `
Runs the dispatcher: River workers that perform every recorded intent once,
passing the intent's idempotency key to providers that accept one (Stripe)
and committing a write-ahead attempt before calling those that do not
(SendGrid). Ambiguous attempts are reconciled or held in_doubt, never
blindly repeated. Several 'outboxd run' processes may share one database.

Credentials come from the environment, never from flags:
  STRIPE_API_KEY   or STRIPE_API_KEY_FILE    (for --providers stripe)
  SENDGRID_API_KEY or SENDGRID_API_KEY_FILE  (for --providers sendgrid)
  AMQP_URL         or AMQP_URL_FILE          (for --providers rabbitmq; it holds a password)
  WEBHOOK_<NAME>_SECRET or ..._FILE          (for each --webhook NAME=URL)
  OUTBOXD_ADMIN_TOKEN or OUTBOXD_ADMIN_TOKEN_FILE
                   (the admin server's bearer token; required when
                    --admin-addr is not a loopback address)

The admin server (--admin-addr, default 127.0.0.1:8080) serves the
dashboard, the JSON API under /api/v1/, /healthz, /readyz, /metrics and
River's UI under /riverui/. The address must be free: if it is taken
(another 'outboxd run' on this host, whose dashboard would be read for
this one's), run stops before dispatching anything; set --admin-addr to
another address, or to empty to run without the admin server.

Stops gracefully on SIGINT or SIGTERM: no new attempts start, attempts in
flight record their outcome, for at most --shutdown-grace; spans not yet
exported are then flushed. A second SIGINT or SIGTERM exits at once.
`+tracingHelp, env)
	registerDatabaseFlag(fs, env, &f.dbURL)
	f.providers.register(fs, env)
	fs.IntVar(&f.workers, "workers", dispatcher.DefaultMaxWorkers, "intents worked at once by this process")
	fs.IntVar(&f.maxAttempts, "max-attempts", dispatcher.DefaultMaxAttempts, "attempts per intent before it fails")
	fs.DurationVar(&f.callTimeout, "call-timeout", dispatcher.DefaultCallTimeout, "timeout of one call to a provider")
	fs.DurationVar(&f.retryBackoff, "retry-backoff", dispatcher.DefaultRetryBackoff, "delay before the second attempt; doubles each attempt, with jitter")
	fs.DurationVar(&f.retryBackoffMax, "retry-backoff-max", dispatcher.DefaultRetryBackoffMax, "longest delay between attempts")
	fs.DurationVar(&f.sweepInterval, "sweep-interval", dispatcher.DefaultSweepInterval, "how often the leader re-enqueues stranded intents")
	fs.DurationVar(&f.rescueAfter, "rescue-after", 0, "how long a job may run before it is presumed dead (a killed dispatcher) and rescued; default 2×call-timeout+65s")
	fs.DurationVar(&f.fetchCooldown, "fetch-cooldown", 0, "shortest pause between job fetches (River's FetchCooldown); lower means lower latency and more queries; 0 keeps the default, "+dispatcher.DefaultFetchCooldown.String())
	fs.IntVar(&f.fetchLoops, "fetch-loops", 0, fmt.Sprintf("fetch loops sharing --workers, each with one job fetch in flight (a slow provider keeps more workers busy with more loops); 0 keeps the default, one per %d workers, at most %d", dispatcher.DefaultWorkersPerFetchLoop, dispatcher.MaxFetchLoops))
	fs.DurationVar(&f.fetchPollInterval, "fetch-poll-interval", 0, "how often queued intents are looked for without a notification; 0 keeps the default, "+dispatcher.DefaultFetchPollInterval.String()+" ("+dispatcher.DefaultPollOnlyFetchInterval.String()+" with --poll-only)")
	fs.BoolVar(&f.pollOnly, "poll-only", false, "find queued intents by polling only, without LISTEN: required behind a pooler in transaction mode (PgBouncer pool_mode = transaction), which gives a session's LISTEN to other clients; see docs/operating.md")
	fs.DurationVar(&f.recheckDelay, "recheck-delay", dispatcher.DefaultRecheckDelay, "how long after an in_doubt verdict whose look-up proved nothing the provider is asked again; each later look-up waits twice as long")
	fs.IntVar(&f.maxRechecks, "max-rechecks", dispatcher.DefaultMaxRechecks, "look-ups of an in_doubt intent before it waits for an operator; negative: never look up again")
	fs.DurationVar(&f.recheckInterval, "recheck-interval", dispatcher.DefaultRecheckInterval, "how often the leader looks for in_doubt intents whose look-up is due")
	fs.DurationVar(&f.settleRetryFor, "settle-retry-for", dispatcher.DefaultSettleRetryFor, "how long an outcome is sent to the database again while it is away (a failover, a restart) before it is given up")
	fs.DurationVar(&f.absenceSettleTime, "absence-settle-time", dispatcher.DefaultAbsenceSettleTime, "how long after an attempt that got no final answer a consistent read that finds nothing proves absence (the request may still be executing at the provider before then)")
	fs.DurationVar(&f.grace, "shutdown-grace", 30*time.Second, "how long shutdown waits for attempts in flight")
	fs.DurationVar(&f.dedupWindow, "dedup-window", dispatcher.DefaultDedupWindow, "how long processed markers are kept: a message redelivered later is handled as new; at least max-attempts × retry-backoff-max")
	fs.DurationVar(&f.auditRetention, "audit-retention", dispatcher.DefaultAuditRetention, "how long succeeded, failed and cancelled intents are kept after they finish, with their attempts and events (in_doubt and unfinished ones are kept until they finish)")
	fs.StringVar(&f.adminAddr, "admin-addr", adminhttp.DefaultAddr, "listen address of the admin server (dashboard, JSON API, /metrics, /healthz, /readyz, /riverui/); empty disables it; an address that is not loopback needs "+adminTokenEnv)
	fs.BoolVar(&f.adminTLSTerminated, "admin-tls-terminated", false, "browsers reach the admin server over HTTPS through a proxy that terminates TLS: mark its session cookie Secure (it always is on a TLS request)")
	registerPayloadFlag(fs, &f.maxPayloadBytes)
	f.logs.register(fs)
	return fs, f
}

// validate refuses flags out of their bounds, before anything starts.
func (f *runFlags) validate() error {
	for name, d := range map[string]time.Duration{"call-timeout": f.callTimeout, "retry-backoff": f.retryBackoff, "retry-backoff-max": f.retryBackoffMax, "sweep-interval": f.sweepInterval, "shutdown-grace": f.grace, "dedup-window": f.dedupWindow, "audit-retention": f.auditRetention} {
		if d <= 0 {
			return usageErrorf("--%s must be positive, got %s", name, d)
		}
	}
	if f.rescueAfter < 0 || f.fetchCooldown < 0 || f.fetchPollInterval < 0 {
		return usageErrorf("--rescue-after, --fetch-cooldown and --fetch-poll-interval must not be negative")
	}
	if f.workers < 1 || f.workers > 10000 {
		return usageErrorf("--workers must be between 1 and 10000, got %d", f.workers)
	}
	if f.fetchLoops < 0 || f.fetchLoops > min(f.workers, dispatcher.MaxFetchLoops) {
		return usageErrorf("--fetch-loops must be between 1 and %d (and at most --workers, %d), or 0 for the default, got %d", dispatcher.MaxFetchLoops, f.workers, f.fetchLoops)
	}
	if f.maxAttempts < 1 || f.maxAttempts > 90 {
		return usageErrorf("--max-attempts must be between 1 and 90, got %d", f.maxAttempts)
	}
	return checkPayloadFlag(f.maxPayloadBytes)
}

// dispatcherConfig is the dispatcher's configuration from the flags,
// validated; tracerProvider is nil when tracing is off.
func (f *runFlags) dispatcherConfig(registry *providers.Registry, tracerProvider *sdktrace.TracerProvider, logger *slog.Logger) (*dispatcher.Config, error) {
	cfg := &dispatcher.Config{
		Providers:            registry,
		MaxWorkers:           f.workers,
		MaxAttempts:          f.maxAttempts,
		CallTimeout:          f.callTimeout,
		RetryBackoff:         f.retryBackoff,
		RetryBackoffMax:      f.retryBackoffMax,
		SweepInterval:        f.sweepInterval,
		RescueStuckJobsAfter: f.rescueAfter,
		FetchCooldown:        f.fetchCooldown,
		FetchLoops:           f.fetchLoops,
		FetchPollInterval:    f.fetchPollInterval,
		PollOnly:             f.pollOnly,
		DedupWindow:          f.dedupWindow,
		AuditRetention:       f.auditRetention,
		RecheckDelay:         f.recheckDelay,
		MaxRechecks:          f.maxRechecks,
		RecheckInterval:      f.recheckInterval,
		AbsenceSettleTime:    f.absenceSettleTime,
		SettleRetryFor:       f.settleRetryFor,
		Logger:               logger,
	}
	// A nil *sdktrace.TracerProvider in the interface field would not be
	// a nil interface: it is set only when tracing is on.
	if tracerProvider != nil {
		cfg.TracerProvider = tracerProvider
	}
	if err := cfg.Validate(); err != nil {
		return nil, usageErrorf("%v", err)
	}
	return cfg, nil
}

// startTracing sets tracing up (see setupTracing) and returns the
// provider, nil when tracing is off, and the function that flushes and
// stops it.
func startTracing(ctx context.Context, env Env, logger *slog.Logger) (*sdktrace.TracerProvider, func(), error) {
	tracerProvider, err := setupTracing(ctx, env)
	if err != nil || tracerProvider == nil {
		return nil, func() {}, err
	}
	logger.InfoContext(ctx, "tracing on: exporting spans over OTLP/HTTP")
	return tracerProvider, func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracerProvider.Shutdown(flushCtx); err != nil {
			logger.Warn("could not flush traces", "error", err)
		}
	}, nil
}

// dispatchUntilDone starts d, dispatches until ctx ends, then stops d and
// the admin server together, within the shutdown grace.
func dispatchUntilDone(ctx context.Context, d *dispatcher.Dispatcher, admin *runningAdmin, registry *providers.Registry, f *runFlags, logger *slog.Logger) error {
	if err := d.Start(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), f.grace)
		defer cancel()
		_ = admin.shutdown(stopCtx)
		return err
	}
	names := []string{}
	for _, p := range registry.Providers() {
		names = append(names, p.Name())
	}
	logger.InfoContext(ctx, "dispatcher started", "providers", names, "workers", f.workers, "max_attempts", f.maxAttempts)
	<-ctx.Done()
	logger.Info("shutting down: waiting for attempts in flight", "grace", f.grace)
	stopCtx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	adminStopped := make(chan error, 1)
	go func() { adminStopped <- admin.shutdown(stopCtx) }()
	dispatcherErr := d.Stop(stopCtx)
	if err := <-adminStopped; err != nil {
		logger.Warn("admin server did not stop cleanly", "error", err)
	}
	if err := dispatcherErr; err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("shutdown grace of %s passed with attempts still in flight; they were cancelled", f.grace)
		}
		return err
	}
	logger.Info("dispatcher stopped")
	return nil
}

// adminTokenEnv is the environment variable `outboxd run` reads the admin
// token from (or from the file named by adminTokenEnv+"_FILE").
const adminTokenEnv = "OUTBOXD_ADMIN_TOKEN"

// loadAdminToken reads the admin server's token from OUTBOXD_ADMIN_TOKEN or
// OUTBOXD_ADMIN_TOKEN_FILE, and refuses, before anything starts, an admin
// address that is not loopback without one.
func loadAdminToken(env Env, addr string) (string, error) {
	if addr == "" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", usageErrorf("--admin-addr %q is not host:port (e.g. 127.0.0.1:8080, or empty to disable)", addr)
	}
	token, err := secret.LoadFrom(env.Getenv, adminTokenEnv)
	switch {
	case errors.Is(err, secret.ErrMissing) && env.Getenv(adminTokenEnv+"_FILE") == "":
		token = ""
	case err != nil:
		return "", fmt.Errorf("refusing to start: %w", err)
	}
	if token == "" && !adminhttp.IsLoopback(addr) {
		return "", usageErrorf("refusing to start: --admin-addr %s is not a loopback address, so the admin server needs a token: set %s, or %s_FILE to a file that holds it (or listen on 127.0.0.1)", addr, adminTokenEnv, adminTokenEnv)
	}
	if token != "" && len(token) < adminhttp.MinTokenLength {
		return "", usageErrorf("refusing to start: %s must be at least %d bytes", adminTokenEnv, adminhttp.MinTokenLength)
	}
	return token, nil
}

type adminParams struct {
	addr     string
	token    string
	pool     *pgxpool.Pool
	registry *providers.Registry
	metrics  adminhttp.RecordObserver
	// kindHint ends the API's error about a kind no enabled provider
	// performs (providerFlags.unknownKindHint).
	kindHint func(kind string) string
	// maxPayloadBytes bounds the payloads the API records.
	maxPayloadBytes int
	gatherer        prometheus.Gatherer
	logger          *slog.Logger
	// tracerProvider traces the ingest API's recording; nil when off.
	tracerProvider trace.TracerProvider

	// tlsTerminated: a proxy terminates TLS in front (Secure cookies).
	tlsTerminated bool
}

// runningAdmin is the admin server, or nil when it is off.
type runningAdmin struct{ srv *adminhttp.Server }

func (a *runningAdmin) shutdown(ctx context.Context) error {
	if a == nil {
		return nil
	}
	return a.srv.Shutdown(ctx)
}

// startAdmin starts the admin server unless p.addr is empty. An address
// that cannot be listened on (the default one included: another outboxd
// run on this host has it) is an error naming --admin-addr.
func startAdmin(ctx context.Context, p adminParams) (*runningAdmin, error) {
	if p.addr == "" {
		p.logger.InfoContext(ctx, "admin server disabled (--admin-addr is empty)")
		return nil, nil
	}
	client, err := intents.NewClient(p.pool, &intents.Config{Providers: p.registry, MaxPayloadBytes: p.maxPayloadBytes, Logger: p.logger, TracerProvider: p.tracerProvider})
	if err != nil {
		return nil, err
	}
	if m := ingest.MaxMessageBytes(p.maxPayloadBytes); m > adminhttp.MaxBodyBytesLimit {
		// A message as large as the payload limit allows is more than the
		// admin server reads into memory at once: say what it refuses.
		p.logger.WarnContext(ctx, "the admin API refuses request bodies over its limit: messages larger than it must be recorded with outboxd record or from Go",
			"api_body_limit", adminhttp.MaxBodyBytesLimit, "message_limit", m)
	}
	store, err := audit.New(p.pool, p.registry)
	if err != nil {
		return nil, err
	}
	srv, err := adminhttp.New(adminhttp.Config{
		Version:         "outboxd " + Version(),
		Addr:            p.addr,
		Token:           p.token,
		TokenSource:     "the " + adminTokenEnv + " environment variable outboxd runs with",
		Audit:           store,
		Intents:         client,
		Observer:        p.metrics,
		UnknownKindHint: p.kindHint,
		MaxBodyBytes:    min(ingest.MaxMessageBytes(p.maxPayloadBytes), adminhttp.MaxBodyBytesLimit),
		Pool:            p.pool,
		Gatherer:        p.gatherer,
		Logger:          p.logger.With("component", "admin"),

		TLSTerminated: p.tlsTerminated,
	})
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("%w: set --admin-addr to another address, or empty to run without the admin server", err)
	}
	return &runningAdmin{srv: srv}, nil
}

// checkSchema refuses a database whose schema is not current, and rides out
// a connection lost while checking (a restarted server, a terminated
// backend) with a few quick retries instead of exiting.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	backoff := retry.WithMaxRetries(5, retry.NewExponential(200*time.Millisecond))
	return retry.Do(ctx, backoff, func(ctx context.Context) error {
		err := migrations.New(pool, logger).Check(ctx)
		if errors.Is(err, migrations.ErrNotMigrated) {
			cfg := pool.Config().ConnConfig
			return fmt.Errorf("database %q on %s:%d: %w", cfg.Database, cfg.Host, cfg.Port, err)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		logger.WarnContext(ctx, "checking the database schema failed; retrying", "error", err)
		return retry.RetryableError(err)
	})
}
