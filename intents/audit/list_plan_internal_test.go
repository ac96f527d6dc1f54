package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// An in_doubt list reads the few intents River holds, not a backlog in the
// dispatchers' queue: with 20,000 intents queued and the statistics
// saying so, its plan reads outbox_intents_held_idx (it read the whole
// table for the list without "NOT queued", and without the index).
func TestAnInDoubtListReadsTheHeldIntentsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, queued)
		SELECT 'todo-' || g, 'stripe.payment_intent', 'stripe', '{}', true
		FROM generate_series(1, 20000) g;
		INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, state, finished_at)
		SELECT 'done-' || g, 'stripe.payment_intent', 'stripe', '{}', 'succeeded', now()
		FROM generate_series(1, 20000) g;
		INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, state, may_have_acted)
		SELECT 'doubt-' || g, 'sendgrid.email', 'sendgrid', '{}', 'in_doubt', true
		FROM generate_series(1, 20) g;
		ANALYZE outbox_intents`); err != nil {
		t.Fatal(err)
	}
	f, err := Filter{States: []intenttype.State{intenttype.StateInDoubt}, Limit: 50}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	plans := pgtest.Plans(t, pool, listQuery(f.states), nilIfEmpty(f.states), nil, nil,
		f.consumer, f.messageID, f.ref, f.since, f.until, f.after, f.limit+1)
	for mode, plan := range plans {
		if !strings.Contains(plan, "outbox_intents_held_idx") {
			t.Errorf("the in_doubt list's plan (%s) does not read outbox_intents_held_idx:\n%s", mode, plan)
		}
	}
}
