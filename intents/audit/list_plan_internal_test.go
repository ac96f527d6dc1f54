package audit

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, false)`, mode); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN "+listQuery(f.states), nilIfEmpty(f.states), nil, nil,
			f.consumer, f.messageID, f.ref, f.since, f.until, f.after, f.limit+1)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if plan := strings.Join(lines, "\n"); !strings.Contains(plan, "outbox_intents_held_idx") {
			t.Errorf("the in_doubt list's plan (%s) does not read outbox_intents_held_idx:\n%s", mode, plan)
		}
	}
	_, _ = conn.Exec(ctx, `RESET plan_cache_mode`)
}
