package cli

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/migrations"
)

func runDispatcher(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("run", "run [flags]", `
Runs the dispatcher: River workers that perform every recorded intent once,
passing the intent's idempotency key to providers that accept one (Stripe)
and committing a write-ahead attempt before calling those that do not
(SendGrid). Ambiguous attempts are reconciled or held in_doubt, never
blindly repeated. Several 'outboxd run' processes may share one database.

Credentials come from the environment, never from flags:
  STRIPE_API_KEY   or STRIPE_API_KEY_FILE    (for --providers stripe)
  SENDGRID_API_KEY or SENDGRID_API_KEY_FILE  (for --providers sendgrid)

Stops gracefully on SIGINT or SIGTERM: no new attempts start, attempts in
flight record their outcome, for at most --shutdown-grace.`, env)
	var dbURL string
	registerDatabaseFlag(fs, env, &dbURL)
	var pf providerFlags
	pf.register(fs, env, true)
	workers := fs.Int("workers", dispatcher.DefaultMaxWorkers, "intents worked at once by this process")
	maxAttempts := fs.Int("max-attempts", dispatcher.DefaultMaxAttempts, "attempts per intent before it fails")
	callTimeout := fs.Duration("call-timeout", dispatcher.DefaultCallTimeout, "timeout of one call to a provider")
	retryBackoff := fs.Duration("retry-backoff", dispatcher.DefaultRetryBackoff, "delay before the second attempt; doubles each attempt, with jitter")
	retryBackoffMax := fs.Duration("retry-backoff-max", dispatcher.DefaultRetryBackoffMax, "longest delay between attempts")
	sweepInterval := fs.Duration("sweep-interval", dispatcher.DefaultSweepInterval, "how often the leader re-enqueues stranded intents")
	rescueAfter := fs.Duration("rescue-after", 0, "how long a job may run before it is presumed dead (a killed dispatcher) and rescued; default 2×call-timeout+65s")
	fetchCooldown := fs.Duration("fetch-cooldown", 0, "shortest pause between job fetches (River's FetchCooldown); lower means lower latency and more queries; 0 keeps River's 100ms")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "how long shutdown waits for attempts in flight")
	var logs logFlags
	logs.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{"call-timeout": *callTimeout, "retry-backoff": *retryBackoff, "retry-backoff-max": *retryBackoffMax, "sweep-interval": *sweepInterval, "shutdown-grace": *grace} {
		if d <= 0 {
			return usageErrorf("--%s must be positive, got %s", name, d)
		}
	}
	if *rescueAfter < 0 || *fetchCooldown < 0 {
		return usageErrorf("--rescue-after and --fetch-cooldown must not be negative")
	}
	if *workers < 1 || *workers > 10000 {
		return usageErrorf("--workers must be between 1 and 10000, got %d", *workers)
	}
	if *maxAttempts < 1 || *maxAttempts > 90 {
		return usageErrorf("--max-attempts must be between 1 and 90, got %d", *maxAttempts)
	}
	logger, err := logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	registry, err := pf.registry(env, true, nil)
	if err != nil {
		return err
	}

	cfg := &dispatcher.Config{
		Providers:            registry,
		MaxWorkers:           *workers,
		MaxAttempts:          *maxAttempts,
		CallTimeout:          *callTimeout,
		RetryBackoff:         *retryBackoff,
		RetryBackoffMax:      *retryBackoffMax,
		SweepInterval:        *sweepInterval,
		RescueStuckJobsAfter: *rescueAfter,
		FetchCooldown:        *fetchCooldown,
		Logger:               logger,
	}
	if err := cfg.Validate(); err != nil {
		return usageErrorf("%v", err)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pool, err := openPool(ctx, dbURL, int32(*workers+10))
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.New(pool, logger).Check(ctx); err != nil {
		return err
	}
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	names := []string{}
	for _, p := range registry.Providers() {
		names = append(names, p.Name())
	}
	logger.InfoContext(ctx, "dispatcher started", "providers", names, "workers", *workers, "max_attempts", *maxAttempts)
	<-ctx.Done()
	logger.Info("shutting down: waiting for attempts in flight", "grace", *grace)
	stopCtx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("shutdown grace of %s passed with attempts still in flight; they were cancelled", *grace)
		}
		return err
	}
	logger.Info("dispatcher stopped")
	return nil
}
