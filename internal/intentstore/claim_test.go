package intentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// newStore is a Store on a database of the test's own.
func newStore(t *testing.T) (*pgxpool.Pool, *intentstore.Store) {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	store, err := intentstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pool, store
}

func setup(t *testing.T) (*intentstore.Store, func(id int64) intentstore.Row, int64) {
	t.Helper()
	_, store, load, id := setupOnPool(t)
	return store, load, id
}

// setupOnPool is setup, with the test database's pool.
func setupOnPool(t *testing.T) (*pgxpool.Pool, *intentstore.Store, func(id int64) intentstore.Row, int64) {
	t.Helper()
	ctx := context.Background()
	pool, store := newStore(t)
	var ib intentstore.InsertBatch
	ib.Add(intentstore.NewIntent{Key: "orders:m1", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	load := func(id int64) intentstore.Row {
		t.Helper()
		r, err := store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	return pool, store, load, ib.IDs[0]
}

// Every call happens under a claim: one claim per state the worker saw, a
// take-over of an unsettled attempt makes "may have acted" durable, and a
// late settlement from the attempt that was taken over is recorded but
// changes nothing (DESIGN.md, invariant 4).
func TestClaimsAndLateSettlements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, load, id := setup(t)
	now := time.Now()

	seen := load(id)
	first, err := store.Claim(ctx, intentstore.ClaimParams{Row: seen, ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now})
	if err != nil || first.Attempt != 1 {
		t.Fatalf("first claim = %+v, %v", first, err)
	}
	// A second worker that saw the same pending row cannot claim it.
	if _, err := store.Claim(ctx, intentstore.ClaimParams{Row: seen, ProviderKey: "x", Namespace: "ns", Now: now}); !errors.Is(err, intentstore.ErrClaimLost) {
		t.Fatalf("second claim from the same pending row = %v, want ErrClaimLost", err)
	}
	// A rescue takes the unsettled attempt over.
	held := load(id)
	if held.State != intenttype.StateDispatching || held.ClaimedAttempt != 1 || held.MayHaveActed {
		t.Fatalf("row while claimed = %+v", held)
	}
	second, err := store.Claim(ctx, intentstore.ClaimParams{Row: held, ProviderKey: "other", Namespace: "other", Now: now})
	if err != nil || second.Attempt != 2 || second.ProviderKey != "ns.0/orders:m1" {
		t.Fatalf("take-over = %+v, %v; want attempt 2 under the same key", second, err)
	}
	if r := load(id); !r.MayHaveActed || r.ClaimedAttempt != 2 {
		t.Fatalf("row after the take-over = %+v, want may have acted, held by attempt 2", r)
	}
	// The first attempt settles late, as failed: recorded, no effect.
	late, err := store.Settle(ctx, intentstore.Settlement{
		Row: held, From: intenttype.StateDispatching, Attempt: 1, To: intenttype.StateFailed,
		Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "failed", Error: "late"},
	})
	if err != nil || late.Applied || late.State != intenttype.StateDispatching {
		t.Fatalf("late settle = %+v, %v; want not applied, still dispatching", late, err)
	}
	// The holder settles.
	held2 := load(id)
	done, err := store.Settle(ctx, intentstore.Settlement{
		Row: held2, From: intenttype.StateDispatching, Attempt: 2, To: intenttype.StateInDoubt, MayHaveActed: true,
		Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "ambiguous"},
	})
	if err != nil || !done.Applied || done.State != intenttype.StateInDoubt {
		t.Fatalf("holder's settle = %+v, %v", done, err)
	}
	// A success learnt late by the first attempt is not discarded.
	adopted, err := store.Settle(ctx, intentstore.Settlement{
		Row: held, From: intenttype.StateDispatching, Attempt: 1, To: intenttype.StateSucceeded, ProviderRef: "msg_1",
		Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "succeeded", ProviderRef: "msg_1"},
	})
	if err != nil || !adopted.Applied || adopted.State != intenttype.StateSucceeded {
		t.Fatalf("late success = %+v, %v; want the in_doubt intent settled as succeeded", adopted, err)
	}
}

// The dispatcher may not make a move the state diagram does not draw.
func TestSettleRefusesTransitionsOffTheDiagram(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, load, id := setup(t)
	for _, tc := range []struct{ from, to intenttype.State }{
		{intenttype.StatePending, intenttype.StateCancelled},
		{intenttype.StateSucceeded, intenttype.StatePending},
		{intenttype.StateFailed, intenttype.StateSucceeded},
		{intenttype.StateInDoubt, intenttype.StateCancelled},
	} {
		if _, err := store.Settle(ctx, intentstore.Settlement{Row: load(id), From: tc.from, To: tc.to}); err == nil {
			t.Errorf("Settle %s -> %s: no error", tc.from, tc.to)
		}
	}
	if r := load(id); r.State != intenttype.StatePending {
		t.Fatalf("row = %+v, want untouched", r)
	}
}

