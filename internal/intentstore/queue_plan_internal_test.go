package intentstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// A claim reads the front of its provider's part of the unfinished index
// however many finished intents lie before the queue in id order. With
// statistics from before a backlog's drain, the planner took the primary
// key in id order and filtered, reading every intent the drain had
// finished on each claim: a 20,000-intent drain slowed as it went
// (outboxd bench --only backlog).
func TestClaimQueuedReadsTheUnfinishedIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	// The statistics are taken before the drain, when every intent is
	// queued: the planner then expects the first rows in id order to
	// match, and the drain finishes them before autovacuum analyses again.
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, queued)
		SELECT 'todo-' || g, 'stripe.payment_intent', 'stripe', '{}', true
		FROM generate_series(1, 20000) g;
		ANALYZE outbox_intents;
		UPDATE outbox_intents SET state = 'succeeded', queued = false, finished_at = now() WHERE id <= 18000`); err != nil {
		t.Fatal(err)
	}
	s := &Store{pool: pool}
	rules := &ClaimRules{Namespace: "ns", MaxAttempts: 3, MaxKeyLength: map[string]int{"stripe": 255}}
	a := rules.args()
	args := s.jobArgs(pgx.NamedArgs{
		"limit": 100, "now": time.Now(), "token": int64(1), "namespace": a.namespace, "max_attempts": a.maxAttempts,
		"kinds": a.kinds, "kind_max_attempts": a.kindMaxAttempts, "providers": a.providers, "max_key_lengths": a.providerKeyLimit,
	})
	for mode, plan := range pgtest.Plans(t, pool, claimQueuedSQL, args) {
		if !strings.Contains(plan, "using outbox_intents_unfinished_idx on outbox_intents") {
			t.Errorf("claimQueuedSQL's plan (%s) does not read the unfinished index:\n%s", mode, plan)
		}
	}
}
