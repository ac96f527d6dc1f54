package intentstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
)

// skipTo makes the sequence give out next as the next intent id, as if it
// had given out every one before: a test reaches a range's end without
// recording a range's worth of intents.
func skipTo(t *testing.T, pool *pgxpool.Pool, next int64) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `SELECT setval(pg_get_serial_sequence('outbox_intents', 'id'), $1 - 1)`, next); err != nil {
		t.Fatal(err)
	}
}

// skipPast moves the sequence past the range that ends at end, makes the
// ranges after it, and records an intent there: the range is full.
func skipPast(t *testing.T, pool *pgxpool.Pool, store *intentstore.Store, end int64) int64 {
	t.Helper()
	skipTo(t, pool, end)
	if _, err := store.MakeRanges(context.Background(), smallRanges, time.Now()); err != nil {
		t.Fatal(err)
	}
	return insertIntents(t, pool, store, fmt.Sprint("past-", end), 1)[0]
}

// partitionOf names the partition of outbox_intents that holds id.
func partitionOf(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var name string
	if err := pool.QueryRow(context.Background(), `SELECT tableoid::regclass::text FROM outbox_intents WHERE id = $1`, id).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

// finishAll finishes the intents of ids as succeeded at finishedAt, as a
// dispatcher would have long ago, counted as the store counts.
func finishAll(t *testing.T, pool *pgxpool.Pool, store *intentstore.Store, finishedAt time.Time, ids []int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE outbox_intents SET state = 'succeeded', queued = false, finished_at = $2 WHERE id = ANY($1)`, ids, finishedAt); err != nil {
		t.Fatal(err)
	}
	if err := store.Recount(ctx); err != nil {
		t.Fatal(err)
	}
}

// newRangedStore is newStore with the end of the first range of ids a new
// database has (migration 017).
func newRangedStore(t *testing.T) (*pgxpool.Pool, *intentstore.Store, int64) {
	t.Helper()
	pool, store := newStore(t)
	ranges, err := store.Ranges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != 2 || ranges[1].From != 1 {
		t.Fatalf("ranges of a new database = %+v, want the first partition and one from 1", ranges)
	}
	return pool, store, ranges[1].To
}

var smallRanges = intentstore.RangeRules{Span: 24 * time.Hour, MinIDs: 100, MaxIDs: 1000}

// The ranges reach a whole range past the last id given out, each sized
// to recent recording; an id past every range goes to the default
// partition, and the next range starts after it.
func TestMakeRangesGoesAheadOfTheSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	first, err := store.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || first[1].From != 1 {
		t.Fatalf("ranges of a new database = %+v, want the first partition and one from 1", first)
	}
	if made, err := store.MakeRanges(ctx, smallRanges, time.Now()); err != nil || made != 0 {
		t.Fatalf("MakeRanges far from the end = %d, %v; want none", made, err)
	}
	end := first[1].To
	skipTo(t, pool, end-50)
	insertIntents(t, pool, store, "near-end", 10)
	if made, err := store.MakeRanges(ctx, smallRanges, time.Now()); err != nil || made != 1 {
		t.Fatalf("MakeRanges 40 ids from the end = %d, %v; want one range", made, err)
	}
	skipTo(t, pool, end)
	next := insertIntents(t, pool, store, "next", 1)[0]
	if p := partitionOf(t, pool, next); p != fmt.Sprintf("outbox_intents_from_%d", end) {
		t.Fatalf("intent %d is in %s, want the range made from %d", next, p, end)
	}
	skipTo(t, pool, end+1_000_000)
	stray := insertIntents(t, pool, store, "stray", 1)[0]
	if p := partitionOf(t, pool, stray); p != "outbox_intents_default" {
		t.Fatalf("intent %d past every range is in %s, want the default partition", stray, p)
	}
	if made, err := store.MakeRanges(ctx, smallRanges, time.Now()); err != nil || made == 0 {
		t.Fatalf("MakeRanges past every range = %d, %v; want ranges", made, err)
	}
	ranges, err := store.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last := ranges[len(ranges)-1]; last.From <= stray || last.To <= stray+1 {
		t.Fatalf("the newest range %+v does not start after the stray intent %d", last, stray)
	}
}

// Retention drops a full range whose intents all finished before the
// horizon, whole: its intents, their attempts, events and keys, counted
// out of the finished counts; a key of it can be recorded again.
func TestDropRangesDropsAFinishedRangeWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, end := newRangedStore(t)
	old := insertIntents(t, pool, store, "old", 20)
	finishAll(t, pool, store, time.Now().Add(-48*time.Hour), old)
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome) SELECT id, 1, now(), now(), 'retry' FROM outbox_intents WHERE id = ANY($1)`, old); err != nil {
		t.Fatal(err)
	}
	// The sequence moves past the first range: it is full.
	skipPast(t, pool, store, end)
	insertIntents(t, pool, store, "recent", 4)

	dropped, err := store.DropRanges(ctx, 24*time.Hour, 7)
	if err != nil {
		t.Fatal(err)
	}
	// The first partition, [MINVALUE, 1), empty, goes as well.
	if dropped.Ranges != 2 || dropped.Intents != 20 {
		t.Fatalf("dropped %+v, want the full ranges, 20 intents", dropped)
	}
	for table, want := range map[string]int{"outbox_intents": 5, "outbox_attempts": 0, "outbox_intent_keys": 5} {
		if n := testkit.Count(t, pool, "SELECT count(*) FROM "+table); n != want {
			t.Errorf("%s holds %d rows after the drop, want %d", table, n, want)
		}
	}
	if n := testkit.Count(t, pool, `SELECT count(*) FROM pg_class WHERE relname = $1`, "outbox_intents_from_1"); n != 0 {
		t.Errorf("the dropped range's partition is still there")
	}
	if kept, actual := finishedCounts(t, pool); kept != actual {
		t.Errorf("finished counts after the drop = %q, want %q", kept, actual)
	}
	again := insertIntents(t, pool, store, "old", 1) // the key old:0 again
	if len(again) != 1 {
		t.Fatal("a dropped intent's key could not be recorded again")
	}
}

