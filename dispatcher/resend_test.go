package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// holdInDoubt puts an intent in_doubt as its last allowed attempt would
// leave it: every attempt of the budget used, one of them may have reached
// the provider under the key, first used keyUsedAgo ago.
func (b *testBundle) holdInDoubt(t *testing.T, id int64, attempts int, keyUsedAgo time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `
		UPDATE outbox_intents
		SET state = 'in_doubt', queued = false, attempt_count = $2, may_have_acted = true,
		    provider_key = 'ns.0/' || idempotency_key, key_namespace = 'ns', key_first_used_at = $3
		WHERE id = $1`, id, attempts, b.clock.Now().Add(-keyUsedAgo)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now()
		WHERE kind = 'outbox_dispatch' AND (args->>'intent_id')::bigint = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// An operator's resend is performed (DESIGN.md, invariant 5): it grants a
// fresh attempt budget, so an intent that reached in_doubt on its last
// allowed attempt is not turned into failed by the budget the resend was
// meant to reset; and it gets a new key, so neither Stripe's saved answer
// under the old key nor a key window that has passed stands in the way.
func TestOperatorResendIsPerformedWithAFreshBudgetAndKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{})
	cases := []struct {
		name       string
		keyUsedAgo time.Duration
		id         int64
	}{{name: "inside the key window", keyUsedAgo: time.Minute}, {name: "past the key window", keyUsedAgo: 25 * time.Hour}}
	for i := range cases {
		cases[i].id = b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
		b.holdInDoubt(t, cases[i].id, 3, cases[i].keyUsedAgo)
	}
	cfg := b.config()
	cfg.MaxAttemptsByKind = map[string]int{stripeprovider.KindPaymentIntent: 3}
	b.start(t, cfg)
	for _, tc := range cases {
		id := tc.id
		store := fixture.Audit(t, b.pool, b.registry)
		if _, err := store.Resend(ctx, id, "alice", "no PaymentIntent in the dashboard"); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s := b.waitSettled(t, id)
		if s.State != intenttype.StateSucceeded || !strings.HasPrefix(s.ProviderRef, "pi_") || s.Attempts != 4 {
			t.Fatalf("%s: intent after the resend = %+v, want succeeded by a fourth attempt", tc.name, s)
		}
		if n := b.stripe.EffectsFor(id); n != 1 {
			t.Fatalf("%s: Stripe double has %d PaymentIntents, want exactly 1", tc.name, n)
		}
		d, err := store.Get(ctx, fmt.Sprint(id))
		if err != nil {
			t.Fatal(err)
		}
		if d.Intent.KeyGeneration != 1 || !strings.Contains(d.Intent.ProviderKey, ".1/") {
			t.Fatalf("%s: key generation %d, provider key %q; want a new key", tc.name, d.Intent.KeyGeneration, d.Intent.ProviderKey)
		}
		var trail []string
		for _, e := range d.Events {
			trail = append(trail, fmt.Sprintf("%s:%s>%s", e.Actor, e.FromState, e.ToState))
		}
		if got := strings.Join(trail, " "); !strings.HasSuffix(got, "operator:alice:in_doubt>pending dispatcher:dispatching>succeeded") {
			t.Errorf("%s: events = %s, want the operator's resend then the dispatcher's success", tc.name, got)
		}
	}
}
