// Package chaos is the multi-process chaos suite: it proves exactly-once
// under fire, with real processes and real failures, and judges the result
// by the providers' own records.
//
// Run starts the Stripe and SendGrid doubles in a process of their own
// ('outboxd chaos --serve-doubles', faults on: lost responses, 500s before
// and after acting, 429s, delays longer than the call timeout; 503 storms
// at Stripe long enough to spend an intent's attempt budget; SendGrid over
// TLS and HTTP/2, resetting some streams after accepting the email) and
// several 'outboxd run' dispatchers against one database. Before the run
// the Stripe double already holds another deployment's PaymentIntents,
// identical to the run's payments but for their namespace. While an
// at-least-once driver delivers messages (sequential and concurrent
// duplicates, consumers that die after commit; ids with ':', '%' and '~',
// ids and a consumer name at the package's length limits) that each record
// a payment and an email through intents.Client.Consume, it SIGKILLs a
// random dispatcher every few hundred milliseconds and starts a new one,
// terminates random PostgreSQL backends of the database, and has an
// operator cancel, resend and resolve random intents. Then it stops the
// chaos, lets the dispatchers drain (in_doubt look-ups included), and
// checks:
//
//   - every Stripe intent produced at most one PaymentIntent at the double,
//     and every succeeded one exactly one, its own, never the other
//     deployment's; every email intent at most one accepted email, every
//     succeeded one exactly one;
//   - every intent is succeeded or in_doubt, or failed without any attempt
//     that may have acted and without an effect (a spent budget), or left
//     by the operator: cancelled or resolved failed without an effect,
//     resolved succeeded with exactly one; none pending or dispatching;
//   - every in_doubt intent was really ambiguous: it has an ambiguous
//     attempt, and independent evidence explains it (see Report.InDoubtWhy);
//   - every processed marker has its two intents and one business row, and
//     every intent recorded by a consumer has its marker.
package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// Defaults for Config.
const (
	DefaultDuration         = 30 * time.Second
	DefaultRate             = 8.0
	DefaultDispatchers      = 3
	DefaultConsumers        = 6
	DefaultWorkers          = 6
	DefaultKillEvery        = 500 * time.Millisecond
	DefaultBackendKillEvery = 700 * time.Millisecond
	DefaultBackendKillShare = 0.2
	DefaultFaultRate        = 0.2
	DefaultCallTimeout      = 2 * time.Second
	DefaultMaxAttempts      = 5
	DefaultDrainTimeout     = 3 * time.Minute
	DefaultStorms           = 2
	DefaultStormLength      = 6 * time.Second
	DefaultOperatorEvery    = 300 * time.Millisecond
)

// maxDefaultForeign bounds Config.ForeignObjects' default.
const maxDefaultForeign = 500

// ForeignNamespace is the namespace of the other deployment whose
// PaymentIntents the Stripe double holds before the run.
const ForeignNamespace = "otherdeployment0"

// The fleet's look-ups of in_doubt intents: soon and often enough to happen
// within the drain (1s, 2s, 4s after the verdict), then the intent waits
// for an operator.
const (
	fleetRecheckDelay    = time.Second
	fleetMaxRechecks     = 3
	fleetRecheckInterval = time.Second
)

// absenceSettleTime is the fleet's --absence-settle-time: longer than any
// request the doubles may still hold (DelayFor), twice over.
func absenceSettleTime(callTimeout time.Duration) time.Duration {
	return 2*DelayFor(callTimeout) + 2*time.Second
}

