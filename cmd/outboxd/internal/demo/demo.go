// Package demo runs the whole pipeline end to end in a scratch database: a
// simulated at-least-once broker delivers order messages (with sequential
// and concurrent duplicates, and consumers that crash after commit but
// before acknowledging), consumers record a payment, a partial refund for
// some orders and a templated receipt email per order (the refund and the
// receipt ordered after the payment), and the dispatcher performs them against the Stripe and SendGrid
// doubles with faults switched on. The report is built from the doubles' own
// records, and says whether any effect happened twice or any intent was lost.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/testkit/pgadmin"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
)

// Defaults for Config.
const (
	DefaultOrders    = 200
	DefaultConsumers = 8
	DefaultTimeout   = 3 * time.Minute
)

// Config configures a demo run.
type Config struct {
	// ServerURL is the PostgreSQL server; a fresh database is created on it
	// and dropped afterwards. Required.
	ServerURL string
	// Orders is how many distinct order messages the broker delivers.
	// Defaults to DefaultOrders.
	Orders int
	// Consumers is how many consumers take deliveries concurrently.
	// Defaults to DefaultConsumers.
	Consumers int
	// Seed makes the run's duplicates, crashes and faults repeatable.
	Seed uint64
	// Faults switches the doubles' fault injection on. The CLI sets it.
	Faults bool
	// KeepDatabase leaves the scratch database behind for inspection.
	KeepDatabase bool
	// Timeout bounds the whole run. Defaults to DefaultTimeout.
	Timeout time.Duration
	// Progress receives a progress line about twice a second; nil for none.
	Progress io.Writer
	// Logger receives the dispatcher's logs. Defaults to discarding.
	Logger *slog.Logger
}

// Report is what a run found. Counts of effects come from the doubles.
type Report struct {
	Database            string `json:"database"`
	DatabaseKept        bool   `json:"database_kept"`
	Orders              int    `json:"orders"`
	MessagesDelivered   int    `json:"messages_delivered"`
	DuplicatesDelivered int    `json:"duplicates_delivered"`
	DuplicatesAbsorbed  int    `json:"duplicates_absorbed"`
	ConsumerCrashes     int    `json:"consumer_crashes_after_commit"`
	IntentsRecorded     int    `json:"intents_recorded"`
	PaymentsAtStripe    int    `json:"payments_at_stripe_double"`
	RefundsAtStripe     int    `json:"refunds_at_stripe_double"`
	AmountRefunded      int64  `json:"amount_refunded_cents"`
	EmailsAtSendGrid    int    `json:"emails_at_sendgrid_double"`
	ProviderReplays     int    `json:"provider_replays"`
	Reconciled          int    `json:"reconciled"`
	Succeeded           int    `json:"succeeded"`
	InDoubt             int    `json:"in_doubt"`
	// InDoubtByKind counts the in_doubt intents by kind.
	InDoubtByKind map[string]int `json:"in_doubt_by_kind"`
	Failed        int            `json:"failed"`
	// Cancelled counts the refunds and receipts not performed because
	// their order's payment failed; Waiting those still waiting for an
	// in_doubt payment.
	Cancelled        int            `json:"cancelled_after_failed_payment"`
	Waiting          int            `json:"waiting_for_in_doubt_payment"`
	DeclinedCards    int            `json:"declined_cards"`
	Lost             int            `json:"lost"`
	DuplicateEffects int            `json:"duplicate_effects"`
	FaultsInjected   map[string]int `json:"faults_injected"`
	Seconds          float64        `json:"seconds"`
	Problems         []string       `json:"problems,omitempty"`
}

// OK reports whether every effect happened at most once and no intent was
// lost. In-doubt intents are not failures: they are the honest answer to an
// ambiguous attempt at a provider that cannot be asked.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// ErrEffectsWrong is returned (wrapped) by Run when the report found a
// duplicate effect or a lost intent.
var ErrEffectsWrong = errors.New("exactly-once violated")

