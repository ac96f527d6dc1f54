package intentstore_test

import (
	"context"
	"testing"
	"time"
)

// The leader counts for the readers every CountsRefreshInterval, and less
// often when a count took long: a count that took d is kept for ten times
// d. What it saves is what a reader takes.
func TestRefreshCountsSavesACountAtMostAsOftenAsItsCostAllows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	ids := recordQueued(t, pool, store, 3)
	counted, err := store.RefreshCounts(ctx)
	if err != nil || !counted {
		t.Fatalf("the first RefreshCounts = %t, %v; want a count", counted, err)
	}
	saved, age, ok, err := store.SavedCounts(ctx)
	if err != nil || !ok || saved.ByKindState["sendgrid.email"]["pending"] != len(ids) || age < 0 || age > time.Minute {
		t.Fatalf("SavedCounts = %+v, %s, %t, %v; want the %d pending emails, just counted", saved, age, ok, err, len(ids))
	}
	if counted, err := store.RefreshCounts(ctx); err != nil || counted {
		t.Fatalf("a RefreshCounts right after = %t, %v; want none", counted, err)
	}
	for _, c := range []struct {
		took, age time.Duration
		counts    bool
	}{
		{took: time.Millisecond, age: 4 * time.Second},
		{took: time.Millisecond, age: 6 * time.Second, counts: true},
		{took: time.Second, age: 6 * time.Second},
		{took: time.Second, age: 11 * time.Second, counts: true},
	} {
		if _, err := pool.Exec(ctx, `UPDATE outbox_counts_saved SET took_micros = $1, counted_at = now() - $2::bigint * interval '1 microsecond'`,
			c.took.Microseconds(), c.age.Microseconds()); err != nil {
			t.Fatal(err)
		}
		counted, err := store.RefreshCounts(ctx)
		if err != nil || counted != c.counts {
			t.Errorf("RefreshCounts after a count that took %s, %s ago = %t, %v; want %t", c.took, c.age, counted, err, c.counts)
		}
	}
}
