package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// An operator who cancels an intent while its call is in flight keeps the
// intent as they left it; the attempt is still recorded for the audit, and
// the job completes instead of retrying.
func TestOperatorMoveDuringCallWinsAndTheAttemptIsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: 2 * time.Second})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	cfg := b.config()
	cfg.CallTimeout = 10 * time.Second
	b.start(t, cfg)

	deadline := time.Now().Add(20 * time.Second)
	for b.stripe.Stats().Requests == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the Stripe double")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The operator's cancel, as the audit store writes it.
	if _, err := b.pool.Exec(ctx, `
		WITH moved AS (
			UPDATE outbox_intents SET state = 'cancelled', finished_at = now(), updated_at = now()
			WHERE id = $1 AND state = 'pending' RETURNING id
		)
		INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
		SELECT id, 'operator', 'pending', 'cancelled', 'test' FROM moved`, id); err != nil {
		t.Fatal(err)
	}
	for len(b.attempts(t, id)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the attempt was never recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.intent(t, id); s.State != intenttype.StateCancelled || s.Attempts != 0 {
		t.Fatalf("intent = %+v, want cancelled as the operator left it", s)
	}
	if a := b.attempts(t, id); len(a) != 1 || a[0].Outcome != "succeeded" {
		t.Fatalf("attempts = %+v, want the one succeeded call", a)
	}
	if reason := b.lastEventReason(t, id); reason != "test" {
		t.Fatalf("last event %q: the dispatcher wrote an event over the operator's", reason)
	}
	var jobState string
	if err := b.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE kind = 'outbox_dispatch' AND (args->>'intent_id')::bigint = $1`, id).Scan(&jobState); err != nil {
		t.Fatal(err)
	}
	if jobState != "completed" {
		t.Fatalf("job %s, want completed with the attempt", jobState)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 1", n)
	}
}
