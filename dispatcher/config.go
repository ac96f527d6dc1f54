package dispatcher

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/providers"
)

// Defaults for Config.
const (
	DefaultMaxWorkers      = 50
	DefaultMaxAttempts     = 10
	DefaultCallTimeout     = 30 * time.Second
	DefaultRetryBackoff    = time.Second
	DefaultRetryBackoffMax = 10 * time.Minute
	DefaultSweepInterval   = time.Minute
	DefaultSweepGrace      = time.Minute
	DefaultKeyWindowMargin = time.Hour

	// DefaultFetchCooldown is Config.FetchCooldown's default. River's own
	// default, 100ms, caps a queue at MaxWorkers jobs per 100ms (500/s at
	// 50 workers) and adds up to 100ms between a commit and its call.
	DefaultFetchCooldown = 5 * time.Millisecond
	// DefaultWorkersPerFetchLoop sets Config.FetchLoops's default: one
	// fetch loop per this many workers (rounded up).
	DefaultWorkersPerFetchLoop = 25
	// MaxFetchLoops bounds Config.FetchLoops.
	MaxFetchLoops = 16
	// DefaultFetchPollInterval is Config.FetchPollInterval's default,
	// River's: polling is only the fallback when a notification is missed.
	DefaultFetchPollInterval = time.Second
	// DefaultPollOnlyFetchInterval is FetchPollInterval's default with
	// PollOnly, where polling is how an idle queue finds a new intent: it
	// is that intent's added latency, for a claim statement (an index
	// read that finds nothing) every 50ms per fetch loop.
	DefaultPollOnlyFetchInterval = 50 * time.Millisecond

	// DefaultRecheckDelay, doubling up to DefaultMaxRechecks look-ups,
	// covers Stripe search's documented delay of up to an hour in outages.
	DefaultRecheckDelay    = time.Minute
	DefaultMaxRechecks     = 6
	DefaultRecheckInterval = 15 * time.Second
	// DefaultAbsenceSettleTime outlasts any request a provider may still be
	// executing after its caller gave up (Stripe's run well under a minute).
	DefaultAbsenceSettleTime = 5 * time.Minute
	// DefaultSettleRetryFor rides out a primary's failover or restart: an
	// outcome the provider confirmed is sent to the database again for
	// this long before it is given up (the intent is then taken over and
	// reconciled, or held in_doubt).
	DefaultSettleRetryFor = 15 * time.Minute

	DefaultDedupWindow       = 7 * 24 * time.Hour
	DefaultAuditRetention    = 30 * 24 * time.Hour
	DefaultRetentionInterval = time.Hour
	DefaultRetentionBatch    = 1000
)

