package dispatcher_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/fault"
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

	deadline := time.Now().Add(20 * time.Second)
	for a := b.attempts(t, id); len(a) == 0 || a[0].Outcome == ""; a = b.attempts(t, id) {
		if time.Now().After(deadline) {
			t.Fatal("the first attempt never settled")
		}
		time.Sleep(10 * time.Millisecond)
	}
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