// Config configures a Run.
type Config struct {
	// Binary is the outboxd executable to run as the dispatchers and the
	// doubles' process. Required.
	Binary string
	// DatabaseURL is a migrated database the run may own: the suite adds a
	// table, and terminates connections to it at random. Required.
	DatabaseURL string
	// Duration is how long the chaos lasts: messages are delivered, and
	// dispatchers and backends killed, during it; then the run drains.
	// Defaults to DefaultDuration.
	Duration time.Duration
	// Rate is how many messages per second are delivered during Duration.
	// Defaults to DefaultRate.
	Rate float64
	// Messages overrides Rate × Duration as the number of messages.
	Messages int
	// Dispatchers is how many 'outboxd run' processes run at once.
	// Defaults to DefaultDispatchers.
	Dispatchers int
	// Consumers is how many goroutines consume deliveries. Defaults to
	// DefaultConsumers.
	Consumers int
	// Workers is each dispatcher's --workers. Defaults to DefaultWorkers.
	Workers int
	// KillEvery is the mean time between two SIGKILLs of a random
	// dispatcher (each drawn uniformly from half to one and a half times
	// it). Defaults to DefaultKillEvery.
	KillEvery time.Duration
	// BackendKillEvery is the mean time between two rounds of backend
	// terminations; each round terminates every client backend of the
	// database with probability BackendKillShare. Defaults to
	// DefaultBackendKillEvery and DefaultBackendKillShare.
	BackendKillEvery time.Duration
	BackendKillShare float64
	// FaultRate is the share of payments and emails the doubles fail, split
	// by the Share constants. Defaults to DefaultFaultRate; negative means none.
	FaultRate float64
	// CallTimeout is the dispatchers' --call-timeout; delay faults hold
	// responses one second longer, and --rescue-after is twice it plus six
	// seconds. Defaults to DefaultCallTimeout.
	CallTimeout time.Duration
	// MaxAttempts is the dispatchers' --max-attempts. Defaults to
	// DefaultMaxAttempts, low enough for a 503 storm to exhaust it.
	MaxAttempts int
	// ForeignObjects is how many PaymentIntents of another deployment
	// (ForeignNamespace) the Stripe double holds before the run (see
	// createForeign): intent ids 1 to ForeignObjects, each with the
	// message id, amount, customer and outbox_key of one of the run's
	// payments. Defaults to twice Messages plus ten, so that every intent
	// of the run meets one with its id, but at most 500 (a Stripe listing
	// that proves absence reads them too); negative means none.
	ForeignObjects int
	// Storms is how many times during the chaos the Stripe double answers
	// every payment with a 503 for StormLength, at random times. Defaults
	// to DefaultStorms and DefaultStormLength; negative means none.
	Storms      int
	StormLength time.Duration
	// OperatorEvery is the mean time between two operator actions (cancel,
	// resend, resolve) on random intents during the chaos. Defaults to
	// DefaultOperatorEvery; negative means none.
	OperatorEvery time.Duration
	// DrainTimeout bounds the drain after the chaos. Defaults to
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Seed makes the run's choices repeatable (the processes' timing does
	// not repeat). Zero picks one from the clock; the report says which.
	Seed uint64
	// LogDir, when set, receives each process's output
	// (dispatcher-N.log, doubles.log).
	LogDir string
	// Progress receives a progress line every two seconds; nil for none.
	Progress io.Writer
	// Logger receives the suite's own warnings. Defaults to discarding.
	Logger *slog.Logger
}

// ErrViolated is returned (wrapped) by Run when the report lists problems:
// a duplicate effect, a lost intent, an unexplained in_doubt, or a broken
// consumer transaction.
var ErrViolated = errors.New("chaos: exactly-once violated")

// DelayFor is how long the doubles hold a delayed response for a call
// timeout: one second longer, so the call times out.
func DelayFor(callTimeout time.Duration) time.Duration { return callTimeout + time.Second }

// rescueAfter is --rescue-after for a call timeout: above River's minimum of
// twice the call timeout plus five seconds.
func rescueAfter(callTimeout time.Duration) time.Duration { return 2*callTimeout + 6*time.Second }

