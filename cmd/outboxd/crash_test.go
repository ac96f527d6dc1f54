package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// The binary under test is built once per test run, on first use, into a
// directory TestMain removes.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binErr   error
	binBuild []byte
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxd-crash-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// outboxdBinary builds ./cmd/outboxd (this package) with `go build` once.
func outboxdBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("find the go command: %w", err)
			return
		}
		out := filepath.Join(binDir, "outboxd")
		cmd := exec.Command(goTool, "build", "-o", out, ".")
		binBuild, binErr = cmd.CombinedOutput()
		binPath = out
	})
	if binErr != nil {
		t.Fatalf("go build outboxd: %v\n%s", binErr, binBuild)
	}
	return binPath
}

const (
	paymentPayload = `{"amount":500,"currency":"usd","customer":"cus_1","payment_method":"pm_card_visa","confirm":true}`
	emailPayload   = `{"from":{"email":"shop@example.com"},"to":[{"email":"buyer@example.com"}],"subject":"Receipt","text":"Thanks"}`

	// The in-process dispatcher that takes over after the crash. The
	// rescue delay must exceed an attempt's bound, 2×CallTimeout+5s.
	takeoverCallTimeout = time.Second
	takeoverRescueAfter = 8 * time.Second
)

// syncBuffer collects a child's output while the test may read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// crashCase is one provider kind under test.
type crashCase struct {
	provider string // the name given to --providers
	kind     string
	payload  string
	// effects counts what the provider's double performed for an intent.
	effects func(intentID int64) int
	faults  *fault.Injector
	env     []string
	adapter providers.Provider

	stripe   *stripedouble.Server   // set for the Stripe case
	sendgrid *sendgriddouble.Server // set for the SendGrid case
}

