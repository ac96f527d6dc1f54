package intentstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
)

var queueRules = func() *intentstore.ClaimRules {
	return &intentstore.ClaimRules{Namespace: "ns", MaxAttempts: 3, MaxKeyLength: map[string]int{"sendgrid": 0}}
}

// recordQueued records n intents, queued as recording leaves them.
func recordQueued(t *testing.T, pool *pgxpool.Pool, store *intentstore.Store, n int) []int64 {
	t.Helper()
	var ib intentstore.InsertBatch
	for i := range n {
		ib.Add(intentstore.NewIntent{Key: fmt.Sprintf("q:%d", i), Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	}
	ctx := context.Background()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	return ib.IDs
}

// Dispatchers claiming at once share the queue: each intent is claimed by
// exactly one batch, oldest first within a batch, under a fresh attempt and
// the key the rules derive, and each claim is committed (its attempt is
// open in the table) when ClaimQueued returns.
func TestClaimQueuedClaimsEachIntentOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	ids := recordQueued(t, pool, store, 60)
	var mu sync.Mutex
	claimedBy := map[int64]int{}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			for {
				batch, err := store.ClaimQueued(ctx, queueRules(), 7, time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				if len(batch.Claimed) == 0 {
					return
				}
				if !slices.IsSortedFunc(batch.Claimed, func(a, b intentstore.Loaded) int { return int(a.Row.ID - b.Row.ID) }) {
					t.Errorf("batch not in id order: %v", batch.Claimed)
				}
				var open int
				err = pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intent_attempts WHERE intent_id = ANY($1) AND outcome IS NULL`,
					loadedIDs(batch.Claimed)).Scan(&open)
				if err != nil || open != len(batch.Claimed) {
					t.Errorf("after ClaimQueued returned, %d of its %d attempts are open (%v)", open, len(batch.Claimed), err)
				}
				mu.Lock()
				for _, l := range batch.Claimed {
					claimedBy[l.Row.ID]++
					if l.Row.State != intenttype.StatePending || l.Claim.Attempt != 1 || l.Claim.ProviderKey != intenttype.ProviderKey("ns", 0, l.Row.Key, 0) {
						t.Errorf("worker %d claimed %+v with %+v", w, l.Row, l.Claim)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		if claimedBy[id] != 1 {
			t.Errorf("intent %d claimed %d times, want once", id, claimedBy[id])
		}
	}
	var dispatching int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE state = 'dispatching' AND queued`).Scan(&dispatching); err != nil || dispatching != len(ids) {
		t.Fatalf("%d intents dispatching and queued (%v), want %d", dispatching, err, len(ids))
	}
}

func loadedIDs(ls []intentstore.Loaded) []int64 {
	var ids []int64
	for _, l := range ls {
		ids = append(ids, l.Row.ID)
	}
	return ids
}

// A batch claim whose answer is lost after it committed is released by its
// token: every intent it took is pending and queued again, its attempt
// closed as not called, and "may have acted" stays false (DESIGN.md,
// invariant 15); the intents another claim holds are left alone.
func TestALostBatchClaimIsReleasedByItsToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	ids := recordQueued(t, pool, store, 5)
	other, err := store.ClaimQueued(ctx, queueRules(), 2, time.Now())
	if err != nil || len(other.Claimed) != 2 {
		t.Fatalf("first claim = %+v, %v", other, err)
	}
	proxied, proxy := testkit.LostAckPool(t, pool)
	lossy, err := intentstore.New(proxied, nil)
	if err != nil {
		t.Fatal(err)
	}
	proxy.ArmStatement("AS claimed_id", 1)
	_, claimErr := lossy.ClaimQueued(ctx, queueRules(), 10, time.Now())
	var lost *intentstore.ClaimLostError
	if !errors.As(claimErr, &lost) {
		t.Fatalf("a claim whose answer was lost = %v, want a *ClaimLostError", claimErr)
	}
	n, err := store.ReleaseUnsent(ctx, nil, claimErr, "not called: lost")
	if err != nil || n != 3 {
		t.Fatalf("ReleaseUnsent = %d, %v; want the 3 intents the lost claim took", n, err)
	}
	for _, id := range ids {
		var state string
		var queued, acted bool
		var open, retried int
		if err := pool.QueryRow(ctx, `SELECT state, queued, may_have_acted,
			(SELECT count(*) FROM outbox_intent_attempts WHERE intent_id = i.id AND outcome IS NULL),
			(SELECT count(*) FROM outbox_intent_attempts WHERE intent_id = i.id AND outcome = 'retry')
			FROM outbox_intents i WHERE id = $1`, id).Scan(&state, &queued, &acted, &open, &retried); err != nil {
			t.Fatal(err)
		}
		held := slices.Contains(loadedIDs(other.Claimed), id)
		switch {
		case held && (state != "dispatching" || open != 1):
			t.Errorf("intent %d, held by the other claim: %s with %d open attempts, want dispatching, untouched", id, state, open)
		case !held && (state != "pending" || !queued || acted || open != 0 || retried != 1):
			t.Errorf("intent %d: %s, queued %v, may have acted %v, %d open and %d not-called attempts; want pending, queued, not acted, its attempt closed as not called",
				id, state, queued, acted, open, retried)
		}
	}
	if n, err := store.ReleaseUnsent(ctx, nil, claimErr, "again"); err != nil || n != 0 {
		t.Fatalf("releasing again = %d, %v; want nothing left", n, err)
	}
}

// The sweep hands a queued claim to River only once it is older than the
// bound: a River job (available) then takes it over; a claim started
// since is left to its worker.
func TestHandOverStaleGivesOldClaimsToRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	recordQueued(t, pool, store, 3)
	now := time.Now()
	old, err := store.ClaimQueued(ctx, queueRules(), 2, now.Add(-time.Hour))
	if err != nil || len(old.Claimed) != 2 {
		t.Fatalf("old claim = %+v, %v", old, err)
	}
	fresh, err := store.ClaimQueued(ctx, queueRules(), 1, now)
	if err != nil || len(fresh.Claimed) != 1 {
		t.Fatalf("fresh claim = %+v, %v", fresh, err)
	}
	n, err := store.HandOverStale(ctx, now.Add(-time.Minute), 100)
	if err != nil || n != 2 {
		t.Fatalf("HandOverStale = %d, %v; want the 2 old claims", n, err)
	}
	check := func(l intentstore.Loaded, queued bool, jobs int) {
		t.Helper()
		var q bool
		var j int
		if err := pool.QueryRow(ctx, `SELECT queued, (SELECT count(*) FROM river_job WHERE state = 'available'
			AND args @> jsonb_build_object('intent_id', i.id)) FROM outbox_intents i WHERE id = $1`, l.Row.ID).Scan(&q, &j); err != nil {
			t.Fatal(err)
		}
		if q != queued || j != jobs {
			t.Errorf("intent %d: queued %v with %d available jobs, want %v with %d", l.Row.ID, q, j, queued, jobs)
		}
	}
	for _, l := range old.Claimed {
		check(l, false, 1)
	}
	check(fresh.Claimed[0], true, 0)
}

