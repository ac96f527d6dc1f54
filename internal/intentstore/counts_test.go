package intentstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

var countKinds = []string{"stripe.payment_intent", "sendgrid.email", "webhook.post"}

// insertIntents stores n pending intents, kinds in turn, and returns their
// ids.
func insertIntents(t *testing.T, pool *pgxpool.Pool, store *intentstore.Store, prefix string, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var ib intentstore.InsertBatch
	for i := range n {
		kind := countKinds[i%len(countKinds)]
		ib.Add(intentstore.NewIntent{Key: fmt.Sprintf("%s:%d", prefix, i), Kind: kind, Provider: "p", Payload: []byte(`{}`), Actor: "test"})
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	return ib.IDs
}

// finishedCounts reads the store's finished counts and the same counts
// taken from the intents themselves, in one snapshot.
func finishedCounts(t *testing.T, pool *pgxpool.Pool) (kept, actual string) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `
SELECT
    coalesce((SELECT string_agg(kind || '/' || state || '=' || n, ' ' ORDER BY kind, state)
              FROM (SELECT kind, state, sum(n) AS n FROM outbox_intent_counts GROUP BY 1, 2 HAVING sum(n) <> 0) c), ''),
    coalesce((SELECT string_agg(kind || '/' || state || '=' || n, ' ' ORDER BY kind, state)
              FROM (SELECT kind, state, count(*) AS n FROM outbox_intents WHERE finished_at IS NOT NULL GROUP BY 1, 2) i), '')`).
		Scan(&kept, &actual)
	if err != nil {
		t.Fatal(err)
	}
	return kept, actual
}

