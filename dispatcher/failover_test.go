package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgcluster"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// failover is a primary with one standby of a test's own, the outbox
// migrated on the primary, and a SendGrid double (no idempotency key: a
// claim lost in the failover would send an email twice) that answers
// every email after failoverCallDelay.
type failover struct {
	cluster  *pgcluster.Cluster
	standby  *pgcluster.Server
	gate     *pgcluster.Gate // between the standby and the primary, if any
	pool     *pgxpool.Pool   // on both servers: follows the primary
	sendgrid *sendgriddouble.Server
	registry *providers.Registry
	settled  *settleTimes
	logger   *slog.Logger
	logs     *testkit.SyncBuffer
}

const failoverCallDelay = 15 * time.Millisecond

// newFailover starts the cluster, then sets the primary's settings once
// the standby streams (a synchronous standby named before it exists would
// hold every commit); withGate puts a Gate between the standby and the
// primary.
func newFailover(t *testing.T, settings pgcluster.Settings, withGate bool) *failover {
	t.Helper()
	ctx := context.Background()
	c := pgcluster.ForTest(t, nil)
	f := &failover{cluster: c, settled: &settleTimes{}}
	f.logger, f.logs = testkit.Logger()
	streamFrom := c.Primary.Addr()
	if withGate {
		f.gate = c.Gate()
		streamFrom = f.gate.Addr()
	}
	if err := c.Primary.Exec(ctx, "postgres", `CREATE DATABASE outbox`); err != nil {
		t.Fatal(err)
	}
	f.standby = c.Standby("standby1", streamFrom)
	if err := c.Primary.Configure(ctx, settings); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pgcluster.MultiHostURL("outbox", c.Primary, f.standby))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrations.New(pool, nil).Up(ctx); err != nil {
		t.Fatal(err)
	}
	f.pool = pool
	faults := fault.New(3)
	if err := faults.SetRates(fault.Rates{Delay: 1, DelayFor: failoverCallDelay}); err != nil {
		t.Fatal(err)
	}
	f.sendgrid, err = sendgriddouble.NewServer(sendgriddouble.Config{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sendgrid.Close() })
	sp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: f.sendgrid.URL(), Reconcile: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.registry, err = providers.NewRegistry(sp); err != nil {
		t.Fatal(err)
	}
	return f
}

// record records n emails, one message each, and waits until the standby
// has replayed them: they are committed on both servers.
func (f *failover) record(t *testing.T, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	client, err := intents.NewClient(f.pool, &intents.Config{Providers: f.registry})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]intents.Message, n)
	for i := range msgs {
		msgs[i] = intents.Message{Consumer: "failover", ID: fmt.Sprint("m-", i)}
	}
	res, err := client.ConsumeBatch(ctx, msgs, func(_ context.Context, _ pgx.Tx, _ intents.Message, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(emailPayload)})
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 0, n)
	for _, r := range res {
		ids = append(ids, r.Intents[0].ID)
	}
	f.waitReplayed(t)
	return ids
}

// waitReplayed waits until the standby has replayed everything the primary
// has written so far.
func (f *failover) waitReplayed(t *testing.T) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "the standby replays the primary's WAL", func() bool {
		var caughtUp bool
		err := f.pool.QueryRow(context.Background(), `
			SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false) FROM pg_stat_replication`).Scan(&caughtUp)
		return err == nil && caughtUp
	})
}

// config is a dispatcher's configuration for these tests: a failover
// takes seconds, a dead dispatcher's claims are taken over after 10.
func (f *failover) config() *dispatcher.Config {
	return &dispatcher.Config{
		Providers:            f.registry,
		MaxWorkers:           8,
		CallTimeout:          2 * time.Second,
		RetryBackoff:         10 * time.Millisecond,
		RetryBackoffMax:      50 * time.Millisecond,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    50 * time.Millisecond,
		SweepInterval:        200 * time.Millisecond,
		RescueStuckJobsAfter: 10 * time.Second,
		SettleRetryFor:       time.Minute,
		RecheckDelay:         100 * time.Millisecond,
		RecheckInterval:      100 * time.Millisecond,
		Observer:             f.settled,
		Logger:               f.logger,
	}
}

// drainPart starts a dispatcher, stopped when t ends, and returns once it
// has sent n emails.
func (f *failover) drainPart(t *testing.T, n int) {
	t.Helper()
	d, err := dispatcher.New(f.pool, f.config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWithin(t, d, 30*time.Second) })
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := f.sendgrid.WaitForEmails(waitCtx, n); err != nil {
		t.Fatal(err)
	}
}