func stripeCase(t *testing.T) crashCase {
	t.Helper()
	faults := fault.New(1)
	sd, err := stripedouble.NewServer(stripedouble.Config{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: sd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return crashCase{
		provider: stripeprovider.Name, kind: stripeprovider.KindPaymentIntent, payload: paymentPayload,
		effects: sd.EffectsFor, faults: faults, adapter: sp, stripe: sd,
		env: []string{"STRIPE_API_KEY=" + stripedouble.DefaultAPIKey, "STRIPE_API_BASE=" + sd.URL()},
	}
}

func sendgridCase(t *testing.T) crashCase {
	t.Helper()
	faults := fault.New(2)
	gd, err := sendgriddouble.NewServer(sendgriddouble.Config{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gd.Close() })
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: gd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return crashCase{
		provider: sendgridprovider.Name, kind: sendgridprovider.KindEmail, payload: emailPayload,
		effects: gd.EffectsFor, faults: faults, adapter: gp, sendgrid: gd,
		env: []string{"SENDGRID_API_KEY=" + sendgriddouble.DefaultAPIKey, "SENDGRID_API_BASE=" + gd.URL()},
	}
}

// crashed is what a dispatcher killed between a call and recording its
// outcome left behind.
type crashed struct {
	pool     *pgxpool.Pool
	registry *providers.Registry
	intentID int64
}

// killDuringCall records one intent, starts `outboxd run` as a child
// process against a double that performs the effect and then holds its
// response, waits until the double has acted, and kills the child with
// SIGKILL.
func killDuringCall(t *testing.T, c crashCase) crashed {
	t.Helper()
	bin := outboxdBinary(t)
	pool, dbURL := pgtest.NewDB(t)
	ctx := context.Background()

	registry, err := providers.NewRegistry(c.adapter)
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Consume(ctx, intents.Message{Consumer: "crash-test", ID: "order-1"},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: c.kind, Payload: json.RawMessage(c.payload)})
		})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Intents[0].ID

	// The double acts at once, then holds the response far longer than
	// the test waits: the child is killed with the call in flight.
	c.faults.Push(fault.Fault{Kind: fault.Delay, Delay: 5 * time.Minute})

	cmd := exec.Command(bin, "run",
		"--providers", c.provider,
		"--call-timeout", "60s",
		"--retry-backoff", "50ms",
		"--retry-backoff-max", "100ms",
		"--fetch-cooldown", "10ms",
		"--log-level", "debug",
		"--admin-addr", "", // several run at once on this host
	)
	cmd.Env = append(os.Environ(), append([]string{"DATABASE_URL=" + dbURL}, c.env...)...)
	var output syncBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	deadline := time.After(45 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for c.effects(id) < 1 {
		select {
		case err := <-exited:
			killed = true
			t.Fatalf("outboxd run exited before the provider acted: %v\n%s", err, output.String())
		case <-deadline:
			t.Fatalf("the %s double did not act for intent %d within 45s; outboxd output:\n%s", c.provider, id, output.String())
		case <-tick.C:
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	killed = true
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != -1 {
		t.Fatalf("outboxd run ended with %v, want killed by SIGKILL\n%s", err, output.String())
	}
	t.Logf("outboxd run killed after the %s double acted; its output:\n%s", c.provider, output.String())
	if n := c.effects(id); n != 1 {
		t.Fatalf("the double performed %d effects before the kill, want 1", n)
	}
	return crashed{pool: pool, registry: registry, intentID: id}
}

type attemptRow struct {
	Attempt  int
	Outcome  *string
	Replayed bool
	Error    string
}

func attempts(t *testing.T, pool *pgxpool.Pool, id int64) []attemptRow {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT attempt, outcome, replayed, coalesce(error, '') FROM outbox_intent_attempts WHERE intent_id = $1 ORDER BY attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func intentState(t *testing.T, pool *pgxpool.Pool, id int64) (state intenttype.State, attemptCount int, lastError string) {
	t.Helper()
	var le *string
	if err := pool.QueryRow(context.Background(), `SELECT state, attempt_count, last_error FROM outbox_intents WHERE id = $1`, id).
		Scan(&state, &attemptCount, &le); err != nil {
		t.Fatal(err)
	}
	if le != nil {
		lastError = *le
	}
	return state, attemptCount, lastError
}

// jobState describes who holds the intent: the queue (its claim) and the
// River dispatch jobs it has.
func jobState(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var s string
	err := pool.QueryRow(context.Background(), `SELECT CASE WHEN queued THEN 'queued' ELSE 'River''s' END || ', jobs: ' ||
		coalesce((SELECT string_agg(state::text || ' (attempt ' || attempt || ')', ', ') FROM river_job
		          WHERE kind = 'outbox_dispatch' AND args @> jsonb_build_object('intent_id', i.id)), 'none')
		FROM outbox_intents i WHERE id = $1`, id).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// takeOver waits until the killed dispatcher's claim is older than the
// rescue delay (so the sweep, which runs as soon as the new dispatcher
// leads, hands it to a River job at once instead of on its next run a
// minute later), then starts a fresh in-process dispatcher on the same
// database and waits until the intent leaves pending and dispatching. A
// new leader is elected only once the killed one's lease (15s) has lapsed.
func takeOver(t *testing.T, cr crashed) intenttype.State {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	for {
		var old bool
		err := cr.pool.QueryRow(ctx, `
			SELECT coalesce(bool_and(attempt_started_at < now() - $2::bigint * interval '1 microsecond'), true)
			FROM outbox_intents WHERE id = $1 AND state = 'dispatching'`,
			cr.intentID, takeoverRescueAfter.Microseconds()).Scan(&old)
		if err != nil {
			t.Fatal(err)
		}
		if old {
			break
		}
		if time.Since(start) > 2*takeoverRescueAfter {
			t.Fatalf("the killed claim is not older than %s after %s", takeoverRescueAfter, time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}

	d, err := dispatcher.New(cr.pool, &dispatcher.Config{
		Providers:            cr.registry,
		CallTimeout:          takeoverCallTimeout,
		RescueStuckJobsAfter: takeoverRescueAfter,
		RetryBackoff:         50 * time.Millisecond,
		RetryBackoffMax:      100 * time.Millisecond,
		FetchCooldown:        10 * time.Millisecond,
		FetchPollInterval:    50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := d.Stop(stopCtx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})

	const wait = 60 * time.Second
	started := time.Now()
	deadline := started.Add(wait)
	for {
		state, n, lastErr := intentState(t, cr.pool, cr.intentID)
		if state != intenttype.StatePending && state != intenttype.StateDispatching {
			t.Logf("intent %d settled %s by the new dispatcher %s after it started (waited %s for the killed claim to age first)",
				cr.intentID, state, time.Since(started).Round(time.Millisecond), started.Sub(start).Round(time.Millisecond))
			return state
		}
		if time.Now().After(deadline) {
			t.Fatalf("intent %d still %s %s after a new dispatcher started (attempts %d, last error %q, job %s)",
				cr.intentID, state, wait, n, lastErr, jobState(t, cr.pool, cr.intentID))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// A dispatcher killed after Stripe created the PaymentIntent but before the
// outcome was recorded leaves its claim: the intent dispatching with an open
// attempt, durable evidence that Stripe may have acted. Inside the key
// window the next dispatcher takes the claim over and retries with the same
// idempotency key, and Stripe replays the first response: one payment.
func TestKilledDuringStripeCallIsReplayedNotChargedTwice(t *testing.T) {
	t.Parallel()
	c := stripeCase(t)
	cr := killDuringCall(t, c)

	state, count, _ := intentState(t, cr.pool, cr.intentID)
	if state != intenttype.StateDispatching || count != 1 {
		t.Fatalf("after the kill the intent is %s with attempt_count %d, want dispatching with 1 (the claim)", state, count)
	}
	if a := attempts(t, cr.pool, cr.intentID); len(a) != 1 || a[0].Outcome != nil {
		t.Fatalf("after the kill the attempts are %s, want one open", formatAttempts(a))
	}
	if js := jobState(t, cr.pool, cr.intentID); js != "queued, jobs: none" {
		t.Fatalf("after the kill the intent is %q, want the queue's claim, with no River job", js)
	}

	if state := takeOver(t, cr); state != intenttype.StateSucceeded {
		_, _, lastErr := intentState(t, cr.pool, cr.intentID)
		t.Fatalf("intent ended %s (last error %q), want succeeded", state, lastErr)
	}
	if n := c.effects(cr.intentID); n != 1 {
		t.Fatalf("the Stripe double has %d PaymentIntents for the intent, want exactly 1", n)
	}
	a := attempts(t, cr.pool, cr.intentID)
	last := a[len(a)-1]
	if last.Outcome == nil || *last.Outcome != "succeeded" || !last.Replayed {
		t.Fatalf("attempts = %s, want the last one succeeded with replayed=true", formatAttempts(a))
	}
	if first := a[0]; first.Outcome == nil || *first.Outcome != "ambiguous" {
		t.Fatalf("attempts = %s, want the killed one closed as ambiguous when taken over", formatAttempts(a))
	}
	for _, at := range a[1 : len(a)-1] {
		if at.Outcome == nil || *at.Outcome != "retry" {
			t.Fatalf("attempts = %s, want only retries between the killed attempt and the replayed success", formatAttempts(a))
		}
	}
	var key, ref string
	if err := cr.pool.QueryRow(context.Background(), `SELECT provider_key, coalesce(provider_ref, '') FROM outbox_intents WHERE id = $1`, cr.intentID).Scan(&key, &ref); err != nil {
		t.Fatal(err)
	}
	pis := c.stripe.PaymentIntents()
	if len(pis) != 1 || pis[0].ID != ref || pis[0].IdempotencyKey != key {
		t.Fatalf("the double's PaymentIntents = %+v; want the one created before the kill, with key %q, recorded as the intent's provider_ref (%q)", pis, key, ref)
	}
}

// A dispatcher killed after SendGrid accepted the email but before the
// outcome was recorded leaves the write-ahead: the intent dispatching with
// an open attempt. SendGrid has no key, so the next dispatcher must not
// send again: it closes the attempt as ambiguous and holds the intent
// in_doubt.
func TestKilledDuringSendGridCallIsHeldInDoubtNotResent(t *testing.T) {
	t.Parallel()
	c := sendgridCase(t)
	cr := killDuringCall(t, c)

	state, count, _ := intentState(t, cr.pool, cr.intentID)
	if state != intenttype.StateDispatching || count != 1 {
		t.Fatalf("after the kill the intent is %s with attempt_count %d, want dispatching with 1 (the write-ahead)", state, count)
	}
	a := attempts(t, cr.pool, cr.intentID)
	if len(a) != 1 || a[0].Attempt != 1 || a[0].Outcome != nil {
		t.Fatalf("after the kill attempts = %s, want one open attempt (outcome NULL)", formatAttempts(a))
	}

	if state := takeOver(t, cr); state != intenttype.StateInDoubt {
		_, _, lastErr := intentState(t, cr.pool, cr.intentID)
		t.Fatalf("intent ended %s (last error %q), want in_doubt", state, lastErr)
	}
	if n := c.effects(cr.intentID); n != 1 {
		t.Fatalf("the SendGrid double accepted %d emails for the intent, want exactly 1 (never resent)", n)
	}
	if n := c.sendgrid.Stats().Requests; n != 1 {
		t.Fatalf("the SendGrid double received %d mail send requests, want 1: the ambiguous send must not be retried", n)
	}
	a = attempts(t, cr.pool, cr.intentID)
	if len(a) != 1 || a[0].Outcome == nil || *a[0].Outcome != "ambiguous" {
		t.Fatalf("attempts = %s, want the one open attempt closed as ambiguous", formatAttempts(a))
	}
	if _, _, lastErr := intentState(t, cr.pool, cr.intentID); !strings.Contains(lastErr, "stopped during the call") {
		t.Fatalf("last_error = %q, want it to say the dispatcher stopped during the call", lastErr)
	}
}

func formatAttempts(a []attemptRow) string {
	var parts []string
	for _, at := range a {
		outcome := "NULL"
		if at.Outcome != nil {
			outcome = *at.Outcome
		}
		parts = append(parts, fmt.Sprintf("{#%d %s replayed=%t %q}", at.Attempt, outcome, at.Replayed, at.Error))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