// The finished counts equal a count(*) GROUP BY of the intents after
// concurrent claims and settlements racing for the same intents, stale
// settlements, operator actions racing with the dispatcher, and prunes
// running meanwhile.
func TestFinishedCountsStayExactUnderConcurrentTransitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	const n = 240
	ids := insertIntents(t, pool, store, "race", n)

	// pruned forgives a settlement that found its intent gone: this test
	// prunes intents the moment they finish, so a losing settlement may
	// find the winner's intent already deleted.
	pruned := func(err error) error {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	}
	// drive settles an intent as a dispatcher worker would: claim it from
	// the row it loaded, then settle the claim. Two drivers racing for one
	// intent: one claim wins, the other is lost and settles nothing.
	drive := func(id int64, to intenttype.State) error {
		row, err := store.Load(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // finished and pruned meanwhile
		}
		if err != nil {
			return err
		}
		if row.State != intenttype.StatePending {
			return nil
		}
		c, err := store.Claim(ctx, intentstore.ClaimParams{Row: row, ProviderKey: fmt.Sprint("k", id), Namespace: "ns", Now: time.Now()})
		if errors.Is(err, intentstore.ErrClaimLost) {
			return nil
		}
		if err != nil {
			return err
		}
		row.State = intenttype.StateDispatching
		_, err = store.Settle(ctx, intentstore.Settlement{
			Row: row, From: intenttype.StateDispatching, Attempt: c.Attempt, To: to, MayHaveActed: to == intenttype.StateInDoubt,
			Outcome: &intentstore.AttemptOutcome{Finished: time.Now(), Outcome: map[intenttype.State]string{
				intenttype.StateSucceeded: "succeeded", intenttype.StateFailed: "failed", intenttype.StateInDoubt: "ambiguous"}[to]},
		})
		return pruned(err)
	}
	// operate is an operator acting on an intent in whatever state it is:
	// refusals (it moved meanwhile) are part of the race.
	operate := func(a intentstore.OperatorAction) error {
		err := store.Act(ctx, a)
		var refused *intenttype.TransitionError
		if errors.As(err, &refused) || errors.Is(err, intenttype.ErrNotFound) {
			return nil
		}
		return err
	}

	var wg sync.WaitGroup
	errs := make(chan error, 4*n+1)
	stop := make(chan struct{})
	var prunedCount int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			p, err := store.PruneIntents(ctx, 0, 7)
			if err != nil {
				errs <- fmt.Errorf("prune: %w", err)
				return
			}
			prunedCount += p
		}
	}()
	for i, id := range ids {
		wg.Add(2)
		var first, second func() error
		switch i % 4 {
		case 0: // two workers race to succeed and to fail it
			first = func() error { return drive(id, intenttype.StateSucceeded) }
			second = func() error { return drive(id, intenttype.StateFailed) }
		case 1: // a worker races an operator's cancel
			first = func() error { return drive(id, intenttype.StateSucceeded) }
			second = func() error {
				return operate(intentstore.OperatorAction{Kind: intenttype.ActionCancel, IntentID: id, Actor: "operator:ann", Reason: "race"})
			}
		case 2: // in_doubt, then an operator's resolve races a look-up's settlement
			if err := drive(id, intenttype.StateInDoubt); err != nil {
				t.Fatal(err)
			}
			row, err := store.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			first = func() error {
				return operate(intentstore.OperatorAction{Kind: intenttype.ActionResolve, IntentID: id, To: intenttype.StateSucceeded, Actor: "operator:ann", Reason: "found it"})
			}
			second = func() error {
				_, err := store.Settle(ctx, intentstore.Settlement{Row: row, From: intenttype.StateInDoubt, To: intenttype.StateFailed, Reason: "refused"})
				return pruned(err)
			}
		default: // in_doubt, then resent and performed
			if err := drive(id, intenttype.StateInDoubt); err != nil {
				t.Fatal(err)
			}
			first = func() error {
				if err := operate(intentstore.OperatorAction{Kind: intenttype.ActionResend, IntentID: id, Actor: "operator:ann", Reason: "checked"}); err != nil {
					return err
				}
				return drive(id, intenttype.StateSucceeded)
			}
			second = func() error { return drive(id, intenttype.StateFailed) }
		}
		for _, fn := range []func() error{first, second} {
			go func() {
				defer wg.Done()
				if err := fn(); err != nil {
					errs <- err
				}
			}()
		}
	}
	// Let the prunes run until the workers are done, then once more.
	var workers sync.WaitGroup
	workers.Add(1)
	go func() {
		defer workers.Done()
		for {
			var unfinished int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE finished_at IS NULL AND state <> 'in_doubt'`).Scan(&unfinished); err != nil || unfinished == 0 {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	testkit.WaitWithin(t, &workers, time.Minute)
	close(stop)
	testkit.WaitWithin(t, &wg, time.Minute)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	kept, actual := finishedCounts(t, pool)
	if kept != actual {
		t.Fatalf("finished counts kept = %q, want %q (count(*) of the intents)", kept, actual)
	}
	if prunedCount == 0 {
		t.Error("no prune ran during the race")
	}
	// A last prune of everything leaves no count behind.
	if _, err := store.PruneIntents(ctx, 0, 10*n); err != nil {
		t.Fatal(err)
	}
	if kept, actual := finishedCounts(t, pool); kept != "" || actual != "" {
		t.Fatalf("after pruning every finished intent: counts %q, intents %q", kept, actual)
	}
}

// Recount rebuilds the counts of intents written behind the store's back.
func TestRecountRebuildsCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	ids := insertIntents(t, pool, store, "raw", 9)
	if _, err := pool.Exec(ctx, `UPDATE outbox_intents SET state = 'failed', queued = false, finished_at = now() WHERE id = ANY($1)`, ids[:5]); err != nil {
		t.Fatal(err)
	}
	if kept, _ := finishedCounts(t, pool); kept != "" {
		t.Fatalf("counts before Recount = %q, want none: the update bypassed the store", kept)
	}
	if err := store.Recount(ctx); err != nil {
		t.Fatal(err)
	}
	kept, actual := finishedCounts(t, pool)
	if kept != actual || actual != "sendgrid.email/failed=2 stripe.payment_intent/failed=2 webhook.post/failed=1" {
		t.Fatalf("after Recount: counts %q, intents %q", kept, actual)
	}
}

// A claim and a retry back to pending are HOT updates: no index covers the
// columns they change, and the page has room for the new version. Only
// the move to a terminal state writes index entries.
func TestClaimsAndRetriesAreHOTUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := pgtest.NewDB(t)
	// A pool of its own, closed before the statistics are read: a backend
	// reports them when it exits.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	store, err := intentstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Few enough that every version fits on the table's one page.
	const n = 5
	ids := insertIntents(t, pool, store, "hot", n)
	for _, id := range ids {
		for _, to := range []intenttype.State{intenttype.StatePending, intenttype.StateSucceeded} {
			row, err := store.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			c, err := store.Claim(ctx, intentstore.ClaimParams{Row: row, ProviderKey: fmt.Sprint("k", id), Namespace: "ns", Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			row.State = intenttype.StateDispatching
			if _, err := store.Settle(ctx, intentstore.Settlement{Row: row, From: intenttype.StateDispatching, Attempt: c.Attempt, To: to,
				Outcome: &intentstore.AttemptOutcome{Finished: time.Now(), Outcome: "retry"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pool.Close()

	stats, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	// Per intent: claim, retry, claim, success.
	const updates, hot = 4 * n, 3 * n
	deadline := time.Now().Add(10 * time.Second)
	for {
		var upd, hotUpd int64
		if err := stats.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'outbox_intents'`).Scan(&upd, &hotUpd); err != nil {
			t.Fatal(err)
		}
		if upd >= updates {
			if hotUpd < hot {
				t.Fatalf("%d of %d updates of outbox_intents were HOT, want at least %d (every claim and retry)", hotUpd, upd, hot)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("statistics show %d updates of outbox_intents, want %d", upd, updates)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