// withDefaults returns c with its defaults set, or an error naming a field
// out of its bounds.
func (c Config) withDefaults() (Config, error) {
	if c.Binary == "" {
		return c, errors.New("chaos: Config.Binary is required")
	}
	if c.DatabaseURL == "" {
		return c, errors.New("chaos: Config.DatabaseURL is required")
	}
	for _, set := range []func() error{c.defaultSchedule, c.defaultLoad, c.defaultFleet, c.defaultShares} {
		if err := set(); err != nil {
			return c, err
		}
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// defaultSchedule sets when things happen: the storms, the operator, the
// chaos's length, the kills, the call timeout and the drain.
func (c *Config) defaultSchedule() error {
	switch {
	case c.Storms == 0:
		c.Storms = DefaultStorms
	case c.Storms < 0:
		c.Storms = 0
	}
	switch {
	case c.OperatorEvery == 0:
		c.OperatorEvery = DefaultOperatorEvery
	case c.OperatorEvery < 0:
		c.OperatorEvery = 0
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"StormLength", &c.StormLength, DefaultStormLength},
		{"Duration", &c.Duration, DefaultDuration},
		{"KillEvery", &c.KillEvery, DefaultKillEvery},
		{"BackendKillEvery", &c.BackendKillEvery, DefaultBackendKillEvery},
		{"CallTimeout", &c.CallTimeout, DefaultCallTimeout},
		{"DrainTimeout", &c.DrainTimeout, DefaultDrainTimeout},
	} {
		if *d.v < 0 {
			return fmt.Errorf("chaos: Config.%s must not be negative, got %s", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return nil
}

// defaultLoad sets how many messages are delivered, and how many objects of
// another deployment wait for them; it needs the Duration set.
func (c *Config) defaultLoad() error {
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Rate < 0 {
		return fmt.Errorf("chaos: Config.Rate must be positive, got %g", c.Rate)
	}
	if c.Messages == 0 {
		c.Messages = max(1, int(c.Rate*c.Duration.Seconds()))
	}
	if c.Messages < 1 || c.Messages > 1_000_000 {
		return fmt.Errorf("chaos: Config.Messages must be between 1 and 1000000, got %d", c.Messages)
	}
	switch {
	case c.ForeignObjects == 0:
		c.ForeignObjects = min(2*c.Messages+10, maxDefaultForeign)
	case c.ForeignObjects < 0:
		c.ForeignObjects = 0
	case c.ForeignObjects > 2_000_000:
		return fmt.Errorf("chaos: Config.ForeignObjects must be at most 2000000, got %d", c.ForeignObjects)
	}
	return nil
}

// defaultFleet sets the sizes of the processes and goroutines.
func (c *Config) defaultFleet() error {
	for _, n := range []struct {
		name     string
		v        *int
		def, max int
	}{
		{"Dispatchers", &c.Dispatchers, DefaultDispatchers, 16},
		{"Consumers", &c.Consumers, DefaultConsumers, 64},
		{"Workers", &c.Workers, DefaultWorkers, 100},
		{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts, 90},
	} {
		if *n.v == 0 {
			*n.v = n.def
		}
		if *n.v < 1 || *n.v > n.max {
			return fmt.Errorf("chaos: Config.%s must be between 1 and %d, got %d", n.name, n.max, *n.v)
		}
	}
	return nil
}

// defaultShares sets the shares of backends terminated and of calls
// faulted.
func (c *Config) defaultShares() error {
	if c.BackendKillShare == 0 {
		c.BackendKillShare = DefaultBackendKillShare
	}
	if c.BackendKillShare < 0 || c.BackendKillShare > 1 {
		return fmt.Errorf("chaos: Config.BackendKillShare must be between 0 and 1, got %g", c.BackendKillShare)
	}
	switch {
	case c.FaultRate == 0:
		c.FaultRate = DefaultFaultRate
	case c.FaultRate < 0:
		c.FaultRate = 0
	case c.FaultRate > 1:
		return fmt.Errorf("chaos: Config.FaultRate must be at most 1, got %g", c.FaultRate)
	}
	return nil
}

// Run runs the suite and returns its report. The error wraps ErrViolated
// when the report has problems; any other error means the run itself could
// not be carried out (and the report, if not nil, is partial).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	rep := &Report{Seed: cfg.Seed, Dispatchers: cfg.Dispatchers, Messages: cfg.Messages, CallTimeout: cfg.CallTimeout.String()}
	pool, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()

	env := childEnv()
	doubles, err := startDoubles(ctx, cfg, env)
	if err != nil {
		return nil, err
	}
	defer doubles.stop()
	fmt.Fprintf(cfg.Progress, "doubles: Stripe %s, SendGrid %s (fault rate %g, seed %d)\n", doubles.addrs.StripeURL, doubles.addrs.SendGridURL, cfg.FaultRate, cfg.Seed)
	registry, err := sandbox.NewRegistry(doubles.addrs.StripeURL, doubles.addrs.SendGridURL)
	if err != nil {
		return nil, err
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		return nil, err
	}
	drv := newDriver(client, cfg.Messages, rand.New(rand.NewPCG(cfg.Seed, 1)))

	// Another deployment's PaymentIntents, then the faults.
	if rep.ForeignObjects, err = createForeign(ctx, pool, doubles.addrs, drv.msgs, cfg.ForeignObjects); err != nil {
		return nil, err
	}
	if err := postControl(ctx, doubles.addrs.StripeURL+StartPath); err != nil {
		return nil, err
	}
	fl, stopFleet, err := startFleet(cfg, env, doubles.addrs)
	if err != nil {
		return nil, err
	}
	defer stopFleet()
	op, err := newOperator(pool, registry, doubles.addrs, cfg.CallTimeout, cfg.Logger)
	if err != nil {
		return nil, err
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	drv.run(runCtx, float64(cfg.Messages)/cfg.Duration.Seconds(), cfg.Consumers, cfg.Seed)

	backend, err := unleash(ctx, cfg, started, doubles.addrs, fl, op, drv)
	if err != nil {
		return nil, err
	}
	rep.ChaosSeconds = time.Since(started).Seconds()
	fmt.Fprintf(cfg.Progress, "chaos over after %s; draining with %d dispatchers, no more kills\n", time.Since(started).Round(time.Second), fl.running())

	drainStart := time.Now()
	drainErr := drain(ctx, cfg, pool, drv, fl, rep)
	rep.DrainSeconds = time.Since(drainStart).Seconds()
	if drainErr != nil {
		drainErr = fmt.Errorf("%w\n%s", drainErr, fl.outputs())
	}
	cancelRun()
	fl.stop(fleetGrace)
	st := fl.stats()
	countRun(rep, cfg, st, backend, drv, op)
	if drainErr != nil {
		rep.TotalSeconds = time.Since(started).Seconds()
		return rep, drainErr
	}
	return rep, judge(ctx, cfg, pool, doubles.addrs, st, backend, started, rep)
}

// connect opens the suite's own pool on the database (its consumers and the
// operator) and adds the business table.
func connect(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("chaos: Config.DatabaseURL: %w", err)
	}
	poolCfg.MaxConns = int32(cfg.Consumers + 3)
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("chaos: connect: %w", err)
	}
	if _, err := pool.Exec(ctx, createOrdersSQL); err != nil {
		pool.Close()
		return nil, fmt.Errorf("chaos: create chaos_orders: %w", err)
	}
	return pool, nil
}

// fleetGrace is every dispatcher's --shutdown-grace.
const fleetGrace = 5 * time.Second

// startFleet starts the dispatchers against the doubles at a. stop stops
// them and removes the certificate file they trust.
func startFleet(cfg Config, env []string, a DoublesAddrs) (fl *fleet, stop func(), err error) {
	// The dispatchers trust the SendGrid double's certificate, and nothing
	// else: they call no other TLS server.
	certFile, err := writeCert(a.SendGridCertPEM)
	if err != nil {
		return nil, nil, err
	}
	runEnv := append(env, "SSL_CERT_FILE="+certFile, "SSL_CERT_DIR=",
		"DATABASE_URL="+cfg.DatabaseURL,
		"STRIPE_API_KEY="+stripedouble.DefaultAPIKey, "STRIPE_API_BASE="+a.StripeURL,
		"SENDGRID_API_KEY="+sendgriddouble.DefaultAPIKey, "SENDGRID_API_BASE="+a.SendGridURL,
	)
	fl = newFleet(cfg.Binary, dispatcherArgs(cfg, fleetGrace), runEnv, cfg.Dispatchers, cfg.LogDir, cfg.Logger)
	stop = func() {
		fl.stop(fleetGrace)
		os.Remove(certFile)
	}
	if err := fl.startAll(); err != nil {
		stop()
		return nil, nil, err
	}
	return fl, stop, nil
}

// unleash is the chaos, for cfg.Duration: 503 storms, operator actions,
// dispatchers SIGKILLed and backends terminated, each drawing from a seed
// of its own, with a progress line every two seconds. It returns the
// backend killer, whose records the verdict reads.
func unleash(ctx context.Context, cfg Config, started time.Time, a DoublesAddrs, fl *fleet, op *operator, drv *driver) (*backendKiller, error) {
	chaosCtx, stopChaos := context.WithTimeout(ctx, cfg.Duration)
	defer stopChaos()
	var chaosWG sync.WaitGroup
	var killErr error
	backend := &backendKiller{}
	chaosWG.Add(4)
	go func() {
		defer chaosWG.Done()
		storms(chaosCtx, a, cfg.Storms, cfg.StormLength, cfg.Duration, rand.New(rand.NewPCG(cfg.Seed, 4)), cfg.Logger)
	}()
	go func() {
		defer chaosWG.Done()
		op.run(chaosCtx, cfg.OperatorEvery, rand.New(rand.NewPCG(cfg.Seed, 5)))
	}()
	go func() {
		defer chaosWG.Done()
		killErr = killDispatchers(chaosCtx, fl, cfg.KillEvery, rand.New(rand.NewPCG(cfg.Seed, 2)))
	}()
	go func() {
		defer chaosWG.Done()
		backend.run(chaosCtx, cfg.DatabaseURL, cfg.BackendKillEvery, cfg.BackendKillShare, rand.New(rand.NewPCG(cfg.Seed, 3)), cfg.Logger)
	}()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-chaosCtx.Done():
				return
			case <-t.C:
				st := fl.stats()
				fmt.Fprintf(cfg.Progress, "  chaos %5.1fs: deliveries %5d, acked %5d | dispatcher kills %4d, backend kills %4d\n",
					time.Since(started).Seconds(), drv.delivered.Load(), drv.acked.Load(), len(st.kills), backend.terminated())
			}
		}
	}()
	<-chaosCtx.Done()
	chaosWG.Wait()
	<-progressDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return backend, killErr
}

