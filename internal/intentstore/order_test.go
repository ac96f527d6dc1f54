package intentstore_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
)

// Waiting intents have no job and are not stranded; a settlement decides
// the intents waiting for the one it finishes, down the chain, in its own
// transaction, and sending it again changes nothing more.
func TestSettlementReleasesAndCancelsWhatWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	var ib intentstore.InsertBatch
	add := func(key string, o *intentstore.Order) {
		ib.Add(intentstore.NewIntent{Key: key, Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test", Order: o})
	}
	add("a", nil)
	add("b", &intentstore.Order{After: []intentstore.OrderAfter{{Key: "a"}}})
	add("c", &intentstore.Order{After: []intentstore.OrderAfter{{Key: "b"}}})
	add("d", &intentstore.Order{OrderingKey: "K"})
	add("e", &intentstore.Order{OrderingKey: "K"})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	a, b, c, d, e := ib.IDs[0], ib.IDs[1], ib.IDs[2], ib.IDs[3], ib.IDs[4]
	state := func(id int64) (intenttype.State, string, int) {
		t.Helper()
		var s intenttype.State
		var lastErr string
		var jobs int
		if err := pool.QueryRow(ctx, `SELECT state, coalesce(last_error, ''), queued::int
			FROM outbox_intents i WHERE id = $1`, id).Scan(&s, &lastErr, &jobs); err != nil {
			t.Fatal(err)
		}
		return s, lastErr, jobs
	}
	for _, id := range []int64{b, c, e} {
		if s, _, queued := state(id); s != intenttype.StateWaiting || queued != 0 {
			t.Fatalf("intent %d recorded %s, queued %d, want waiting, not queued", id, s, queued)
		}
	}
	for _, id := range []int64{a, d} {
		if s, _, queued := state(id); s != intenttype.StatePending || queued != 1 {
			t.Fatalf("intent %d recorded %s, queued %d, want pending, queued", id, s, queued)
		}
	}
	// Neither the queued nor the waiting intents are River's to sweep.
	stranded, err := store.Stranded(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(stranded) != 0 {
		t.Fatalf("stranded = %v, want none", stranded)
	}

	load := func(id int64) intentstore.Row {
		r, err := store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	fail := intentstore.Settlement{Row: load(a), From: intenttype.StatePending, To: intenttype.StateFailed, LastError: "refused", Reason: "attempts exhausted"}
	if res, err := store.Settle(ctx, fail); err != nil || !res.Applied {
		t.Fatalf("settle a: %+v, %v", res, err)
	}
	for _, w := range []struct {
		id   int64
		says string
	}{{b, "intent " + itoa(a) + " (a) it comes after is failed"}, {c, "intent " + itoa(b) + " (b) it comes after is cancelled"}} {
		if s, lastErr, _ := state(w.id); s != intenttype.StateCancelled || !strings.Contains(lastErr, w.says) {
			t.Fatalf("intent %d = %s (%q), want cancelled saying %q", w.id, s, lastErr, w.says)
		}
	}
	countsExact := func(when string) {
		t.Helper()
		if kept, actual := finishedCounts(t, pool); kept != actual {
			t.Fatalf("%s: finished counts kept %q, actual %q", when, kept, actual)
		}
	}
	countsExact("after a failed and cancelled b and c")
	var events int
	count := func() int {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intent_events`).Scan(&events); err != nil {
			t.Fatal(err)
		}
		return events
	}
	before := count()
	if res, err := store.Settle(ctx, fail); err != nil || res.Applied {
		t.Fatalf("the same settlement again: %+v, %v; want not applied", res, err)
	}
	if after := count(); after != before {
		t.Fatalf("the same settlement again wrote %d events", after-before)
	}

	if s, _, _ := state(e); s != intenttype.StateWaiting {
		t.Fatalf("e = %s before d finished, want waiting", s)
	}
	done := intentstore.Settlement{Row: load(d), From: intenttype.StatePending, To: intenttype.StateSucceeded, Reason: "found"}
	if _, err := store.Settle(ctx, done); err != nil {
		t.Fatal(err)
	}
	if s, _, jobs := state(e); s != intenttype.StatePending || jobs != 1 {
		t.Fatalf("e = %s with %d jobs after d succeeded, want pending with its job", s, jobs)
	}
	countsExact("after d succeeded")

	// Recorded after an intent that already failed: cancelled at once, and
	// counted. An operator's cancel cancels what waits for it, counted too.
	var more intentstore.InsertBatch
	more.Add(intentstore.NewIntent{Key: "f", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
		Order: &intentstore.Order{After: []intentstore.OrderAfter{{Key: "a"}}}})
	more.Add(intentstore.NewIntent{Key: "g", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	more.Add(intentstore.NewIntent{Key: "h", Kind: "stripe.refund", Provider: "stripe", Payload: []byte(`{}`), Actor: "test",
		Order: &intentstore.Order{After: []intentstore.OrderAfter{{Key: "g"}}}})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &more) }); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := state(more.IDs[0]); s != intenttype.StateCancelled {
		t.Fatalf("f = %s, want recorded cancelled", s)
	}
	countsExact("after f was recorded cancelled")
	if err := store.Act(ctx, intentstore.OperatorAction{Kind: intenttype.ActionCancel, IntentID: more.IDs[1], Actor: "operator:test", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := state(more.IDs[2]); s != intenttype.StateCancelled {
		t.Fatalf("h = %s after g was cancelled, want cancelled", s)
	}
	countsExact("after an operator cancelled g and so h")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// A key no unfinished intent holds is forgotten, unless someone holds its
// row right now; used again, it starts afresh and orders as before.
func TestPruneOrderingKeysForgetsOnlyIdleKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	seq := 0
	record := func(keys ...string) []int64 {
		t.Helper()
		var ib intentstore.InsertBatch
		for _, k := range keys {
			seq++
			ib.Add(intentstore.NewIntent{Key: k + "-" + strconv.Itoa(seq), Kind: "sendgrid.email", Provider: "sendgrid",
				Payload: []byte(`{}`), Actor: "test", Order: &intentstore.Order{OrderingKey: k}})
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
			t.Fatal(err)
		}
		return ib.IDs
	}
	succeed := func(id int64) {
		t.Helper()
		r, err := store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := store.Settle(ctx, intentstore.Settlement{Row: r, From: r.State, To: intenttype.StateSucceeded, Reason: "test"}); err != nil || !res.Applied {
			t.Fatalf("settle %d: %+v, %v", id, res, err)
		}
	}
	keys := func() []string {
		t.Helper()
		rows, _ := pool.Query(ctx, `SELECT ordering_key FROM outbox_ordering_keys ORDER BY 1`)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	busy := record("busy", "busy") // the second stays unfinished
	idle := record("idle")
	held := record("held")
	succeed(busy[0])
	succeed(idle[0])
	succeed(held[0])

	// A recorder (or a release) holding "held" makes the prune pass it by.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM outbox_ordering_keys WHERE ordering_key = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.PruneOrderingKeys(ctx, 10); err != nil || n != 1 {
		t.Fatalf("PruneOrderingKeys = %d, %v; want 1 (idle only)", n, err)
	}
	if got := keys(); !slices.Equal(got, []string{"busy", "held"}) {
		t.Fatalf("keys left = %v, want [busy held]", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := store.PruneOrderingKeys(ctx, 10); err != nil || n != 1 {
		t.Fatalf("second PruneOrderingKeys = %d, %v; want 1 (held, now free)", n, err)
	}

	// Used again, the forgotten key starts afresh and still orders.
	again := record("idle", "idle")
	rows, _ := pool.Query(ctx, `SELECT state || ':' || key_seq FROM outbox_intents WHERE id = ANY($1) ORDER BY id`, again)
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(states, []string{"pending:1", "waiting:2"}) {
		t.Fatalf("the key used again: %v, want [pending:1 waiting:2]", states)
	}
	if got := keys(); !slices.Equal(got, []string{"busy", "idle"}) {
		t.Fatalf("keys = %v, want [busy idle]", got)
	}
}

// An ordered intent is written once: one "recorded" event saying how it
// was recorded, and a dispatch job only if it goes at once (never a job
// inserted and deleted again for one that waits).
func TestOrderedIntentsGetOneEventAndAJobOnlyWhenTheyGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	var ib intentstore.InsertBatch
	add := func(key string, o *intentstore.Order) {
		ib.Add(intentstore.NewIntent{Key: key, Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "consumer:shop", Order: o})
	}
	add("plain", nil)
	add("k1", &intentstore.Order{OrderingKey: "K"})
	add("k2", &intentstore.Order{OrderingKey: "K"})
	add("after-plain", &intentstore.Order{After: []intentstore.OrderAfter{{Key: "plain"}}})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"plain":       "pending recorded consumer:shop queued=true",
		"k1":          "pending recorded consumer:shop queued=true",
		"k2":          "waiting recorded; waits for the earlier intents of ordering key K to finish consumer:shop queued=false",
		"after-plain": "waiting recorded; waits for intent " + strconv.FormatInt(ib.IDs[0], 10) + " (plain) to succeed consumer:shop queued=false",
	}
	for i, key := range []string{"plain", "k1", "k2", "after-plain"} {
		var got string
		var events int
		if err := pool.QueryRow(ctx, `
			SELECT i.state || ' ' || e.reason || ' ' || e.actor || ' queued=' || i.queued ||
				(SELECT CASE WHEN count(*) > 0 THEN ' jobs=' || count(*) ELSE '' END FROM river_job WHERE args @> jsonb_build_object('intent_id', i.id)),
				(SELECT count(*) FROM outbox_intent_events WHERE intent_id = i.id)
			FROM outbox_intents i JOIN outbox_intent_events e ON e.intent_id = i.id
			WHERE i.id = $1 ORDER BY e.id DESC LIMIT 1`, ib.IDs[i]).Scan(&got, &events); err != nil {
			t.Fatal(err)
		}
		if got != want[key] || events != 1 {
			t.Errorf("%s: %q with %d events, want %q with one", key, got, events, want[key])
		}
	}
}

// A settlement that finishes the intent a recorder is ordering a new one
// behind, while the recorder's transaction is open, waits for it (on the
// ordering key's row, or on the predecessor's row the recorder locked)
// and then releases the new intent: the recorder saw the predecessor
// unfinished and made it wait, so the settlement must see it, or it would
// wait forever.
func TestAReleaseSeesWhatWasRecordedBehindItWhileItSettled(t *testing.T) {
	t.Parallel()
	after := func(first string) *intentstore.Order {
		return &intentstore.Order{After: []intentstore.OrderAfter{{Key: first}}}
	}
	for _, tc := range []struct {
		name  string
		first *intentstore.Order
		order func(first string) *intentstore.Order
		// earlier records, and commits, an intent after the first before
		// the settlement is decided.
		earlier bool
	}{
		{"ordering key", &intentstore.Order{OrderingKey: "K"}, func(string) *intentstore.Order { return &intentstore.Order{OrderingKey: "K"} }, false},
		// Nothing waited for the first when its settlement was decided:
		// the recorder's mark on its row is what makes it release.
		{"after", nil, after, false},
		// Marked already: the recorder's lock is what makes the
		// settlement wait, and see the second.
		{"after, a second", nil, after, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, store := newStore(t)
			var first intentstore.InsertBatch
			first.Add(intentstore.NewIntent{Key: "first", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
				Order: tc.first})
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &first) }); err != nil {
				t.Fatal(err)
			}
			if tc.earlier {
				var earlier intentstore.InsertBatch
				earlier.Add(intentstore.NewIntent{Key: "earlier", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
					Order: tc.order("first")})
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &earlier) }); err != nil {
					t.Fatal(err)
				}
			}
			row, err := store.Load(ctx, first.IDs[0])
			if err != nil {
				t.Fatal(err)
			}

			var next intentstore.InsertBatch
			next.Add(intentstore.NewIntent{Key: "next", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
				Order: tc.order("first")})
			waited := settleWhileRecording(t, pool, store, &next,
				intentstore.Settlement{Row: row, From: intenttype.StatePending, To: intenttype.StateSucceeded, Reason: "test"})
			var state string
			var queued bool
			if err := pool.QueryRow(ctx, `SELECT state, queued FROM outbox_intents i WHERE id = $1`, next.IDs[0]).Scan(&state, &queued); err != nil {
				t.Fatal(err)
			}
			if state != "pending" || !queued {
				t.Fatalf("the intent recorded behind the settling one is %s, queued %v, want pending, queued (settlement waited: %v)", state, queued, waited)
			}
		})
	}
}

// A chain cancelled while a recorder adds to it: Q fails while an intent is
// recorded after P, which waits for Q. The cancellation of P waits for the
// recorder, whose new intent its statement cannot see; the pass after it
// cancels the new intent too, instead of leaving it waiting forever for a
// P that will never succeed.
func TestACancelledChainTakesWhatWasRecordedOnItWhileItWasCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	var chain intentstore.InsertBatch
	chain.Add(intentstore.NewIntent{Key: "q", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	chain.Add(intentstore.NewIntent{Key: "p", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
		Order: &intentstore.Order{After: []intentstore.OrderAfter{{Key: "q"}}}})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &chain) }); err != nil {
		t.Fatal(err)
	}
	q, err := store.Load(ctx, chain.IDs[0])
	if err != nil {
		t.Fatal(err)
	}
	var d intentstore.InsertBatch
	d.Add(intentstore.NewIntent{Key: "d", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
		Order: &intentstore.Order{After: []intentstore.OrderAfter{{Key: "p"}}}})
	if !settleWhileRecording(t, pool, store, &d,
		intentstore.Settlement{Row: q, From: intenttype.StatePending, To: intenttype.StateFailed, LastError: "refused", Reason: "test"}) {
		t.Fatal("the settlement ended before the recorder committed: the cancellation of p did not wait for it")
	}
	var state, lastErr string
	if err := pool.QueryRow(ctx, `SELECT state, coalesce(last_error, '') FROM outbox_intents WHERE id = $1`, d.IDs[0]).Scan(&state, &lastErr); err != nil {
		t.Fatal(err)
	}
	if want := "intent " + itoa(chain.IDs[1]) + " (p) it comes after is cancelled"; state != "cancelled" || !strings.Contains(lastErr, want) {
		t.Fatalf("the intent recorded after p while p was cancelled is %s (%q), want cancelled saying %q", state, lastErr, want)
	}
	if kept, actual := finishedCounts(t, pool); kept != actual {
		t.Fatalf("finished counts kept %q, actual %q", kept, actual)
	}
}

// settleWhileRecording stores rec in a recorder's transaction, settles st
// while that transaction is open, and commits it once the settlement waits
// on a lock (or has ended: it did not wait, which it reports); it returns
// once the settlement has, failing the test on its error.
func settleWhileRecording(t *testing.T, pool *pgxpool.Pool, store *intentstore.Store, rec *intentstore.InsertBatch, st intentstore.Settlement) (waited bool) {
	t.Helper()
	ctx := context.Background()
	recorder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer recorder.Rollback(ctx)
	if err := store.InsertTx(ctx, recorder, rec); err != nil {
		t.Fatal(err)
	}
	settled := make(chan error, 1)
	go func() {
		_, err := store.Settle(ctx, st)
		settled <- err
	}()
	var settleErr error
	ended := false
	testkit.Eventually(t, 10*time.Second, "the settlement to wait for the recorder, or to end", func() bool {
		select {
		case settleErr = <-settled:
			ended = true
			return true
		default:
		}
		return testkit.Count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	if err := recorder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !ended {
		settleErr = <-settled
	}
	if settleErr != nil {
		t.Fatal(settleErr)
	}
	return !ended
}