// A range that still holds an unfinished intent is not dropped: its old
// finished intents are deleted row by row. A full range whose newest
// finish is within the retention is neither dropped nor pruned.
func TestARangeWithAnUnfinishedIntentIsPrunedRowByRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, end := newRangedStore(t)
	ids := insertIntents(t, pool, store, "mixed", 10)
	finishAll(t, pool, store, time.Now().Add(-48*time.Hour), ids[:9]) // the tenth stays pending
	skipPast(t, pool, store, end)
	if dropped, err := store.DropRanges(ctx, 24*time.Hour, 100); err != nil || dropped.Intents != 0 {
		t.Fatalf("DropRanges = %+v, %v; want no intent dropped", dropped, err)
	}
	if n, err := store.PruneIntents(ctx, 24*time.Hour, 100); err != nil || n != 9 {
		t.Fatalf("PruneIntents = %d, %v; want the 9 old finished intents", n, err)
	}
	if n := testkit.Count(t, pool, `SELECT count(*) FROM outbox_intent_keys`); n != 2 {
		t.Fatalf("%d keys left, want the pending intent's and the next range's", n)
	}

	recentPool, recentStore, recentEnd := newRangedStore(t)
	done := insertIntents(t, recentPool, recentStore, "done", 3)
	finishAll(t, recentPool, recentStore, time.Now().Add(-48*time.Hour), done[:2])
	finishAll(t, recentPool, recentStore, time.Now(), done[2:])
	skipPast(t, recentPool, recentStore, recentEnd)
	if dropped, err := recentStore.DropRanges(ctx, 24*time.Hour, 100); err != nil || dropped.Intents != 0 {
		t.Fatalf("DropRanges = %+v, %v; want the range kept until its last intent is old", dropped, err)
	}
	if n, err := recentStore.PruneIntents(ctx, 24*time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("PruneIntents = %d, %v; want none: the range is dropped whole later", n, err)
	}
}

// A key stays unique across ranges: recording it again in a later range
// is refused as it was in one table.
func TestAKeyIsUniqueAcrossRanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, end := newRangedStore(t)
	first := insertIntents(t, pool, store, "twice", 1)[0]
	skipPast(t, pool, store, end)
	var ib intentstore.InsertBatch
	ib.Add(intentstore.NewIntent{Key: "twice:0", Kind: "stripe.refund", Provider: "p", Payload: []byte(`{}`), Actor: "test"})
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) })
	var dup *intenttype.DuplicateKeyError
	if !errors.As(err, &dup) || dup.Key != "twice:0" {
		t.Fatalf("recording the key of intent %d again in another range: %v, want a DuplicateKeyError naming it", first, err)
	}
}

// A range is sized to a span of the recording rate the range being
// filled saw: the ids it used since its first intent, scaled.
func TestMakeRangesSizesARangeToTheSpan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, end := newRangedStore(t)
	insertIntents(t, pool, store, "first", 1) // id 1, recorded now
	skipTo(t, pool, end-100)
	insertIntents(t, pool, store, "more", 1) // the range has used end-100 ids
	rules := intentstore.RangeRules{Span: 24 * time.Hour, MinIDs: 100, MaxIDs: 1 << 40}
	// Two days after the first intent: the next range holds half of what
	// the range being filled used.
	if made, err := store.MakeRanges(ctx, rules, time.Now().Add(48*time.Hour)); err != nil || made != 1 {
		t.Fatalf("MakeRanges = %d, %v; want one range", made, err)
	}
	ranges, err := store.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, want := ranges[len(ranges)-1].To-ranges[len(ranges)-1].From, (end-100)/2
	if got < want-10 || got > want+10 {
		t.Fatalf("the new range holds %d ids, want about %d (half a range used over two days)", got, want)
	}
}