// countRun fills the report's counts of what the run did: the fleet's
// starts and kills, the backends terminated, the driver's deliveries and
// the operator's actions.
func countRun(rep *Report, cfg Config, st fleetStats, backend *backendKiller, drv *driver, op *operator) {
	rep.DispatcherStarts = st.starts
	rep.DispatcherKills = len(st.kills)
	rep.UnexpectedExits = len(st.unexpected)
	rep.BackendKillRounds, rep.BackendsTerminated = backend.rounds(), backend.terminated()
	rep.Deliveries = int(drv.delivered.Load())
	rep.DuplicatesDelivered = rep.Deliveries - cfg.Messages
	rep.ConcurrentDuplicates = int(drv.concurrentDups.Load())
	rep.SequentialDuplicates = int(drv.sequentialDups.Load())
	rep.CrashRedeliveries = int(drv.crashes.Load())
	rep.Nacks = int(drv.nacked.Load())
	rep.DuplicatesAbsorbed = int(drv.absorbed.Load())
	rep.OperatorActions, rep.OperatorErrors = op.counts(), op.errors()
	for _, m := range drv.msgs {
		if strings.ContainsAny(m.id, ":%~") {
			rep.HostileIDs++
		}
		if len(m.id) == intents.MaxMessageIDLength {
			rep.MaxLengthIDs++
		}
		if m.consumer == LongConsumerName {
			rep.LongConsumerMessages++
		}
	}
}

