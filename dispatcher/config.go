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

	// MaxWorkers is how many intents are worked at once by this process.
	// Defaults to DefaultMaxWorkers.
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

	// RescueStuckJobsAfter is how long a job may stay running before River
	// assumes its worker died (a crash, kill -9) and runs it again. It must
	// exceed the longest job: CallTimeout twice (a call and a reconcile) plus
	// five seconds for the database. Defaults to that plus a minute.
	RescueStuckJobsAfter time.Duration

	// FetchCooldown is the shortest time between two fetches of new jobs
	// (river.Config.FetchCooldown). The dispatcher fetches when it is told
	// of new jobs (River's LISTEN/NOTIFY: intents.Client notifies when it
	// records, see intents.Config.NotifyCooldown), when a worker frees up
	// after a full fetch, and every FetchPollInterval; FetchCooldown spaces
	// those fetches out. It bounds both latency (a new intent may wait up to
	// FetchCooldown for its fetch) and throughput (at most MaxWorkers jobs
	// per fetch, so MaxWorkers per FetchCooldown). Lower costs more fetch
	// queries when busy, none when idle. Defaults to DefaultFetchCooldown.
	FetchCooldown time.Duration

	// FetchLoops is how many fetch loops share MaxWorkers, each a River
	// client on the dispatch queue with its own producer. River keeps one
	// fetch in flight per loop, and a loop whose workers free up while it
	// fetches waits for its next turn: against a slow provider one loop
	// leaves workers idle that several loops keep busy. Each loop keeps a
	// connection to Postgres of its own for notifications (LISTEN), taken
	// from the pool and then held outside it. Defaults
	// to one loop per DefaultWorkersPerFetchLoop workers; at most
	// MaxWorkers, and at most MaxFetchLoops.
	FetchLoops int

	// FetchPollInterval is how often the dispatcher looks for jobs without
	// being told (river.Config.FetchPollInterval): the fallback for a missed
	// notification, and the latency of jobs inserted by something that does
	// not notify. Defaults to DefaultFetchPollInterval.
	FetchPollInterval time.Duration

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

	// Logger receives one line per attempt outcome. Defaults to discarding.
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