// A success learnt late by an attempt that was taken over is written to
// that attempt's row as well as adopted by the intent: the audit agrees
// with the intent (the take-over had closed the row as ambiguous, for want
// of an outcome).
func TestALateSuccessIsRecordedOnItsAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, load, id := setupOnPool(t)
	now := time.Now()
	if _, err := store.Claim(ctx, intentstore.ClaimParams{Row: load(id), ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now}); err != nil {
		t.Fatal(err)
	}
	held := load(id)
	if _, err := store.Claim(ctx, intentstore.ClaimParams{Row: held, ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Settle(ctx, intentstore.Settlement{Row: load(id), From: intenttype.StateDispatching, Attempt: 2, To: intenttype.StateInDoubt, MayHaveActed: true,
		Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "ambiguous"}}); err != nil {
		t.Fatal(err)
	}
	adopted, err := store.Settle(ctx, intentstore.Settlement{Row: held, From: intenttype.StateDispatching, Attempt: 1, To: intenttype.StateSucceeded, ProviderRef: "msg_1",
		Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "succeeded", ProviderRef: "msg_1"}})
	if err != nil || adopted.State != intenttype.StateSucceeded {
		t.Fatalf("late success = %+v, %v", adopted, err)
	}
	var outcome, ref string
	if err := pool.QueryRow(ctx, `SELECT outcome, coalesce(provider_ref, '') FROM outbox_intent_attempts WHERE intent_id = $1 AND attempt = 1`, id).Scan(&outcome, &ref); err != nil {
		t.Fatal(err)
	}
	if outcome != "succeeded" || ref != "msg_1" {
		t.Fatalf("attempt 1's row: %s, %q; want succeeded with msg_1, as the intent", outcome, ref)
	}
}

// A success learnt late by an attempt that was taken over settles the
// intent whatever a later attempt of the same key made of it meanwhile:
// held by it (its call can only replay the success; its row is closed for
// want of an outcome, which it will never record) or left pending for a
// retry. A refusal learnt that late changes nothing.
func TestLateSuccessSettlesWhatALaterAttemptHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, laterLeft := range []intenttype.State{intenttype.StateDispatching, intenttype.StatePending} {
		t.Run(string(laterLeft), func(t *testing.T) {
			t.Parallel()
			pool, store, load, id := setupOnPool(t)
			now := time.Now()
			if _, err := store.Claim(ctx, intentstore.ClaimParams{Row: load(id), ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now}); err != nil {
				t.Fatal(err)
			}
			first := load(id)
			if _, err := store.Claim(ctx, intentstore.ClaimParams{Row: first, ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: now}); err != nil {
				t.Fatal(err)
			}
			if laterLeft == intenttype.StatePending {
				if _, err := store.Settle(ctx, intentstore.Settlement{Row: load(id), From: intenttype.StateDispatching, Attempt: 2, To: intenttype.StatePending,
					MayHaveActed: true, RetryIn: time.Hour, Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "retry", HTTPStatus: 503}}); err != nil {
					t.Fatal(err)
				}
			}
			refused, err := store.Settle(ctx, intentstore.Settlement{Row: first, From: intenttype.StateDispatching, Attempt: 1, To: intenttype.StateFailed,
				Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "failed", HTTPStatus: 402}})
			if err != nil || refused.Applied || refused.State != laterLeft {
				t.Fatalf("late refusal = %+v, %v; want not applied, still %s", refused, err, laterLeft)
			}
			adopted, err := store.Settle(ctx, intentstore.Settlement{Row: first, From: intenttype.StateDispatching, Attempt: 1, To: intenttype.StateSucceeded,
				ProviderRef: "pi_1", Outcome: &intentstore.AttemptOutcome{Finished: now, Outcome: "succeeded", ProviderRef: "pi_1"}})
			if err != nil || !adopted.Applied || adopted.State != intenttype.StateSucceeded {
				t.Fatalf("late success = %+v, %v; want the intent settled as succeeded", adopted, err)
			}
			r := load(id)
			if r.State != intenttype.StateSucceeded || r.Queued || r.ClaimedAttempt != 0 {
				t.Fatalf("row = %+v, want succeeded, neither queued nor claimed", r)
			}
			var open int
			var from, ref string
			if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_intent_attempts WHERE intent_id = $1 AND outcome IS NULL),
				(SELECT from_state FROM outbox_intent_events WHERE intent_id = $1 AND to_state = 'succeeded'),
				(SELECT coalesce(provider_ref, '') FROM outbox_intents WHERE id = $1)`, id).Scan(&open, &from, &ref); err != nil {
				t.Fatal(err)
			}
			if open != 0 || from != string(laterLeft) || ref != "pi_1" {
				t.Fatalf("%d attempts without an outcome, success event from %q, provider ref %q; want none, from %s, pi_1", open, from, ref, laterLeft)
			}
		})
	}
}

// Two runs of one action at once (a double click, a client's retry while
// the first is still in flight) apply it once, and both report it done:
// the second, which waited for the row lock, sees the first's event.
func TestOneActionRunTwiceAtOnceIsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store, _, id := setupOnPool(t)
	hold, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM outbox_intents WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	act := intentstore.OperatorAction{Kind: intenttype.ActionCancel, IntentID: id, Actor: "operator:ann", Reason: "withdrawn", ActionID: "req-1"}
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- store.Act(ctx, act) }()
	}
	// Both wait on the lock; then the first applies, the second finds it.
	testkit.Eventually(t, 10*time.Second, "both actions to wait for the row lock", func() bool {
		return testkit.Count(t, pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) == 2
	})
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a run of the action: %v, want both done", err)
		}
	}
	if n := testkit.Count(t, pool, `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1 AND action_id = 'req-1'`, id); n != 1 {
		t.Fatalf("%d events carry the action, want 1", n)
	}
}