// judge reads the doubles' records and the chaos log, and judges the
// drained run by them. The error wraps ErrViolated when the report has
// problems.
func judge(ctx context.Context, cfg Config, pool *pgxpool.Pool, a DoublesAddrs, st fleetStats, backend *backendKiller, started time.Time, rep *Report) error {
	ev, err := collect(ctx, a, append(st.kills, st.exits...), backend.times())
	if err != nil {
		return err
	}
	if err := verify(ctx, cfg, pool, ev, rep); err != nil {
		return err
	}
	for _, u := range st.unexpected {
		cfg.Logger.Warn(u)
	}
	rep.TotalSeconds = time.Since(started).Seconds()
	if !rep.OK() {
		return fmt.Errorf("%w: %s", ErrViolated, strings.Join(rep.Problems, "; "))
	}
	return nil
}

// dispatcherArgs are the flags of every 'outboxd run'.
func dispatcherArgs(cfg Config, grace time.Duration) []string {
	return []string{"run",
		"--providers", "stripe,sendgrid",
		"--admin-addr", "",
		"--workers", strconv.Itoa(cfg.Workers),
		"--max-attempts", strconv.Itoa(cfg.MaxAttempts),
		"--call-timeout", cfg.CallTimeout.String(),
		"--rescue-after", rescueAfter(cfg.CallTimeout).String(),
		"--retry-backoff", "50ms",
		"--retry-backoff-max", "1s",
		"--fetch-cooldown", "20ms",
		"--sweep-interval", "5s",
		"--recheck-delay", fleetRecheckDelay.String(),
		"--max-rechecks", strconv.Itoa(fleetMaxRechecks),
		"--recheck-interval", fleetRecheckInterval.String(),
		"--absence-settle-time", absenceSettleTime(cfg.CallTimeout).String(),
		"--shutdown-grace", grace.String(),
		"--log-format", "json",
	}
}

