package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

type testBundle struct {
	pool     *pgxpool.Pool
	dbURL    string
	stripe   *stripedouble.Server
	sendgrid *sendgriddouble.Server
	registry *providers.Registry
	recorder *intents.Client
	clock    *testkit.Clock
}

type options struct {
	sendgridReconcile bool
}

func setup(t *testing.T, opts options) *testBundle {
	t.Helper()
	pool, dbURL := pgtest.NewDB(t)
	clk := testkit.NewRunningClock()
	sd, err := stripedouble.NewServer(stripedouble.Config{Now: clk.Now, Faults: fault.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	gd, err := sendgriddouble.NewServer(sendgriddouble.Config{Faults: fault.New(2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gd.Close() })
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: sd.URL()})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: gd.URL(), Reconcile: opts.sendgridReconcile})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(sp, gp)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := intents.NewClient(pool, &intents.Config{Providers: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{pool: pool, dbURL: dbURL, stripe: sd, sendgrid: gd, registry: reg, recorder: rec, clock: clk}
}

func (b *testBundle) config() *dispatcher.Config {
	return &dispatcher.Config{
		Providers:         b.registry,
		CallTimeout:       2 * time.Second,
		RetryBackoff:      10 * time.Millisecond,
		RetryBackoffMax:   50 * time.Millisecond,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Now:               b.clock.Now,
	}
}

func (b *testBundle) start(t *testing.T, cfg *dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	return b.startOn(t, b.pool, cfg)
}

// startOn starts a dispatcher on a pool of the test's database other than
// b.pool (one whose connections a test cuts), stopped when t ends.
func (b *testBundle) startOn(t *testing.T, pool *pgxpool.Pool, cfg *dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	d, err := dispatcher.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return d
}

const (
	paymentPayload  = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`
	declinedPayload = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa_chargeDeclined", "confirm": true}`
	emailPayload    = `{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`
)

// record records one intent for a fresh message and returns its id.
func (b *testBundle) record(t *testing.T, kind, payload string) int64 {
	t.Helper()
	res, err := b.recorder.Consume(context.Background(), intents.Message{Consumer: "test", ID: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: kind, Payload: json.RawMessage(payload)})
		})
	if err != nil {
		t.Fatal(err)
	}
	return res.Intents[0].ID
}

type intentState struct {
	State       intenttype.State
	Attempts    int
	ProviderRef string
	LastError   string
}

func (b *testBundle) intent(t *testing.T, id int64) intentState {
	t.Helper()
	var s intentState
	var ref, lastErr *string
	if err := b.pool.QueryRow(context.Background(), `SELECT state, attempt_count, provider_ref, last_error FROM outbox_intents WHERE id = $1`, id).
		Scan(&s.State, &s.Attempts, &ref, &lastErr); err != nil {
		t.Fatal(err)
	}
	if ref != nil {
		s.ProviderRef = *ref
	}
	if lastErr != nil {
		s.LastError = *lastErr
	}
	return s
}

// waitSettled waits until the intent leaves pending and dispatching.
func (b *testBundle) waitSettled(t *testing.T, id int64) intentState {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := b.intent(t, id)
		if s.State != intenttype.StatePending && s.State != intenttype.StateDispatching {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("intent %d still %s after 20s (attempts %d, last error %q)", id, s.State, s.Attempts, s.LastError)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type attemptRow struct {
	Outcome    string
	HTTPStatus int
	Replayed   bool
	Error      string
}

func (b *testBundle) attempts(t *testing.T, id int64) []attemptRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT coalesce(outcome, ''), coalesce(http_status, 0), replayed, coalesce(error, '') FROM outbox_intent_attempts WHERE intent_id = $1 ORDER BY attempt`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *testBundle) lastEventReason(t *testing.T, id int64) string {
	t.Helper()
	var reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT reason FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at DESC, id DESC NULLS LAST LIMIT 1`, id).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	return reason
}

func TestBothProvidersSucceedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	payment := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	email := b.record(t, sendgridprovider.KindEmail, emailPayload)
	b.start(t, b.config())

	for _, id := range []int64{payment, email} {
		s := b.waitSettled(t, id)
		if s.State != intenttype.StateSucceeded || s.Attempts != 1 || s.ProviderRef == "" {
			t.Fatalf("intent %d = %+v, want succeeded after one attempt with a provider reference", id, s)
		}
	}
	if n := b.stripe.EffectsFor(payment); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents for the intent, want 1", n)
	}
	if n := b.sendgrid.EffectsFor(email); n != 1 {
		t.Fatalf("SendGrid double accepted %d emails for the intent, want 1", n)
	}
	var liveJobs int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = 'outbox_dispatch' AND state <> 'completed'`).Scan(&liveJobs); err != nil {
		t.Fatal(err)
	}
	if liveJobs != 0 {
		t.Fatalf("%d dispatch jobs not completed", liveJobs)
	}
}

func TestStripeLostResponseIsReplayedNotChargedTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded {
		t.Fatalf("intent = %+v, want succeeded", s)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want exactly 1", n)
	}
	attempts := b.attempts(t, id)
	if len(attempts) != 2 || attempts[0].Outcome != "retry" || attempts[1].Outcome != "succeeded" || !attempts[1].Replayed {
		t.Fatalf("attempts = %+v, want a retry then a replayed success", attempts)
	}
}

func TestStripeServerErrorAfterActingIsReconciled(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || !strings.HasPrefix(s.ProviderRef, "pi_") {
		t.Fatalf("intent = %+v, want succeeded by reconciliation with the PaymentIntent id", s)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want exactly 1", n)
	}
	attempts := b.attempts(t, id)
	if len(attempts) != 1 || attempts[0].Outcome != "ambiguous" || attempts[0].HTTPStatus != 500 {
		t.Fatalf("attempts = %+v, want one ambiguous 500 and no repeat", attempts)
	}
	if reason := b.lastEventReason(t, id); !strings.Contains(reason, "reconciled") {
		t.Fatalf("event reason = %q, want it to say the intent was reconciled", reason)
	}
}

// Stripe saves a 500 under the key and replays it to every retry, so the
// key is spent. Stripe answered (it finished with the request), and a
// consistent read shows no PaymentIntent carrying the key: absence is
// proven, and the intent is performed under a new key, once (DESIGN.md,
// invariant 9).
func TestStripeSavedServerErrorWithoutChargeIsPerformedUnderANewKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded {
		t.Fatalf("intent = %+v, want succeeded under a new key", s)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 1", n)
	}
	var generation int
	var key string
	if err := b.pool.QueryRow(ctx, `SELECT key_generation, provider_key FROM outbox_intents WHERE id = $1`, id).Scan(&generation, &key); err != nil {
		t.Fatal(err)
	}
	if generation != 1 || !strings.Contains(key, ".1/") {
		t.Fatalf("key generation %d, provider key %q; want generation 1 in the key", generation, key)
	}
	if a := b.attempts(t, id); len(a) != 2 || a[0].Outcome != "ambiguous" || a[1].Outcome != "succeeded" || a[1].Replayed {
		t.Fatalf("attempts = %+v, want the ambiguous 500 then one fresh success", a)
	}
}

func TestSendGridAmbiguousAttemptsAreNeverResent(t *testing.T) {
	t.Parallel()
	for _, f := range []fault.Fault{{Kind: fault.LoseResponse}, {Kind: fault.ErrorAfter, Status: 500}, {Kind: fault.ErrorAfter, Status: 503}} {
		t.Run(string(f.Kind)+fmt.Sprint(f.Status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			b.sendgrid.Faults().Push(f)
			id := b.record(t, sendgridprovider.KindEmail, emailPayload)
			b.start(t, b.config())

			s := b.waitSettled(t, id)
			if s.State != intenttype.StateInDoubt {
				t.Fatalf("intent = %+v, want in_doubt", s)
			}
			if n := b.sendgrid.EffectsFor(id); n != 1 {
				t.Fatalf("SendGrid double accepted %d emails, want exactly 1 (no resend)", n)
			}
			if attempts := b.attempts(t, id); len(attempts) != 1 || attempts[0].Outcome != "ambiguous" {
				t.Fatalf("attempts = %+v, want one ambiguous attempt", attempts)
			}
		})
	}
}

func TestSendGridAmbiguousAttemptIsReconciledWhenActivityIsOn(t *testing.T) {
	t.Parallel()
	b := setup(t, options{sendgridReconcile: true})
	b.sendgrid.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || s.ProviderRef == "" {
		t.Fatalf("intent = %+v, want succeeded by reconciliation", s)
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("SendGrid double accepted %d emails, want 1", n)
	}
}

func TestPermanentRefusalsFailWithTheProvidersMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	declined := b.record(t, stripeprovider.KindPaymentIntent, declinedPayload)
	unverified := b.record(t, sendgridprovider.KindEmail, strings.Replace(emailPayload, "shop@example.com", sendgriddouble.UnverifiedSender, 1))
	b.start(t, b.config())

	if s := b.waitSettled(t, declined); s.State != intenttype.StateFailed || !strings.Contains(s.LastError, "generic_decline") {
		t.Fatalf("declined payment = %+v, want failed naming the decline code", s)
	}
	if s := b.waitSettled(t, unverified); s.State != intenttype.StateFailed || !strings.Contains(s.LastError, "Sender Identity") {
		t.Fatalf("unverified sender = %+v, want failed with SendGrid's message", s)
	}
	for _, id := range []int64{declined, unverified} {
		if attempts := b.attempts(t, id); len(attempts) != 1 {
			t.Fatalf("intent %d had %d attempts, want 1: a refusal is not retried", id, len(attempts))
		}
	}
}

func TestRateLimitIsRetriedAfterTheProvidersWait(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.sendgrid.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: time.Second})
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || s.Attempts != 2 {
		t.Fatalf("intent = %+v, want succeeded on the second attempt", s)
	}
	attempts := b.attempts(t, id)
	if attempts[0].Outcome != "retry" || attempts[0].HTTPStatus != 429 {
		t.Fatalf("first attempt = %+v, want a 429 retry", attempts[0])
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("SendGrid double accepted %d emails, want 1", n)
	}
}

func TestAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	for range 5 {
		b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 503})
	}
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	cfg := b.config()
	cfg.MaxAttemptsByKind = map[string]int{stripeprovider.KindPaymentIntent: 3}
	cfg.AbsenceSettleTime = time.Minute
	d := b.start(t, cfg)

	// A 503 from Stripe's edge proves nothing about the request: out of
	// attempts, the intent is held while the provider may still be at work.
	s := b.waitSettled(t, id)
	if s.State != intenttype.StateInDoubt || s.Attempts != 3 {
		t.Fatalf("intent = %+v, want in_doubt after 3 attempts", s)
	}
	// Once no request can still be executing, a consistent read proves no
	// charge: the intent goes back under a new key, and having no attempts
	// left, it fails with none performed.
	b.clock.Advance(10 * time.Minute)
	if _, err := d.Recheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = b.waitSettled(t, id)
	if s.State != intenttype.StateFailed || s.Attempts != 3 || !strings.Contains(s.LastError, "gave up after 3 attempts") {
		t.Fatalf("intent = %+v, want failed after 3 attempts", s)
	}
	if n := b.stripe.EffectsFor(id); n != 0 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 0", n)
	}
}

func TestKeyWindowExpiryMakesARepeatAmbiguous(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	// The first call acts but its response is lost; before the retry, a
	// day passes, and the double forgets the key as Stripe would.
	b.stripe.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	cfg := b.config()
	cfg.RetryBackoff, cfg.RetryBackoffMax = time.Second, time.Second
	b.start(t, cfg)

	deadline := time.Now().Add(10 * time.Second)
	for len(b.attempts(t, id)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no first attempt within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.clock.Advance(25 * time.Hour)

	s := b.waitSettled(t, id)
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 1: a repeat past the key window charged again", n)
	}
	if s.State != intenttype.StateSucceeded {
		t.Fatalf("intent = %+v, want succeeded by reconciliation", s)
	}
	if attempts := b.attempts(t, id); len(attempts) != 1 {
		t.Fatalf("%d attempts, want 1: nothing may be sent past the key window", len(attempts))
	}
	if reason := b.lastEventReason(t, id); !strings.Contains(reason, "key window") {
		t.Fatalf("event reason = %q, want it to name the key window", reason)
	}
}

func TestSweepReenqueuesStrandedIntent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	// Strand it: its job is gone.
	if _, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'outbox_dispatch'`); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.SweepGrace = time.Nanosecond
	cfg.SweepInterval = 100 * time.Millisecond
	b.start(t, cfg)

	if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded {
		t.Fatalf("stranded intent = %+v, want succeeded after the sweep", s)
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("SendGrid double accepted %d emails, want 1", n)
	}
}

func TestJobForTerminalIntentDoesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	d := b.start(t, b.config())
	b.waitSettled(t, id)

	// A second job for the same intent, as a re-run after a lost
	// completion would be.
	if _, err := b.pool.Exec(ctx, `INSERT INTO river_job (kind, args, queue, max_attempts, state, priority) VALUES ('outbox_dispatch', jsonb_build_object('intent_id', $1::bigint), 'outbox', 5, 'available', 1)`, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var open int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'outbox_dispatch' AND state <> 'completed'`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("re-run job not completed within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("SendGrid double accepted %d emails, want 1", n)
	}
	if attempts := b.attempts(t, id); len(attempts) != 1 {
		t.Fatalf("%d attempts, want 1", len(attempts))
	}
	_ = d
}

func TestDispatchersShareWorkWithoutDoubles(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	var ids []int64
	for range 40 {
		ids = append(ids, b.record(t, stripeprovider.KindPaymentIntent, paymentPayload), b.record(t, sendgridprovider.KindEmail, emailPayload))
	}
	for range 3 {
		b.start(t, b.config())
	}
	for _, id := range ids {
		if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded {
			t.Fatalf("intent %d = %+v", id, s)
		}
	}
	if d := b.stripe.DuplicateEffects() + b.sendgrid.DuplicateEffects(); d != 0 {
		t.Fatalf("%d intents had duplicate effects", d)
	}
	if got := len(b.stripe.PaymentIntents()) + len(b.sendgrid.Emails()); got != len(ids) {
		t.Fatalf("doubles saw %d effects for %d intents", got, len(ids))
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	cases := map[string]*dispatcher.Config{
		"Config is required":    nil,
		"Providers is required": {},
		"MaxWorkers":            {Providers: b.registry, MaxWorkers: -1},
		"RetryBackoffMax":       {Providers: b.registry, RetryBackoff: time.Minute, RetryBackoffMax: time.Second},
		"CallTimeout":           {Providers: b.registry, CallTimeout: -time.Second},
		`MaxAttemptsByKind`:     {Providers: b.registry, MaxAttemptsByKind: map[string]int{"fax.send": 3}},
		"RescueStuckJobsAfter":  {Providers: b.registry, RescueStuckJobsAfter: time.Second},
	}
	for want, cfg := range cases {
		if _, err := dispatcher.New(b.pool, cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", cfg, err, want)
		}
	}
}

// A registry built for recording (adapters without credentials) cannot
// dispatch: every intent would fail for good. dispatcher.New refuses it,
// naming every provider and the field.
func TestNewRefusesProvidersThatCannotPerform(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	_, err := dispatcher.New(pool, &dispatcher.Config{Providers: fixture.Registry(t)}) // the adapters without credentials
	if err == nil || !strings.Contains(err.Error(), "stripeprovider: Config.APIKey is empty") || !strings.Contains(err.Error(), "sendgridprovider: Config.APIKey is empty") {
		t.Fatalf("New with keyless providers = %v, want both named", err)
	}
}
