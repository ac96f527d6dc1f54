package audit_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// activityFixtureSQL stores an intent with the given state and times, as
// the dispatcher would have left it, behind the store's back: the activity
// chart reads only those columns.
const activityFixtureSQL = `
INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, state, created_at, updated_at, finished_at)
VALUES ($1, 'stripe.payment_intent', 'stripe', '{}', $2, $3, $4,
    CASE WHEN $2 IN ('succeeded', 'failed', 'cancelled') THEN $4::timestamptz END)`

// activityStores returns a new database's pool, with the audit store that
// reads the activity chart and the intent store that rolls it up.
func activityStores(t *testing.T) (*pgxpool.Pool, *audit.Store, *intentstore.Store) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	intentStore, err := intentstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, fixture.Audit(t, pool, nil), intentStore
}

// TestActivityRollUpCountsAsTheIntentsDo is a property test of the activity
// chart's roll-up (migration 009): whatever the interleaving of roll-ups of
// any size, intents recorded, finished (several in one transaction, so at
// one instant) and turning in_doubt, the chart read from the roll-up and
// the intents finished outside it equals the chart read from the intents
// alone, for windows starting before, inside and after the rolled-up range
// and buckets of one to several minutes.
func TestActivityRollUpCountsAsTheIntentsDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, intentStore := activityStores(t)
	exec := func(t *rapid.T, sql string, args ...any) {
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		exec(t, `TRUNCATE outbox_intents, outbox_activity_minutes CASCADE`)
		var now time.Time
		if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		// History: two hours of intents at whole seconds, so that several
		// share an instant, then the roll-up starting somewhere in it, as
		// if the database had been migrated then.
		start := now.Truncate(time.Minute).Add(-2 * time.Hour)
		at := func(t *rapid.T, label string, from time.Time) time.Time {
			return from.Add(time.Duration(rapid.IntRange(0, int(now.Sub(from)/time.Second)-1).Draw(t, label)) * time.Second)
		}
		states := []string{"pending", "in_doubt", "succeeded", "failed", "cancelled"}
		for i := range rapid.IntRange(0, 40).Draw(t, "history") {
			state := rapid.SampledFrom(states).Draw(t, "state")
			created := at(t, "created", start)
			exec(t, activityFixtureSQL, fmt.Sprintf("h%d", i), state, created, at(t, "ended", created))
		}
		exec(t, `UPDATE outbox_activity_rollup SET rolled_from = $1, rolled_until = $1`, at(t, "rolled_from", start))

		key := 0
		unfinished := func(t *rapid.T) []int64 {
			rows, _ := pool.Query(ctx, `SELECT id FROM outbox_intents WHERE finished_at IS NULL ORDER BY id`)
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			return ids
		}
		t.Repeat(map[string]func(*rapid.T){
			"": func(t *rapid.T) {
				// The chart, both ways, for a window of whole minutes.
				bucket := time.Duration(rapid.SampledFrom([]int{1, 2, 5, 15}).Draw(t, "bucket minutes")) * time.Minute
				buckets := rapid.IntRange(1, 150).Draw(t, "buckets")
				since := start.Add(time.Duration(rapid.IntRange(-10, 130).Draw(t, "since minute")) * time.Minute)
				rolled, err := audit.ActivityRead(ctx, store, since, bucket, buckets, true)
				if err != nil {
					t.Fatal(err)
				}
				live, err := audit.ActivityRead(ctx, store, since, bucket, buckets, false)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(rolled, live) {
					t.Fatalf("window from %s, %d × %s:\nfrom the roll-up %+v\nfrom the intents %+v", since, buckets, bucket, rolled, live)
				}
			},
			"roll up": func(t *rapid.T) {
				if _, err := intentStore.RollUpActivity(ctx, rapid.IntRange(1, 10).Draw(t, "limit")); err != nil {
					t.Fatal(err)
				}
			},
			"record": func(t *rapid.T) {
				key++
				exec(t, activityFixtureSQL, fmt.Sprintf("r%d", key), "pending", now, now)
				exec(t, `UPDATE outbox_intents SET created_at = now(), updated_at = now() WHERE idempotency_key = $1`, fmt.Sprintf("r%d", key))
			},
			"finish": func(t *rapid.T) {
				ids := unfinished(t)
				if len(ids) == 0 {
					t.Skip("nothing unfinished")
				}
				// One transaction finishes up to three: they share its now().
				some := rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 1, 3, rapid.ID).Draw(t, "ids")
				exec(t, `UPDATE outbox_intents SET state = $2, queued = false, updated_at = now(), finished_at = now() WHERE id = ANY($1)`,
					some, rapid.SampledFrom([]string{"succeeded", "failed", "cancelled"}).Draw(t, "to"))
			},
			"in doubt": func(t *rapid.T) {
				ids := unfinished(t)
				if len(ids) == 0 {
					t.Skip("nothing unfinished")
				}
				exec(t, `UPDATE outbox_intents SET state = 'in_doubt', queued = false, updated_at = now() WHERE id = $1`, rapid.SampledFrom(ids).Draw(t, "id"))
			},
		})
	})
}