func (c *Config) withDefaults() (*Config, error) {
	if c == nil {
		return nil, errors.New("dispatcher: Config is required (it must name the providers)")
	}
	out := *c
	if out.Providers == nil {
		return nil, errors.New("dispatcher: Config.Providers is required")
	}
	// A provider that cannot perform would fail every intent of its kinds
	// for good (a registry built for recording, without credentials):
	// refused here, all of them named at once.
	var unconfigured []error
	for _, p := range out.Providers.Providers() {
		if c, ok := p.(providers.Configured); ok {
			if err := c.CheckConfigured(); err != nil {
				unconfigured = append(unconfigured, err)
			}
		}
	}
	if len(unconfigured) > 0 {
		return nil, fmt.Errorf("dispatcher: Config.Providers cannot perform: %w", errors.Join(unconfigured...))
	}
	durations := []struct {
		name  string
		value *time.Duration
		def   time.Duration
	}{
		{"CallTimeout", &out.CallTimeout, DefaultCallTimeout},
		{"RetryBackoff", &out.RetryBackoff, DefaultRetryBackoff},
		{"RetryBackoffMax", &out.RetryBackoffMax, DefaultRetryBackoffMax},
		{"SweepInterval", &out.SweepInterval, DefaultSweepInterval},
		{"SweepGrace", &out.SweepGrace, DefaultSweepGrace},
		{"KeyWindowMargin", &out.KeyWindowMargin, DefaultKeyWindowMargin},
		{"DedupWindow", &out.DedupWindow, DefaultDedupWindow},
		{"AuditRetention", &out.AuditRetention, DefaultAuditRetention},
		{"RetentionInterval", &out.RetentionInterval, DefaultRetentionInterval},
		{"FetchCooldown", &out.FetchCooldown, DefaultFetchCooldown},
		{"FetchPollInterval", &out.FetchPollInterval, DefaultFetchPollInterval},
		{"RecheckDelay", &out.RecheckDelay, DefaultRecheckDelay},
		{"RecheckInterval", &out.RecheckInterval, DefaultRecheckInterval},
		{"AbsenceSettleTime", &out.AbsenceSettleTime, DefaultAbsenceSettleTime},
		{"SettleRetryFor", &out.SettleRetryFor, DefaultSettleRetryFor},
	}
	for _, d := range durations {
		if *d.value < 0 {
			return nil, fmt.Errorf("dispatcher: Config.%s must not be negative, got %s", d.name, *d.value)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	if out.FetchCooldown < time.Millisecond || out.FetchPollInterval < time.Millisecond {
		return nil, fmt.Errorf("dispatcher: Config.FetchCooldown and Config.FetchPollInterval must be at least 1ms, got %s and %s", out.FetchCooldown, out.FetchPollInterval)
	}
	if out.RetryBackoffMax < out.RetryBackoff {
		return nil, fmt.Errorf("dispatcher: Config.RetryBackoffMax (%s) is less than RetryBackoff (%s)", out.RetryBackoffMax, out.RetryBackoff)
	}
	if out.MaxWorkers == 0 {
		out.MaxWorkers = DefaultMaxWorkers
	}
	if out.MaxWorkers < 0 || out.MaxWorkers > 10000 {
		return nil, fmt.Errorf("dispatcher: Config.MaxWorkers must be between 1 and 10000, got %d", out.MaxWorkers)
	}
	if out.FetchLoops == 0 {
		out.FetchLoops = min((out.MaxWorkers+DefaultWorkersPerFetchLoop-1)/DefaultWorkersPerFetchLoop, MaxFetchLoops)
	}
	if out.FetchLoops < 0 || out.FetchLoops > min(out.MaxWorkers, MaxFetchLoops) {
		return nil, fmt.Errorf("dispatcher: Config.FetchLoops must be between 1 and %d (and at most MaxWorkers, %d), got %d",
			MaxFetchLoops, out.MaxWorkers, out.FetchLoops)
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = DefaultMaxAttempts
	}
	if out.MaxAttempts < 0 || out.MaxAttempts > maxAttemptsLimit {
		return nil, fmt.Errorf("dispatcher: Config.MaxAttempts must be between 1 and %d, got %d", maxAttemptsLimit, out.MaxAttempts)
	}
	for kind, n := range out.MaxAttemptsByKind {
		if _, err := out.Providers.ForKind(kind); err != nil {
			return nil, fmt.Errorf("dispatcher: Config.MaxAttemptsByKind: %w", err)
		}
		if n < 1 || n > maxAttemptsLimit {
			return nil, fmt.Errorf("dispatcher: Config.MaxAttemptsByKind[%q] must be between 1 and %d, got %d", kind, maxAttemptsLimit, n)
		}
	}
	switch {
	case out.MaxRechecks == 0:
		out.MaxRechecks = DefaultMaxRechecks
	case out.MaxRechecks < 0:
		out.MaxRechecks = 0
	case out.MaxRechecks > 20:
		return nil, fmt.Errorf("dispatcher: Config.MaxRechecks must be at most 20, got %d", out.MaxRechecks)
	}
	if out.RetentionBatch == 0 {
		out.RetentionBatch = DefaultRetentionBatch
	}
	if out.RetentionBatch < 1 || out.RetentionBatch > 100000 {
		return nil, fmt.Errorf("dispatcher: Config.RetentionBatch must be between 1 and 100000, got %d", out.RetentionBatch)
	}
	if err := out.checkDedupWindow(); err != nil {
		return nil, err
	}
	minRescue := out.jobTimeout()
	if out.RescueStuckJobsAfter == 0 {
		out.RescueStuckJobsAfter = minRescue + time.Minute
	}
	if out.RescueStuckJobsAfter <= minRescue {
		return nil, fmt.Errorf("dispatcher: Config.RescueStuckJobsAfter (%s) must exceed twice CallTimeout plus 5s (%s)", out.RescueStuckJobsAfter, minRescue)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return &out, nil
}

// loopWorkers shares MaxWorkers among the fetch loops.
func (c *Config) loopWorkers() []int {
	out := make([]int, c.FetchLoops)
	for i := range out {
		out[i] = c.MaxWorkers / c.FetchLoops
		if i < c.MaxWorkers%c.FetchLoops {
			out[i]++
		}
	}
	return out
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
