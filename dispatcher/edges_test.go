package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// Charged, then the budget runs out on Stripe's edge answering 503: the
// intent must not end failed while a PaymentIntent exists (DESIGN.md,
// invariant 3). The first attempt's lost response is sticky evidence; the
// provider's own records settle it.
func TestChargedThenBudgetExhaustedIsNeverFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	for range 4 {
		b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 503})
	}
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	cfg := b.config()
	cfg.MaxAttemptsByKind = map[string]int{stripeprovider.KindPaymentIntent: 3}
	b.start(t, cfg)

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || !strings.HasPrefix(s.ProviderRef, "pi_") {
		t.Fatalf("intent = %+v, want succeeded with the PaymentIntent the first attempt created", s)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 1", n)
	}
	if a := b.attempts(t, id); len(a) != 3 {
		t.Fatalf("attempts = %+v, want the budget of 3", a)
	}
}

// Past the key window after an attempt that may have reached Stripe, the
// dispatcher never calls again (Stripe may have forgotten the key): it asks
// Stripe instead (DESIGN.md, invariant 8). The evidence is the intent's own
// row, not River's job, whose attempt counter restarts when a job is
// replaced.
func TestPastTheKeyWindowAfterAMaybeNeverCallsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	cfg := b.config()
	cfg.RetryBackoff, cfg.RetryBackoffMax = time.Hour, time.Hour
	b.start(t, cfg)

	b.waitFirstAttempt(t, id)
	// A day passes, and the job is replaced by a fresh one (deleted in
	// River's UI, then swept back): River's attempt counter starts over.
	b.clock.Advance(25 * time.Hour)
	if _, err := b.pool.Exec(ctx, `DELETE FROM river_job WHERE kind = 'outbox_dispatch' AND (args->>'intent_id')::bigint = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO river_job (kind, args, queue, max_attempts, state, priority) VALUES ('outbox_dispatch', jsonb_build_object('intent_id', $1::bigint), 'outbox', 25, 'available', 1)`, id); err != nil {
		t.Fatal(err)
	}
	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || s.Attempts != 1 {
		t.Fatalf("intent = %+v, want succeeded by reconciliation, with its one attempt", s)
	}
	// The double has forgotten the key too: a second call would have
	// created a second PaymentIntent.
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 1", n)
	}
}

// cutsConnections is the SendGrid adapter, except that once armed, when an
// email is accepted it terminates the dispatcher's connections
// (application_name "dispatcher-under-test"): the settlement that follows
// meets a dead connection. It is armed once the dispatcher has started, so
// that no cut fails the start itself.
type cutsConnections struct {
	*sendgridprovider.Provider
	pool  *pgxpool.Pool
	armed *atomic.Bool
}

func (c cutsConnections) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	res, err := c.Provider.Perform(ctx, req)
	if !c.armed.Load() {
		return res, err
	}
	if _, termErr := c.pool.Exec(context.WithoutCancel(ctx), `
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'dispatcher-under-test'`); termErr != nil {
		return res, termErr
	}
	return res, err
}

// startCuttingConnections starts a dispatcher calling the SendGrid double
// through cutsConnections, on a pool of its own, named, so that only its
// connections are cut once a call is answered.
func (b *testBundle) startCuttingConnections(t *testing.T) {
	t.Helper()
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: b.sendgrid.URL()})
	if err != nil {
		t.Fatal(err)
	}
	pcfg := b.pool.Config().Copy()
	pcfg.ConnConfig.RuntimeParams["application_name"] = "dispatcher-under-test"
	dpool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dpool.Close)
	cuts := cutsConnections{Provider: gp, pool: b.pool, armed: &atomic.Bool{}}
	reg, err := providers.NewRegistry(cuts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Providers = reg
	b.startOn(t, dpool, cfg)
	cuts.armed.Store(true)
}

// A known outcome is never discarded (DESIGN.md, invariant 7): SendGrid
// accepted the email, then the database connection the settlement would
// use died. The settlement is sent again; the intent is succeeded with the
// message id, not held in_doubt, and the email went once.
func TestSettlementSurvivesALostConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.startCuttingConnections(t)
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || s.ProviderRef == "" {
		t.Fatalf("intent = %+v, want succeeded with SendGrid's message id", s)
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("SendGrid double accepted %d emails, want 1", n)
	}
}

// Many outcomes settled together meet dead connections (every call cuts
// the dispatcher's connections once it is answered): each group is sent
// again until it lands, and no outcome is lost or recorded twice.
func TestGroupedSettlementsSurviveLostConnections(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.startCuttingConnections(t)
	const n = 20
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = b.record(t, sendgridprovider.KindEmail, emailPayload)
	}

	for _, id := range ids {
		if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded || s.ProviderRef == "" {
			t.Errorf("intent %d = %+v, want succeeded with SendGrid's message id", id, s)
		}
		if n := b.sendgrid.EffectsFor(id); n != 1 {
			t.Errorf("SendGrid double accepted %d emails for intent %d, want 1", n, id)
		}
	}
}