// An intent finished by a transaction that started before a roll-up and
// commits after it is counted: the roll-up stops before that transaction's
// start (its finished_at) instead of passing it and never reading it.
func TestActivityRollUpWaitsForTransactionsStillRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, intentStore := activityStores(t)
	finish := func(db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, key string) {
		t.Helper()
		if _, err := db.Exec(ctx, `INSERT INTO outbox_intents (idempotency_key, kind, provider, payload, state, finished_at)
			VALUES ($1, 'stripe.payment_intent', 'stripe', '{}', 'succeeded', now())`, key); err != nil {
			t.Fatal(err)
		}
	}
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	var slowStart time.Time
	if err := slow.QueryRow(ctx, `SELECT now()`).Scan(&slowStart); err != nil {
		t.Fatal(err)
	}
	finish(slow, "slow")
	finish(pool, "quick") // finished after the slow one started, committed first

	r, err := intentStore.RollUpActivity(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Until.After(slowStart) || r.Intents != 0 {
		t.Fatalf("roll-up went to %s with %d intents while a transaction that started at %s runs, want up to its start and none", r.Until, r.Intents, slowStart)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err = intentStore.RollUpActivity(ctx, 0); err != nil || r.Intents != 2 {
		t.Fatalf("roll-up after the commit: %+v, %v; want both intents", r, err)
	}
	since := slowStart.Truncate(time.Minute).Add(-5 * time.Minute)
	a, err := store.Activity(ctx, since, time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	live, err := audit.ActivityRead(ctx, store, since, time.Minute, 10, false)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range a.Succeeded {
		total += n
	}
	if total != 2 || !reflect.DeepEqual(a, live) {
		t.Fatalf("chart counts %d succeeded, want 2; from the roll-up %+v, from the intents %+v", total, a, live)
	}
}

// The retention pass's PruneActivity deletes the roll-up's minutes older
// than the retention, and only those.
func TestPruneActivityDeletesOnlyOldMinutes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, intentStore := activityStores(t)
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_activity_minutes (minute, recorded, succeeded, finished)
		SELECT date_trunc('minute', now()) - m * interval '1 minute', 1, 1, 1 FROM generate_series(0, 99) m`); err != nil {
		t.Fatal(err)
	}
	n, err := intentStore.PruneActivity(ctx, 30*time.Minute, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var left, old int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE minute < now() - interval '30 minutes') FROM outbox_activity_minutes`).Scan(&left, &old); err != nil {
		t.Fatal(err)
	}
	if n+int64(left) != 100 || old != 0 || left < 30 {
		t.Fatalf("pruned %d, %d left, %d of them older than 30 minutes; want those, and only those, gone", n, left, old)
	}
}