// childEnv is this process's environment without OUTBOXD_ settings, so the
// children run with exactly the flags the suite gives them, and without
// SSL_CERT_ settings, which the suite sets for the dispatchers.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOXD_") && !strings.HasPrefix(kv, "SSL_CERT_") {
			env = append(env, kv)
		}
	}
	return env
}

// killDispatchers SIGKILLs a random dispatcher (and starts a new one) at
// random intervals around every, until ctx ends.
func killDispatchers(ctx context.Context, fl *fleet, every time.Duration, rnd *rand.Rand) error {
	for {
		wait := every/2 + time.Duration(rnd.Int64N(int64(every)+1))
		if !sleepUntil(ctx, time.Now().Add(wait)) {
			return nil
		}
		if _, err := fl.killRandom(rnd); err != nil {
			return err
		}
	}
}

// drain waits, with no more chaos, until the driver has every delivery
// acknowledged and no intent is pending or dispatching. River's rescuer
// takes back the jobs of killed dispatchers once they are older than
// --rescue-after, but it runs only every 30 seconds, on the leader, which
// itself may have been killed with 15 seconds left on its lease; when
// rescuable jobs wait longer than a few seconds, drain restarts the
// dispatchers gracefully (a graceful stop resigns the leadership, and a new
// leader's rescuer runs at once).
func drain(ctx context.Context, cfg Config, pool *pgxpool.Pool, drv *driver, fl *fleet, rep *Report) error {
	start := time.Now()
	deadline := start.Add(cfg.DrainTimeout)
	rescue := rescueAfter(cfg.CallTimeout)
	var lastRestart time.Time
	var rescuableSince time.Time
	lastProgress := time.Time{}
	for {
		var total, open, rescuable int
		err := pool.QueryRow(ctx, openCountsSQL, rescue.Microseconds()).Scan(&total, &open, &rescuable)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// A connection terminated by the chaos: the pool replaces it.
			cfg.Logger.Warn("drain: count open intents", "error", err)
		} else {
			done := drv.finished()
			if done && open == 0 {
				return nil
			}
			if time.Since(lastProgress) >= 2*time.Second {
				lastProgress = time.Now()
				fmt.Fprintf(cfg.Progress, "  drain %5.1fs: acked %5d of %5d deliveries | intents %5d, open %4d, orphaned jobs %d\n",
					time.Since(start).Seconds(), drv.acked.Load(), drv.delivered.Load(), total, open, rescuable)
			}
			switch {
			case rescuable == 0:
				rescuableSince = time.Time{}
			case rescuableSince.IsZero():
				rescuableSince = time.Now()
			case time.Since(rescuableSince) > 3*time.Second && time.Since(lastRestart) > rescue:
				fmt.Fprintf(cfg.Progress, "  %d orphaned jobs wait for River's rescuer: restarting the dispatchers gracefully so a new leader rescues them now\n", rescuable)
				if err := fl.restartAll(5 * time.Second); err != nil {
					return err
				}
				rep.DrainRestarts++
				lastRestart, rescuableSince = time.Now(), time.Time{}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: drain: intents still open or deliveries unacknowledged after %s (acked %d of %d deliveries)",
				cfg.DrainTimeout, drv.acked.Load(), drv.delivered.Load())
		}
		if !sleepUntil(ctx, time.Now().Add(250*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// doublesProcess is the process serving the doubles.
type doublesProcess struct {
	cmd   *exec.Cmd
	done  chan struct{}
	out   *tail
	addrs DoublesAddrs
}

// startDoubles starts 'outboxd chaos --serve-doubles' and reads the
// addresses it prints.
func startDoubles(ctx context.Context, cfg Config, env []string) (*doublesProcess, error) {
	cmd := exec.Command(cfg.Binary, "chaos", "--serve-doubles",
		"--seed", strconv.FormatUint(cfg.Seed, 10),
		"--fault-rate", strconv.FormatFloat(max(cfg.FaultRate, 0), 'g', -1, 64),
		"--call-timeout", cfg.CallTimeout.String(),
		"--hold-faults", "--sendgrid-tls")
	cmd.Env = env
	p := &doublesProcess{cmd: cmd, done: make(chan struct{}), out: newTail(64 << 10)}
	var errOut io.Writer = p.out
	if cfg.LogDir != "" {
		f, err := os.Create(filepath.Join(cfg.LogDir, "doubles.log"))
		if err != nil {
			return nil, fmt.Errorf("chaos: doubles log: %w", err)
		}
		defer f.Close()
		errOut = io.MultiWriter(p.out, f)
	}
	cmd.Stderr = errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: start the doubles: %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case line, ok := <-lines:
		if ok && json.Unmarshal([]byte(line), &p.addrs) == nil && p.addrs.StripeURL != "" && p.addrs.SendGridURL != "" {
			return p, nil
		}
		p.stop()
		return nil, fmt.Errorf("chaos: the doubles' process printed %q instead of its addresses; its output:\n%s", line, p.out.String())
	case <-t.C:
	case <-ctx.Done():
	}
	p.stop()
	return nil, fmt.Errorf("chaos: the doubles' process did not start; its output:\n%s", p.out.String())
}

func (p *doublesProcess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// writeCert writes a PEM certificate to a temporary file and returns its
// name.
func writeCert(certPEM string) (string, error) {
	if certPEM == "" {
		return "", errors.New("chaos: the doubles' process gave no certificate for the SendGrid double")
	}
	f, err := os.CreateTemp("", "chaos-sendgrid-*.pem")
	if err != nil {
		return "", fmt.Errorf("chaos: certificate file: %w", err)
	}
	if _, err := f.WriteString(certPEM); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("chaos: certificate file: %w", err)
	}
	return f.Name(), f.Close()
}

// getJSON fetches url into v.
func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("chaos: GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("chaos: GET %s: %w", url, err)
	}
	return nil
}

// backendKiller terminates random backends of the database.
type backendKiller struct {
	mu     sync.Mutex
	at     []time.Time // when each round that terminated something returned
	count  int
	nRound int
}

func (b *backendKiller) run(ctx context.Context, dbURL string, every time.Duration, share float64, rnd *rand.Rand, logger *slog.Logger) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		wait := every/2 + time.Duration(rnd.Int64N(int64(every)+1))
		if !sleepUntil(ctx, time.Now().Add(wait)) {
			return
		}
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, dbURL)
			if err != nil {
				logger.Warn("backend killer: connect", "error", err)
				continue
			}
			conn = c
		}
		var n int
		if err := conn.QueryRow(ctx, terminateBackendsSQL, share).Scan(&n); err != nil {
			if ctx.Err() == nil {
				logger.Warn("backend killer: terminate", "error", err)
			}
			conn.Close(context.Background())
			conn = nil
			continue
		}
		b.mu.Lock()
		b.nRound++
		if n > 0 {
			b.count += n
			b.at = append(b.at, time.Now())
		}
		b.mu.Unlock()
	}
}

func (b *backendKiller) terminated() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.count
}

func (b *backendKiller) rounds() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nRound
}

func (b *backendKiller) times() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.at...)
}