// Config configures a Dispatcher.
type Config struct {
	// Providers performs the intents. An intent whose provider is not
	// registered waits (its job is snoozed) until a dispatcher that has it
	// picks it up. Required.
	Providers *providers.Registry

	// MaxWorkers is how many intents this dispatcher works at once: those
	// its queue claims and those River's dispatch jobs bring (retries,
	// take-overs) together. Defaults to DefaultMaxWorkers.
	MaxWorkers int

	// MaxAttempts bounds the attempts at one intent; an intent whose last
	// allowed attempt asks for a retry fails. Defaults to DefaultMaxAttempts.
	MaxAttempts int

	// MaxAttemptsByKind overrides MaxAttempts for some intent kinds.
	MaxAttemptsByKind map[string]int

	// CallTimeout bounds one call to a provider. Defaults to
	// DefaultCallTimeout. A call cut short after its request was written is
	// a retry for a provider with a key and ambiguous for one without.
	CallTimeout time.Duration

	// RetryBackoff is the delay before the second attempt; it doubles with
	// every attempt, with ±20% jitter, up to RetryBackoffMax. Defaults to
	// DefaultRetryBackoff and DefaultRetryBackoffMax.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration

	// SweepInterval is how often the leader looks for stranded intents.
	// Defaults to DefaultSweepInterval.
	SweepInterval time.Duration

	// SweepGrace is how old an intent without a live job must be before the
	// sweep re-enqueues it. Defaults to DefaultSweepGrace.
	SweepGrace time.Duration

	// KeyWindowMargin is subtracted from a provider's key window before
	// trusting it, to absorb clock skew between us and the provider.
	// Defaults to DefaultKeyWindowMargin, capped at half the window.
	KeyWindowMargin time.Duration

	// RecheckDelay is how long after an in_doubt verdict whose look-up
	// proved nothing yet (a search not found, a failed look-up, a request
	// that may still be in progress) the provider is asked again; each
	// later look-up waits twice as long, at most MaxRechecks times, then
	// the intent waits for an operator. Defaults to DefaultRecheckDelay and
	// DefaultMaxRechecks; MaxRechecks < 0 means never.
	RecheckDelay time.Duration
	MaxRechecks  int

	// AbsenceSettleTime is how long after the latest attempt a consistent
	// read that finds nothing is taken as proof of absence, when that
	// attempt got no answer saying the provider had finished with the
	// request (a timeout, a lost connection, an edge's 503): before then,
	// the request may still be executing at the provider. Defaults to
	// DefaultAbsenceSettleTime.
	AbsenceSettleTime time.Duration

	// SettleRetryFor bounds how long a settlement, a claim's release or a
	// recorded look-up that meets transient database errors (a lost
	// connection, a failover, a restart) is sent again. A worker waits
	// meanwhile. Defaults to DefaultSettleRetryFor.
	SettleRetryFor time.Duration

	// RecheckInterval is how often the leader looks for in_doubt intents
	// whose look-up is due. Defaults to DefaultRecheckInterval.
	RecheckInterval time.Duration

	// RescueStuckJobsAfter is how long a claim may stay unsettled before
	// its worker is assumed dead (a crash, kill -9) and the intent is
	// taken over: River runs a stuck job again, and the sweep gives a job
	// to a queued claim that old. It must exceed the longest attempt:
	// CallTimeout twice (a call and a reconcile) plus five seconds for the
	// database. Defaults to that plus a minute.
	RescueStuckJobsAfter time.Duration

	// FetchCooldown is the shortest time between two fetches of one fetch
	// loop while batches come back full. A dispatcher claims queued
	// intents (the queue: one statement claims a batch of up to as many
	// as it has free workers) when it is told that intents were queued
	// (LISTEN/NOTIFY: intents.Client notifies when it records, see
	// intents.Config.NotifyCooldown), when workers free up after a full
	// batch, and every FetchPollInterval. It bounds both latency (a new
	// intent may wait up to FetchCooldown for its fetch under load) and the
	// claim statements a busy loop runs (at most one per FetchCooldown).
	// River's fetches of the dispatch jobs (retries, take-overs) are
	// spaced by it too (river.Config.FetchCooldown). Defaults to
	// DefaultFetchCooldown.
	FetchCooldown time.Duration

	// FetchLoops is how many fetch loops claim queued intents, sharing
	// MaxWorkers: while one waits for its claim's answer, another can
	// claim for the workers that freed up meanwhile. Defaults to one loop
	// per DefaultWorkersPerFetchLoop workers; at most MaxWorkers, and at
	// most MaxFetchLoops.
	FetchLoops int

	// FetchPollInterval is how often the dispatcher looks for queued
	// intents and River jobs without being told: the fallback for a missed
	// notification, and the latency of intents queued by something that
	// does not notify. Defaults to DefaultFetchPollInterval, or with
	// PollOnly to DefaultPollOnlyFetchInterval.
	FetchPollInterval time.Duration

	// PollOnly keeps the dispatcher from listening for the queue's
	// notifications: it finds queued intents every FetchPollInterval (and
	// after each full batch) instead. Set it when the pool reaches
	// Postgres through a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction): a LISTEN belongs to a server session,
	// which such a pooler hands to another client after each transaction,
	// so the notifications would go to a stranger or nowhere. Set
	// FetchPollInterval is then the latency of an idle queue (its default
	// becomes DefaultPollOnlyFetchInterval). River's own client polls
	// already.
	PollOnly bool

	// DedupWindow is how long a processed marker is kept: a message
	// redelivered within it is recognised as a duplicate, one redelivered
	// later is handled as new. It must be at least the retry horizon,
	// MaxAttempts (the largest of MaxAttemptsByKind too) × RetryBackoffMax,
	// or New refuses the configuration. Defaults to DefaultDedupWindow.
	DedupWindow time.Duration

	// AuditRetention is how long a terminal intent (succeeded, failed,
	// cancelled) is kept after it finished, with its attempts and events.
	// Pending, dispatching and in_doubt intents are never deleted.
	// Defaults to DefaultAuditRetention.
	AuditRetention time.Duration

	// RetentionInterval is how often the leader prunes markers past
	// DedupWindow and terminal intents past AuditRetention (also once when
	// it is elected). Defaults to DefaultRetentionInterval.
	RetentionInterval time.Duration

	// RetentionBatch is how many rows one pruning statement deletes; a pass
	// repeats it until a batch comes back short, so no transaction holds
	// many locks. Defaults to DefaultRetentionBatch.
	RetentionBatch int

	// Observer, when set, is told about every attempt that has an outcome
	// and every intent that settles; see Observer. Nil means none.
	Observer Observer

	// Now is the clock for every decision that depends on time: key
	// windows, claims, look-ups due. Defaults to time.Now.
	Now func() time.Time

	// Logger receives one line per attempt outcome, and River's own logs.
	// Defaults to slog.Default(); slog.New(slog.DiscardHandler) discards.
	Logger *slog.Logger

	// TracerProvider traces dispatching: every attempt runs in an
	// "outbox.dispatch <kind>" span (intent id, kind, provider, attempt,
	// outcome; never a payload or a key) linked to the span the intent was
	// recorded under, and River's job spans come from otelriver's
	// middleware. Nil uses OpenTelemetry's no-op provider, never the global
	// one, and adds no middleware.
	TracerProvider trace.TracerProvider
}

