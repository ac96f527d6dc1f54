package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/migrations"
)

// historyVersion is migration 007, which keeps the finished counts.
const historyVersion = 7

// Migrating a database that already holds intents counts its finished
// ones, and rolling back and forth keeps the schema usable both ways.
func TestHistoryMigrationBackfillsCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDB(t)
	m := migrations.New(pool, nil)
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	before := historyVersion - 1
	for v := before; v > 0; v-- { // the newest version before 007 (versions may have gaps)
		if hasVersion(v) {
			before = v
			break
		}
	}
	if _, err := m.DownTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `
INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, state, finished_at)
SELECT 'k' || g,
    CASE WHEN g % 2 = 0 THEN 'stripe.payment_intent' ELSE 'sendgrid.email' END,
    'p', '{}',
    CASE g % 5 WHEN 0 THEN 'pending' WHEN 1 THEN 'succeeded' WHEN 2 THEN 'failed' WHEN 3 THEN 'cancelled' ELSE 'in_doubt' END,
    CASE WHEN g % 5 IN (1, 2, 3) THEN now() END
FROM generate_series(1, 50) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := "sendgrid.email/cancelled=5 sendgrid.email/failed=5 sendgrid.email/succeeded=5 " +
		"stripe.payment_intent/cancelled=5 stripe.payment_intent/failed=5 stripe.payment_intent/succeeded=5"
	if got := counts(t, pool); got != want {
		t.Fatalf("counts after migrating = %q, want %q", got, want)
	}

	// Down restores the index on state the older code's queries use, and
	// up again counts afresh.
	if _, err := m.DownTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	var indexes string
	if err := pool.QueryRow(ctx, `SELECT string_agg(indexname, ' ' ORDER BY indexname) FROM pg_indexes
		WHERE tablename = 'outbox_intents' AND indexname IN ('outbox_intents_unfinished_idx', 'outbox_intents_recheck_idx')`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != "outbox_intents_recheck_idx outbox_intents_unfinished_idx" {
		t.Fatalf("indexes after rolling back = %q", indexes)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox_intents SET state = 'succeeded', finished_at = now() WHERE state = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want = "sendgrid.email/cancelled=5 sendgrid.email/failed=5 sendgrid.email/succeeded=10 " +
		"stripe.payment_intent/cancelled=5 stripe.payment_intent/failed=5 stripe.payment_intent/succeeded=10"
	if got := counts(t, pool); got != want {
		t.Fatalf("counts after migrating again = %q, want %q", got, want)
	}
}

func hasVersion(v int) bool {
	for _, m := range migrations.All() {
		if m.Version == v {
			return true
		}
	}
	return false
}

func counts(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var out string
	err := pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(kind || '/' || state || '=' || n, ' ' ORDER BY kind, state), '')
		FROM (SELECT kind, state, sum(n) AS n FROM outbox_intent_counts GROUP BY 1, 2) c`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