// A settlement that leaves an intent pending gives it its next attempt in
// its own transaction: at once, queued (the dispatchers are notified); or
// later, by a River job scheduled at the retry time. A River job that ran
// the attempt is replaced by the later one, never left beside it.
func TestASettlementToPendingQueuesOrSchedulesTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		river   bool // the attempt ran as a River job
		retryIn time.Duration
	}{
		{name: "queued claim, later attempt", retryIn: 30 * time.Second},
		{name: "queued claim, at once"},
		{name: "River job, later attempt", river: true, retryIn: 30 * time.Second},
		{name: "River job, at once", river: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, store, load, id := setupOnPool(t)
			var jobID int64
			if tc.river {
				if err := store.Unqueue(ctx, id); err != nil {
					t.Fatal(err)
				}
				if err := store.Enqueue(ctx, []int64{id}); err != nil {
					t.Fatal(err)
				}
				if err := pool.QueryRow(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now()
					RETURNING id`).Scan(&jobID); err != nil {
					t.Fatal(err)
				}
			}
			c, err := store.Claim(ctx, intentstore.ClaimParams{Row: load(id), ProviderKey: "ns.0/orders:m1", Namespace: "ns", Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, `LISTEN "public.`+intentstore.QueueChannel+`"`); err != nil {
				t.Fatal(err)
			}
			res, err := store.Settle(ctx, intentstore.Settlement{Row: load(id), From: intenttype.StateDispatching, Attempt: c.Attempt,
				To: intenttype.StatePending, LastError: "503", RetryIn: tc.retryIn, JobID: jobID,
				Outcome: &intentstore.AttemptOutcome{Finished: time.Now(), Outcome: "retry"}})
			if err != nil || !res.Applied {
				t.Fatalf("Settle = %+v, %v", res, err)
			}
			var queued bool
			var jobs, scheduled, running int
			var wait float64
			if err := pool.QueryRow(ctx, `SELECT queued,
				(SELECT count(*) FROM river_job WHERE args @> jsonb_build_object('intent_id', i.id)),
				(SELECT count(*) FROM river_job WHERE args @> jsonb_build_object('intent_id', i.id) AND state = 'scheduled'),
				(SELECT count(*) FROM river_job WHERE id = $2),
				coalesce((SELECT extract(epoch FROM scheduled_at - now()) FROM river_job
				          WHERE args @> jsonb_build_object('intent_id', i.id) AND state = 'scheduled'), 0)
				FROM outbox_intents i WHERE id = $1`, id, jobID).Scan(&queued, &jobs, &scheduled, &running, &wait); err != nil {
				t.Fatal(err)
			}
			if tc.retryIn == 0 {
				if !queued || jobs != 0 {
					t.Fatalf("queued %v with %d jobs, want queued and no job", queued, jobs)
				}
				waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if _, err := conn.Conn().WaitForNotification(waitCtx); err != nil {
					t.Fatalf("no notification on the queue's channel: %v", err)
				}
				return
			}
			if queued || jobs != 1 || scheduled != 1 || running != 0 || wait < 20 || wait > 31 {
				t.Fatalf("queued %v, %d jobs (%d scheduled, in %.0fs), the running job left: %d; want River's alone: one job scheduled in 30s",
					queued, jobs, scheduled, wait, running)
			}
		})
	}
}

// The sweep may hand a queue's claim to River while its worker is alive
// (its settlement retried through an outage, or its clock behind the
// leader's). Its late settlement still holds the claim and applies, but
// the intent stays River's: never queued beside a live job; and a later
// attempt moves that job to its retry time rather than adding a second.
func TestALateSettlementOfAHandedOverClaimLeavesTheIntentRivers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, retryIn := range []time.Duration{0, 30 * time.Second} {
		t.Run(fmt.Sprintf("retry in %s", retryIn), func(t *testing.T) {
			t.Parallel()
			pool, store := newStore(t)
			id := recordQueued(t, pool, store, 1)[0]
			now := time.Now()
			b, err := store.ClaimQueued(ctx, queueRules(), 1, now.Add(-time.Hour))
			if err != nil || len(b.Claimed) != 1 {
				t.Fatalf("claim = %+v, %v", b, err)
			}
			if n, err := store.HandOverStale(ctx, now.Add(-time.Minute), 100); err != nil || n != 1 {
				t.Fatalf("HandOverStale = %d, %v", n, err)
			}
			l := b.Claimed[0]
			row := l.Row
			row.State, row.ClaimedAttempt, row.AttemptCount = intenttype.StateDispatching, l.Claim.Attempt, l.Claim.Attempt
			res, err := store.Settle(ctx, intentstore.Settlement{Row: row, From: intenttype.StateDispatching, Attempt: l.Claim.Attempt,
				To: intenttype.StatePending, LastError: "429", RetryIn: retryIn,
				Outcome: &intentstore.AttemptOutcome{Finished: time.Now(), Outcome: "retry", HTTPStatus: 429}})
			if err != nil || !res.Applied {
				t.Fatalf("late settlement = %+v, %v", res, err)
			}
			var queued bool
			var jobs int
			var dueIn float64
			if err := pool.QueryRow(ctx, `SELECT queued,
				(SELECT count(*) FROM river_job WHERE args @> jsonb_build_object('intent_id', i.id)),
				(SELECT extract(epoch FROM scheduled_at - now()) FROM river_job WHERE args @> jsonb_build_object('intent_id', i.id))
				FROM outbox_intents i WHERE id = $1`, id).Scan(&queued, &jobs, &dueIn); err != nil {
				t.Fatal(err)
			}
			if queued || jobs != 1 {
				t.Fatalf("queued %v with %d River jobs, want River's alone: one job", queued, jobs)
			}
			if retryIn > 0 && (dueIn < 20 || dueIn > 31) {
				t.Fatalf("the job is due in %.0fs, want it moved to the retry time (30s)", dueIn)
			}
		})
	}
}