// Two deployments share one Stripe account and both have intent 1 with the
// same consumer key. After an ambiguous 500, ours must not adopt the other
// deployment's PaymentIntent (DESIGN.md, invariant 1): Stripe proves ours
// absent, and ours is charged under a new key.
func TestAnotherDeploymentsChargeIsNeverAdopted(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	key := b.key(t, id)
	theirs := fixture.ForeignPaymentIntent(t, b.stripe, "0therdep10yment0", intenttype.ProviderKey("0therdep10yment0", 0, key, 255), id, 500, "cus_1")
	b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || s.ProviderRef == theirs {
		t.Fatalf("intent = %+v; want succeeded with a PaymentIntent of its own, not %s", s, theirs)
	}
	_, ours := fixture.ProviderKey(t, b.pool, key, 255)
	var mine int
	for _, pi := range b.stripe.PaymentIntents() {
		if pi.ID == s.ProviderRef && pi.Metadata[providers.MetadataNamespace] != "0therdep10yment0" && strings.HasPrefix(pi.Metadata[providers.MetadataKey], strings.SplitN(ours, ".", 2)[0]) {
			mine++
		}
	}
	if mine != 1 {
		t.Fatalf("the intent's provider_ref %s is not one PaymentIntent of this deployment's", s.ProviderRef)
	}
	if a := b.attempts(t, id); len(a) != 2 || a[0].Outcome != "ambiguous" {
		t.Fatalf("attempts = %+v, want the ambiguous 500, then the charge under a new key", a)
	}
}

// An object that carries this deployment's namespace and the intent's key
// but not its amount is never adopted: the intent is held in_doubt, saying
// why.
func TestAMismatchedObjectIsHeldInDoubt(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	key := b.key(t, id)
	ns, pk := fixture.ProviderKey(t, b.pool, key, 255)
	fixture.ForeignPaymentIntent(t, b.stripe, ns, pk, id, 999, "cus_1")
	b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	b.start(t, b.config())

	s := b.waitSettled(t, id)
	if s.State != intenttype.StateInDoubt || !strings.Contains(s.LastError, "not adopted") {
		t.Fatalf("intent = %+v, want in_doubt, the mismatched object not adopted", s)
	}
}

// key returns an intent's idempotency key.
func (b *testBundle) key(t *testing.T, id int64) string {
	t.Helper()
	var key string
	if err := b.pool.QueryRow(context.Background(), `SELECT idempotency_key FROM outbox_intents WHERE id = $1`, id).Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

// waitFirstAttempt waits until the intent's first attempt has an outcome.
func (b *testBundle) waitFirstAttempt(t *testing.T, id int64) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "the first attempt's outcome", func() bool {
		a := b.attempts(t, id)
		return len(a) > 0 && a[0].Outcome != ""
	})
}

// A refund of a charge the dispatcher made goes to Stripe once, even when
// its first answer is lost: the repeat under the same key is replayed.
func TestRefundAfterTheChargeIsPerformedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.start(t, b.config())
	charge := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	s := b.waitSettled(t, charge)
	if s.State != intenttype.StateSucceeded {
		t.Fatalf("charge = %+v", s)
	}
	b.stripe.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	refund := b.record(t, stripeprovider.KindRefund, fmt.Sprintf(`{"payment_intent": %q, "amount": 200, "reason": "requested_by_customer"}`, s.ProviderRef))
	if r := b.waitSettled(t, refund); r.State != intenttype.StateSucceeded || !strings.HasPrefix(r.ProviderRef, "re_") {
		t.Fatalf("refund = %+v, want succeeded with a refund id", r)
	}
	if n := b.stripe.RefundsFor(refund); n != 1 {
		t.Fatalf("the Stripe double made %d refunds for the intent, want 1", n)
	}
	// The answer was lost; Stripe replayed it under the key (to the next
	// attempt, or to net/http's own retry on the dead connection, which a
	// keyed request allows).
	if a := b.attempts(t, refund); !a[len(a)-1].Replayed {
		t.Fatalf("refund attempts = %+v, want the last one a replay", a)
	}
}

// A worker whose claim committed but whose answer was lost knows it did not
// call the provider, and says so when the database answers again
// (DESIGN.md, invariant 15): the attempt is closed as not called, and the
// intent is performed once, never held in_doubt as "stopped during the
// call". Before, 7 of 3,000 emails ended in_doubt this way after an
// immediate Postgres crash.
func TestAClaimWhoseAnswerIsLostIsReleasedAsNotCalled(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	proxied, proxy := testkit.LostAckPool(t, b.pool)
	proxy.ArmStatement("AS claim_first_used", 1) // loadClaimSQL: the load that claims
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	b.startOn(t, proxied, b.config())

	s := b.waitDone(t, id)
	if s.State != intenttype.StateSucceeded {
		t.Fatalf("intent = %+v, want succeeded", s)
	}
	if proxy.Lost() != 1 {
		t.Fatalf("the proxy lost %d answers, want 1", proxy.Lost())
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("the SendGrid double sent %d emails, want 1", n)
	}
	a := b.attempts(t, id)
	if len(a) != 2 || a[0].Outcome != "retry" || !strings.Contains(a[0].Error, "not called") || a[1].Outcome != "succeeded" {
		t.Fatalf("attempts = %+v, want the lost claim closed as not called, then the one call", a)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1 AND to_state = 'in_doubt'`, id); n != 0 {
		t.Fatalf("the intent went in_doubt %d times", n)
	}
	var mayHaveActed bool
	if err := b.pool.QueryRow(context.Background(), `SELECT may_have_acted FROM outbox_intents WHERE id = $1`, id).Scan(&mayHaveActed); err != nil {
		t.Fatal(err)
	}
	if !mayHaveActed {
		t.Fatal("may_have_acted is false after the call that sent the email")
	}
}