// Run runs the demo and returns its report. The error wraps ErrEffectsWrong
// when the report has problems; any other error means the run itself failed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	started := time.Now()

	db, err := openScratch(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer db.close(ctx)
	report := &Report{Database: db.name, Orders: cfg.Orders, DatabaseKept: cfg.KeepDatabase}

	dbl, err := startDoubles(cfg)
	if err != nil {
		return nil, err
	}
	defer dbl.Close()
	fmt.Fprintf(cfg.Progress, "Stripe double at %s, SendGrid double at %s (faults %s)\n", dbl.Stripe().URL(), dbl.SendGrid().URL(), onOff(cfg.Faults))

	recorder, err := intents.NewClient(db.pool, &intents.Config{Providers: dbl.Registry(), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	stop, err := startDispatcher(ctx, db.pool, dbl.Registry(), cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer stop()

	b := newBroker(cfg.Orders, cfg.Seed)
	fmt.Fprintf(cfg.Progress, "delivering %d orders through an at-least-once broker to %d consumers\n", cfg.Orders, cfg.Consumers)
	b.run(ctx, cfg.Consumers, recorder, cfg.Seed)
	if err := waitDone(ctx, db.pool, b, cfg.Progress); err != nil {
		return nil, err
	}
	stop() // the doubles' records are read once nothing calls them any more
	b.stats(report)
	if err := fill(ctx, db.pool, dbl, report); err != nil {
		return nil, err
	}
	report.Seconds = time.Since(started).Seconds()
	if !report.OK() {
		return report, fmt.Errorf("%w: %v", ErrEffectsWrong, report.Problems)
	}
	return report, nil
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.ServerURL == "" {
		return cfg, errors.New("demo: ServerURL is required")
	}
	if cfg.Orders == 0 {
		cfg.Orders = DefaultOrders
	}
	if cfg.Orders < 1 || cfg.Orders > 100000 {
		return cfg, fmt.Errorf("demo: orders must be between 1 and 100000, got %d", cfg.Orders)
	}
	if cfg.Consumers == 0 {
		cfg.Consumers = DefaultConsumers
	}
	if cfg.Consumers < 1 || cfg.Consumers > 256 {
		return cfg, fmt.Errorf("demo: consumers must be between 1 and 256, got %d", cfg.Consumers)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	return cfg, nil
}

// scratch is the run's database: created for it, migrated, with the demo's
// orders table, and dropped by close unless Config.KeepDatabase.
type scratch struct {
	name string
	pool *pgxpool.Pool
	cfg  Config
}

func openScratch(ctx context.Context, cfg Config) (*scratch, error) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	db := &scratch{name: fmt.Sprintf("outboxd_demo_%s_%s", time.Now().UTC().Format("20060102_150405"), hex.EncodeToString(suffix)), cfg: cfg}
	fmt.Fprintf(cfg.Progress, "creating scratch database %s\n", db.name)
	if err := pgadmin.CreateDatabase(ctx, cfg.ServerURL, db.name, ""); err != nil {
		return nil, err
	}
	if err := db.connect(ctx); err != nil {
		db.close(ctx)
		return nil, err
	}
	return db, nil
}

func (db *scratch) connect(ctx context.Context) error {
	dbURL, err := pgadmin.WithDatabase(db.cfg.ServerURL, db.name)
	if err != nil {
		return err
	}
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	poolCfg.MaxConns = int32(db.cfg.Consumers + 30)
	if db.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return err
	}
	if _, err := migrations.New(db.pool, db.cfg.Logger).Up(ctx); err != nil {
		return fmt.Errorf("demo: migrate: %w", err)
	}
	_, err = db.pool.Exec(ctx, createOrdersSQL)
	return err
}

func (db *scratch) close(ctx context.Context) {
	if db.pool != nil {
		db.pool.Close()
	}
	if db.cfg.KeepDatabase {
		return
	}
	if err := pgadmin.DropDatabase(context.WithoutCancel(ctx), db.cfg.ServerURL, db.name); err != nil {
		fmt.Fprintf(db.cfg.Progress, "could not drop %s: %v\n", db.name, err)
	}
}

// startDispatcher starts a dispatcher tuned for a short run and returns
// the function that stops it, which may be called more than once.
func startDispatcher(ctx context.Context, pool *pgxpool.Pool, registry *providers.Registry, logger *slog.Logger) (stop func(), err error) {
	d, err := dispatcher.New(pool, &dispatcher.Config{
		Providers:         registry,
		MaxWorkers:        20,
		CallTimeout:       5 * time.Second,
		RetryBackoff:      50 * time.Millisecond,
		RetryBackoffMax:   time.Second,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
		SweepInterval:     5 * time.Second,
		Logger:            logger,
	})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			defer cancel()
			_ = d.Stop(stopCtx)
		})
	}, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// startDoubles starts the sandbox with the demo's faults, when
// Config.Faults: lost responses, 500s after acting and 429s, each double
// drawing from a seed of its own.
func startDoubles(cfg Config) (*sandbox.Sandbox, error) {
	stripeFaults, sendgridFaults := fault.New(cfg.Seed+1), fault.New(cfg.Seed+2)
	if cfg.Faults {
		if err := stripeFaults.SetRates(fault.Rates{LoseResponse: 0.06, ErrorAfter: 0.04, RateLimit: 0.05, RetryAfter: time.Second}); err != nil {
			return nil, err
		}
		if err := sendgridFaults.SetRates(fault.Rates{LoseResponse: 0.03, ErrorAfter: 0.02, RateLimit: 0.05, RetryAfter: time.Second}); err != nil {
			return nil, err
		}
	}
	return sandbox.Start(&sandbox.Config{StripeFaults: stripeFaults, SendGridFaults: sendgridFaults})
}