// Validate reports the first problem with the configuration, as New would,
// without touching a database, so a command can refuse bad settings before
// connecting.
func (c *Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c *Config) jobTimeout() time.Duration { return 2*c.CallTimeout + 5*time.Second }

// workerWait is how long a River dispatch job waits for one of the
// dispatcher's workers before it is snoozed: half the slack between an
// attempt's bound and RescueStuckJobsAfter, so that a job waiting and then
// working is never taken for stuck.
func (c *Config) workerWait() time.Duration { return (c.RescueStuckJobsAfter - c.jobTimeout()) / 2 }

func (c *Config) withDefaults() (*Config, error) {
	if c == nil {
		return nil, errors.New("dispatcher: Config is required (it must name the providers)")
	}
	out := *c
	if out.Providers == nil {
		return nil, errors.New("dispatcher: Config.Providers is required")
	}
	for _, step := range []func() error{
		out.checkProvidersConfigured, out.defaultDurations, out.defaultWorkers, out.defaultAttempts,
		out.defaultRetention, out.checkDedupWindow, out.defaultRescue,
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out, nil
}

// checkProvidersConfigured refuses a provider that cannot perform: it would
// fail every intent of its kinds for good (a registry built for
// recording, without credentials). All of them are named at once.
func (c *Config) checkProvidersConfigured() error {
	var unconfigured []error
	for _, p := range c.Providers.Providers() {
		if pc, ok := p.(providers.Configured); ok {
			if err := pc.CheckConfigured(); err != nil {
				unconfigured = append(unconfigured, err)
			}
		}
	}
	if len(unconfigured) > 0 {
		return fmt.Errorf("dispatcher: Config.Providers cannot perform: %w", errors.Join(unconfigured...))
	}
	return nil
}

func (c *Config) defaultFetchPollInterval() time.Duration {
	if c.PollOnly {
		return DefaultPollOnlyFetchInterval
	}
	return DefaultFetchPollInterval
}

// defaultDurations fills the durations left zero and refuses negative ones
// and those that contradict each other.
func (c *Config) defaultDurations() error {
	durations := []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"CallTimeout", &c.CallTimeout, DefaultCallTimeout},
		{"RetryBackoff", &c.RetryBackoff, DefaultRetryBackoff},
		{"RetryBackoffMax", &c.RetryBackoffMax, DefaultRetryBackoffMax},
		{"SweepInterval", &c.SweepInterval, DefaultSweepInterval},
		{"SweepGrace", &c.SweepGrace, DefaultSweepGrace},
		{"KeyWindowMargin", &c.KeyWindowMargin, DefaultKeyWindowMargin},
		{"DedupWindow", &c.DedupWindow, DefaultDedupWindow},
		{"AuditRetention", &c.AuditRetention, DefaultAuditRetention},
		{"RetentionInterval", &c.RetentionInterval, DefaultRetentionInterval},
		{"FetchCooldown", &c.FetchCooldown, DefaultFetchCooldown},
		{"FetchPollInterval", &c.FetchPollInterval, c.defaultFetchPollInterval()},
		{"RecheckDelay", &c.RecheckDelay, DefaultRecheckDelay},
		{"RecheckInterval", &c.RecheckInterval, DefaultRecheckInterval},
		{"AbsenceSettleTime", &c.AbsenceSettleTime, DefaultAbsenceSettleTime},
		{"SettleRetryFor", &c.SettleRetryFor, DefaultSettleRetryFor},
	}
	for _, d := range durations {
		if *d.value < 0 {
			return fmt.Errorf("dispatcher: Config.%s must not be negative, got %s", d.name, *d.value)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	if c.FetchCooldown < time.Millisecond || c.FetchPollInterval < time.Millisecond {
		return fmt.Errorf("dispatcher: Config.FetchCooldown and Config.FetchPollInterval must be at least 1ms, got %s and %s", c.FetchCooldown, c.FetchPollInterval)
	}
	if c.RetryBackoffMax < c.RetryBackoff {
		return fmt.Errorf("dispatcher: Config.RetryBackoffMax (%s) is less than RetryBackoff (%s)", c.RetryBackoffMax, c.RetryBackoff)
	}
	return nil
}

// defaultWorkers fills and bounds MaxWorkers and FetchLoops.
func (c *Config) defaultWorkers() error {
	if c.MaxWorkers == 0 {
		c.MaxWorkers = DefaultMaxWorkers
	}
	if c.MaxWorkers < 0 || c.MaxWorkers > 10000 {
		return fmt.Errorf("dispatcher: Config.MaxWorkers must be between 1 and 10000, got %d", c.MaxWorkers)
	}
	if c.FetchLoops == 0 {
		c.FetchLoops = min((c.MaxWorkers+DefaultWorkersPerFetchLoop-1)/DefaultWorkersPerFetchLoop, MaxFetchLoops)
	}
	if c.FetchLoops < 0 || c.FetchLoops > min(c.MaxWorkers, MaxFetchLoops) {
		return fmt.Errorf("dispatcher: Config.FetchLoops must be between 1 and %d (and at most MaxWorkers, %d), got %d",
			MaxFetchLoops, c.MaxWorkers, c.FetchLoops)
	}
	return nil
}

// defaultAttempts fills and bounds the attempt budgets and the re-checks.
func (c *Config) defaultAttempts() error {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > maxAttemptsLimit {
		return fmt.Errorf("dispatcher: Config.MaxAttempts must be between 1 and %d, got %d", maxAttemptsLimit, c.MaxAttempts)
	}
	for kind, n := range c.MaxAttemptsByKind {
		if _, err := c.Providers.ForKind(kind); err != nil {
			return fmt.Errorf("dispatcher: Config.MaxAttemptsByKind: %w", err)
		}
		if n < 1 || n > maxAttemptsLimit {
			return fmt.Errorf("dispatcher: Config.MaxAttemptsByKind[%q] must be between 1 and %d, got %d", kind, maxAttemptsLimit, n)
		}
	}
	switch {
	case c.MaxRechecks == 0:
		c.MaxRechecks = DefaultMaxRechecks
	case c.MaxRechecks < 0:
		c.MaxRechecks = 0
	case c.MaxRechecks > 20:
		return fmt.Errorf("dispatcher: Config.MaxRechecks must be at most 20, got %d", c.MaxRechecks)
	}
	return nil
}

func (c *Config) defaultRetention() error {
	if c.RetentionBatch == 0 {
		c.RetentionBatch = DefaultRetentionBatch
	}
	if c.RetentionBatch < 1 || c.RetentionBatch > 100000 {
		return fmt.Errorf("dispatcher: Config.RetentionBatch must be between 1 and 100000, got %d", c.RetentionBatch)
	}
	return nil
}

// defaultRescue: a job is rescued only after its worker must have given up
// (two call timeouts and a settlement's margin), or a rescue could take
// over a call still in flight.
func (c *Config) defaultRescue() error {
	minRescue := c.jobTimeout()
	if c.RescueStuckJobsAfter == 0 {
		c.RescueStuckJobsAfter = minRescue + time.Minute
	}
	if c.RescueStuckJobsAfter <= minRescue {
		return fmt.Errorf("dispatcher: Config.RescueStuckJobsAfter (%s) must exceed twice CallTimeout plus 5s (%s)", c.RescueStuckJobsAfter, minRescue)
	}
	return nil
}

func (c *Config) maxAttemptsFor(kind string) int {
	if n, ok := c.MaxAttemptsByKind[kind]; ok {
		return n
	}
	return c.MaxAttempts
}

// retryHorizon is the longest an intent can keep being retried, by the
// configuration: the most attempts any kind is allowed, each waiting at
// most RetryBackoffMax.
func (c *Config) retryHorizon() (attempts int, horizon time.Duration) {
	attempts = c.MaxAttempts
	for _, n := range c.MaxAttemptsByKind {
		attempts = max(attempts, n)
	}
	return attempts, time.Duration(attempts) * c.RetryBackoffMax
}

// checkDedupWindow refuses a dedup window shorter than the retry horizon.
func (c *Config) checkDedupWindow() error {
	attempts, horizon := c.retryHorizon()
	if c.DedupWindow >= horizon {
		return nil
	}
	return fmt.Errorf("dispatcher: Config.DedupWindow (%s) is shorter than the retry horizon (%d attempts × %s = %s): a duplicate arriving after its marker is pruned would run again",
		shortDuration(c.DedupWindow), attempts, shortDuration(c.RetryBackoffMax), shortDuration(horizon))
}

// shortDuration formats d without zero trailing units: 1h, 10m, 1h40m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