// promote stops the primary as a crash would and promotes the standby;
// it returns when it stopped the primary and when the standby took
// writes.
func (f *failover) promote(t *testing.T) (killed, promoted time.Time) {
	t.Helper()
	ctx := context.Background()
	killed = time.Now()
	if err := f.cluster.Primary.StopImmediately(ctx); err != nil {
		t.Fatal(err)
	}
	if f.gate != nil {
		f.gate.Cut()
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	return killed, time.Now()
}

// waitSucceeded waits until every intent of ids has succeeded, and
// returns when the first did after since.
func (f *failover) waitSucceeded(t *testing.T, ids []int64) {
	t.Helper()
	var left int
	testkit.Eventually(t, 90*time.Second, "every intent succeeds after the failover", func() bool {
		err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_intents WHERE id = ANY($1) AND state <> 'succeeded'`, ids).Scan(&left)
		return err == nil && left == 0
	})
}

// effects checks that the double sent every intent's email exactly once.
func (f *failover) effects(t *testing.T, ids []int64) {
	t.Helper()
	var twice, never []int64
	for _, id := range ids {
		switch n := f.sendgrid.EffectsFor(id); {
		case n > 1:
			twice = append(twice, id)
		case n == 0:
			never = append(never, id)
		}
	}
	if len(twice) > 0 || len(never) > 0 {
		t.Fatalf("of %d emails, %d were sent more than once (%v) and %d never (%v)", len(ids), len(twice), head(twice), len(never), head(never))
	}
}

func head(ids []int64) []int64 { return ids[:min(len(ids), 10)] }

// settleTimes keeps when the dispatcher's settlements were reported, which
// is after they committed.
type settleTimes struct {
	mu    sync.Mutex
	times []time.Time
}

func (s *settleTimes) AttemptFinished(string, providers.Outcome, time.Duration) {}

func (s *settleTimes) IntentSettled(string, intenttype.State, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
}

// firstAfter is the first settlement reported after at, and how many were
// reported before it.
func (s *settleTimes) firstAfter(at time.Time) (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.times {
		if x.After(at) {
			return x, i
		}
	}
	return time.Time{}, len(s.times)
}

// A primary with a synchronous standby (synchronous_commit = on for every
// commit) fails over in the middle of a drain: the dispatcher, connected
// to both servers, follows the promoted standby by itself, and no
// committed intent is lost or performed twice (DESIGN.md, invariant 16).
func TestAFailoverToASynchronousStandbyLosesAndDoublesNothing(t *testing.T) {
	t.Parallel()
	f := newFailover(t, pgcluster.Settings{"synchronous_standby_names": "'standby1'"}, false)
	ids := f.record(t, 400)
	f.drainPart(t, len(ids)/4)
	killed, promoted := f.promote(t)
	f.waitSucceeded(t, ids)
	f.effects(t, ids)
	f.logRecovery(t, len(ids), killed, promoted)
}

// logRecovery says how long the dispatcher took to settle again after the
// primary stopped: the figure docs/operating.md quotes.
func (f *failover) logRecovery(t *testing.T, n int, killed, promoted time.Time) {
	first, before := f.settled.firstAfter(promoted)
	t.Logf("standby promoted %s after the primary stopped; %d of %d intents settled before; the first settlement on the promoted standby %s after the stop",
		promoted.Sub(killed).Round(time.Millisecond), before, n, first.Sub(killed).Round(time.Millisecond))
}

func stopWithin(t *testing.T, d *dispatcher.Dispatcher, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	if err := d.Stop(ctx); err != nil && !strings.Contains(err.Error(), "not started") {
		t.Errorf("Stop: %v", err)
	}
}

// A standby that lags keeps every claim: with the standby named
// synchronous but synchronous_commit = local for the database (so that
// recording and settling do not wait for it), a claim's commit still
// waits for it. The standby's stream is held in the middle of a drain:
// the settlements go on committing on the primary alone while new claims
// wait; the primary then stops as a crash would and the standby, which
// never received what was held, is promoted. Every email already sent has
// its claim on the promoted standby, so the dispatcher finds it may have
// acted and looks the email up instead of sending it again; the email
// sent once is the proof (DESIGN.md, invariant 16). Without the claim's
// wait the claims made while the stream was held are lost, and their
// emails are sent a second time.
func TestAClaimWaitsForTheStandbySoALaggingFailoverSendsNothingTwice(t *testing.T) {
	t.Parallel()
	f := newFailover(t, pgcluster.Settings{"synchronous_standby_names": "'standby1'", "synchronous_commit": "local"}, true)
	ids := f.record(t, 400)
	f.drainPart(t, len(ids)/4)
	ctx := context.Background()
	f.gate.Hold()
	held := len(f.sendgrid.Emails())
	// Either a claim waits for the standby, or (the wait gone) the drain
	// goes on and sends a tenth of the emails more.
	var waiting int
	testkit.Eventually(t, 30*time.Second, "a claim waits for the held standby, or more emails are sent", func() bool {
		_ = f.cluster.Primary.QueryRow(ctx, "outbox", `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`, &waiting)
		return waiting > 0 || len(f.sendgrid.Emails()) >= held+len(ids)/10
	})
	t.Logf("stream held after %d emails; %d sent since, %d sessions waiting for the standby", held, len(f.sendgrid.Emails())-held, waiting)
	killed, promoted := f.promote(t)
	f.waitSucceeded(t, ids)
	f.effects(t, ids)
	f.logRecovery(t, len(ids), killed, promoted)
}

// A dispatcher that serves a provider without an idempotency key warns at
// start while a standby streams asynchronously, the risk invariant 16
// names, and no longer once the standby is named synchronous.
func TestStartWarnsOfAnAsynchronousStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFailover(t, nil, false)
	f.waitReplayed(t)
	const warning = "standbys stream from this database asynchronously"
	for _, named := range []bool{false, true} {
		if named {
			if err := f.cluster.Primary.Configure(ctx, pgcluster.Settings{"synchronous_standby_names": "'standby1'"}); err != nil {
				t.Fatal(err)
			}
		}
		cfg := f.config()
		logger, logs := testkit.Logger()
		cfg.Logger = logger
		d, err := dispatcher.New(f.pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		stopWithin(t, d, 30*time.Second)
		if got := strings.Contains(logs.String(), warning); got == named {
			t.Errorf("standby named synchronous %t: warned %t, want %t:\n%s", named, got, !named, logs.String())
		}
		if !named && !strings.Contains(logs.String(), "providers=sendgrid") {
			t.Errorf("the warning does not name the keyless provider:\n%s", logs.String())
		}
	}
}
