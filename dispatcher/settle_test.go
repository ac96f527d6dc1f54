package dispatcher_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// Every call runs under a claim, keyed providers too: an operator who tries
// to cancel an intent while its call is in flight is refused (the charge
// may be happening right now), and the attempt settles the intent.
func TestOperatorCannotCancelDuringACall(t *testing.T) {
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
	store := fixture.Audit(t, b.pool, b.registry)
	_, err := store.Cancel(ctx, id, "alice", "changed my mind")
	var te *audit.TransitionError
	if !errors.As(err, &te) || te.From != intenttype.StateDispatching {
		t.Fatalf("Cancel during the call = %v, want a *TransitionError from dispatching", err)
	}
	if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded || s.Attempts != 1 {
		t.Fatalf("intent = %+v, want succeeded by its one attempt", s)
	}
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents, want 1", n)
	}
	// After the call, a cancel is refused too: the intent is terminal.
	if _, err := store.Cancel(ctx, id, "alice", "too late"); !errors.As(err, &te) {
		t.Fatalf("Cancel after success = %v, want a *TransitionError", err)
	}
}

// A keyed intent waiting for its retry after an attempt that may have
// reached the provider (a lost response) cannot be cancelled: Stripe may
// have charged (DESIGN.md, invariant 3).
func TestCancelRefusedOnceAnAttemptMayHaveActed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	b.stripe.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	id := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	cfg := b.config()
	cfg.RetryBackoff, cfg.RetryBackoffMax = time.Hour, time.Hour // the retry waits
	b.start(t, cfg)

	b.waitFirstAttempt(t, id)
	if n := b.stripe.EffectsFor(id); n != 1 {
		t.Fatalf("Stripe double has %d PaymentIntents after the lost response, want 1", n)
	}
	store := fixture.Audit(t, b.pool, b.registry)
	_, err := store.Cancel(ctx, id, "alice", "changed my mind")
	var te *audit.TransitionError
	if !errors.As(err, &te) || te.From != intenttype.StatePending {
		t.Fatalf("Cancel after a lost response = %v, want a *TransitionError", err)
	}
	if s := b.intent(t, id); s.State != intenttype.StatePending {
		t.Fatalf("intent = %+v, want pending, untouched by the refused cancel", s)
	}
}

// A graceful Stop returns only once every attempt in flight has recorded
// its outcome: none is left dispatching, waiting for a settlement that
// would never be written.
func TestStopSettlesEveryAttemptInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	const n = 12
	for range n {
		b.sendgrid.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: 500 * time.Millisecond})
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = b.record(t, sendgridprovider.KindEmail, emailPayload)
	}
	cfg := b.config()
	cfg.FetchLoops = 3
	d, err := dispatcher.New(b.pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 20*time.Second, "every call in flight", func() bool { return b.sendgrid.Stats().Requests == n })
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := d.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, id := range ids {
		if s := b.intent(t, id); s.State != intenttype.StateSucceeded || s.ProviderRef == "" {
			t.Errorf("intent %d after Stop = %+v, want succeeded with SendGrid's message id", id, s)
		}
		if n := b.sendgrid.EffectsFor(id); n != 1 {
			t.Errorf("SendGrid double accepted %d emails for intent %d, want 1", n, id)
		}
	}
}

// FetchLoops defaults to one loop per 25 workers and refuses more loops
// than workers, naming the field.
func TestFetchLoopsIsValidated(t *testing.T) {
	t.Parallel()
	reg, err := providers.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		workers, loops int
		want           string
	}{
		{workers: 50, loops: 0},
		{workers: 10, loops: 10},
		{workers: 10000, loops: 0}, // 400 by the ratio, capped at MaxFetchLoops
		{workers: 4, loops: 5, want: "Config.FetchLoops must be between 1 and 16 (and at most MaxWorkers, 4), got 5"},
		{workers: 50, loops: 17, want: "Config.FetchLoops must be between 1 and 16"},
		{workers: 50, loops: -1, want: "Config.FetchLoops must be between 1 and 16"},
	} {
		cfg := &dispatcher.Config{Providers: reg, MaxWorkers: tc.workers, FetchLoops: tc.loops}
		err := cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("MaxWorkers %d, FetchLoops %d: Validate() = %v, want %q", tc.workers, tc.loops, err, tc.want)
		}
	}
}
