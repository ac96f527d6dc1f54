package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/audit"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// A Stripe intent held in_doubt past its key window is performed after an
// operator's resend, exactly once, while a plain re-enqueue is still held
// as ambiguous.
func TestOperatorResendPastTheKeyWindowIsPerformed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	// Stripe answers 500 without charging (and saves that answer under the
	// key); it has no PaymentIntent for the intent, so it is held in_doubt.
	b.stripe.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 500})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	b.start(t, b.config())
	if s := b.waitSettled(t, id); s.State != intenttype.StateInDoubt {
		t.Fatalf("intent = %+v, want in_doubt", s)
	}
	// A day passes: past the key window, Stripe has forgotten the key.
	b.clock.Advance(25 * time.Hour)

	// Without an operator, another job for it (as a stray re-enqueue would
	// be) is ambiguous past the window: held again, nothing sent.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET state = 'pending' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `INSERT INTO river_job (kind, args, queue, max_attempts, state, priority) VALUES ('outbox_dispatch', jsonb_build_object('intent_id', $1::bigint), 'outbox', 5, 'available', 1)`, id); err != nil {
		t.Fatal(err)
	}
	if s := b.waitSettled(t, id); s.State != intenttype.StateInDoubt || !strings.Contains(s.LastError, "key window") {
		t.Fatalf("intent after a plain re-enqueue = %+v, want in_doubt naming the key window", s)
	}
	if n, attempts := b.stripe.EffectsFor(id), b.attempts(t, id); n != 0 || len(attempts) != 1 {
		t.Fatalf("after a plain re-enqueue: %d PaymentIntents, %d attempts; want 0 and 1", n, len(attempts))
	}

	// The operator checked Stripe's dashboard and resends.
	store := audit.New(b.pool, b.registry)
	if _, err := store.Resend(ctx, id, "alice", "no PaymentIntent in the dashboard"); err != nil {
		t.Fatal(err)
	}
	s := b.waitSettled(t, id)
	if s.State != intenttype.StateSucceeded || !strings.HasPrefix(s.ProviderRef, "pi_") {
		t.Fatalf("intent after the resend = %+v, want succeeded with a PaymentIntent id", s)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want exactly 1", n)
	}
	attempts := b.attempts(t, id)
	if len(attempts) != 2 || attempts[1].Outcome != "succeeded" || attempts[1].Replayed {
		t.Fatalf("attempts = %+v, want the ambiguous one then one new, not replayed, success", attempts)
	}
	var resendPending bool
	if err := b.pool.QueryRow(ctx, `SELECT resend_requested_at IS NOT NULL FROM outbox_intents WHERE id = $1`, id).Scan(&resendPending); err != nil {
		t.Fatal(err)
	}
	if resendPending {
		t.Error("resend_requested_at still set after the attempt it covered was recorded")
	}
	d, err := store.Get(ctx, fmt.Sprint(id))
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, e := range d.Events {
		trail = append(trail, fmt.Sprintf("%s:%s>%s", e.Actor, e.FromState, e.ToState))
	}
	if got := strings.Join(trail, " "); !strings.HasSuffix(got, "operator:alice:in_doubt>pending dispatcher:pending>succeeded") {
		t.Errorf("events = %s, want the operator's resend then the dispatcher's success", got)
	}
}
