package intentstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// claimedIntents records n intents and claims each, returning the store and
// the rows as their claims left them.
func claimedIntents(t *testing.T, pool *pgxpool.Pool, n int) (*Store, []Row) {
	t.Helper()
	ctx := context.Background()
	store, err := New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ib InsertBatch
	for i := range n {
		ib.Add(NewIntent{Key: fmt.Sprintf("orders:m%d", i), Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	rows := make([]Row, n)
	for i, id := range ib.IDs {
		seen, err := store.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Claim(ctx, ClaimParams{Row: seen, ProviderKey: fmt.Sprintf("ns.0/%d", id), Namespace: "ns", Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if rows[i], err = store.Load(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	return store, rows
}

// succeeded settles a claimed row's attempt as the provider's success.
func succeeded(r Row) Settlement {
	return Settlement{
		Row: r, From: intenttype.StateDispatching, Attempt: r.ClaimedAttempt, To: intenttype.StateSucceeded, MayHaveActed: true,
		ProviderRef: fmt.Sprintf("msg_%d", r.ID),
		Outcome:     &AttemptOutcome{Finished: time.Now(), Outcome: "succeeded", ProviderRef: fmt.Sprintf("msg_%d", r.ID)},
	}
}

// group runs settlements as one group, as the combiner would, and returns
// the calls with their results.
func group(store *Store, sts ...Settlement) []*call[Settlement, Settled] {
	calls := make([]*call[Settlement, Settled], len(sts))
	for i, st := range sts {
		calls[i] = &call[Settlement, Settled]{req: st}
	}
	store.settleGroup(context.Background(), calls)
	return calls
}

func states(t *testing.T, pool *pgxpool.Pool, rows []Row) []intenttype.State {
	t.Helper()
	out := make([]intenttype.State, len(rows))
	for i, r := range rows {
		if err := pool.QueryRow(context.Background(), `SELECT state FROM outbox_intents WHERE id = $1`, r.ID).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// openAttempts counts attempts of the rows still without an outcome.
func openAttempts(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_intent_attempts WHERE outcome IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// In a group, each settlement keeps its own guard: the one whose attempt no
// longer holds the claim is recorded and changes nothing, the others move
// their intents, and every caller gets its own intent's result, whatever
// order the group was formed in.
func TestSettleGroupGuardsEachSettlement(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	store, rows := claimedIntents(t, pool, 4)
	// A refusal answered to an attempt that no longer holds the claim (a
	// success would settle the intent all the same: see
	// TestLateSuccessSettlesWhatALaterAttemptHolds).
	stale := Settlement{
		Row: rows[1], From: intenttype.StateDispatching, Attempt: rows[1].ClaimedAttempt + 1, To: intenttype.StateFailed,
		LastError: "refused", Outcome: &AttemptOutcome{Finished: time.Now(), Outcome: "failed", HTTPStatus: 400},
	}
	failed := Settlement{
		Row: rows[2], From: intenttype.StateDispatching, Attempt: rows[2].ClaimedAttempt, To: intenttype.StateFailed,
		LastError: "refused", Outcome: &AttemptOutcome{Finished: time.Now(), Outcome: "failed", HTTPStatus: 400},
	}
	// Given in descending id order: the group sorts by id, results must
	// still reach their own callers.
	calls := group(store, succeeded(rows[3]), failed, stale, succeeded(rows[0]))
	want := []struct {
		applied bool
		state   intenttype.State
	}{{true, intenttype.StateSucceeded}, {true, intenttype.StateFailed}, {false, intenttype.StateDispatching}, {true, intenttype.StateSucceeded}}
	for i, cl := range calls {
		if cl.err != nil || cl.res.Applied != want[i].applied || cl.res.State != want[i].state {
			t.Errorf("settlement of intent %d = %+v, %v; want applied %v, %s", cl.req.Row.ID, cl.res, cl.err, want[i].applied, want[i].state)
		}
	}
	got := states(t, pool, rows)
	if got[0] != intenttype.StateSucceeded || got[1] != intenttype.StateDispatching || got[2] != intenttype.StateFailed || got[3] != intenttype.StateSucceeded {
		t.Fatalf("states = %v, want succeeded, dispatching (stale settlement), failed, succeeded", got)
	}
	if n := openAttempts(t, pool); n != 1 {
		t.Fatalf("%d attempts without an outcome, want 1 (the one whose settlement named another attempt)", n)
	}
}

// A settlement the database refuses (here an outcome its CHECK rejects)
// fails its group's transaction; the group then settles one by one, so the
// others land and only the bad one gets an error.
func TestSettleGroupFallsBackWhenOneSettlementFails(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	store, rows := claimedIntents(t, pool, 3)
	bad := succeeded(rows[1])
	bad.Outcome.Outcome = "maybe"
	calls := group(store, succeeded(rows[0]), bad, succeeded(rows[2]))
	for i, cl := range calls {
		if i == 1 {
			if cl.err == nil || !strings.Contains(cl.err.Error(), "outbox_intents_attempt_check") {
				t.Errorf("bad settlement = %+v, %v; want the CHECK's error", cl.res, cl.err)
			}
			continue
		}
		if cl.err != nil || !cl.res.Applied || cl.res.State != intenttype.StateSucceeded {
			t.Errorf("settlement of intent %d = %+v, %v; want applied, succeeded", cl.req.Row.ID, cl.res, cl.err)
		}
	}
	got := states(t, pool, rows)
	if got[0] != intenttype.StateSucceeded || got[1] != intenttype.StateDispatching || got[2] != intenttype.StateSucceeded {
		t.Fatalf("states = %v, want succeeded, dispatching (refused), succeeded", got)
	}
}

// cutter terminates the backend of the connection that is about to send
// the first batch of more than minQueries statements, once.
type cutter struct {
	admin      *pgxpool.Pool
	minQueries int
	armed      atomic.Bool
	cuts       atomic.Int32
}

func (c *cutter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *cutter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (c *cutter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *cutter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (c *cutter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if data.Batch.Len() > c.minQueries && c.armed.CompareAndSwap(true, false) {
		// Waits until the backend is gone: the batch meets a dead
		// connection.
		if _, err := c.admin.Exec(context.WithoutCancel(ctx), `SELECT pg_terminate_backend($1, 5000)`, conn.PgConn().PID()); err == nil {
			c.cuts.Add(1)
		}
	}
	return ctx
}

// A group whose connection dies as it is sent is sent again on another
// connection: every outcome in it is recorded once, none is lost
// (DESIGN.md, invariant 7).
func TestSettleGroupSurvivesALostConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin, url := pgtest.NewDB(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cut := &cutter{admin: admin, minQueries: 4}
	cfg.ConnConfig.Tracer = cut
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, rows := claimedIntents(t, pool, 5)
	sts := make([]Settlement, len(rows))
	for i, r := range rows {
		sts[i] = succeeded(r)
	}
	cut.armed.Store(true)
	calls := group(store, sts...)
	if n := cut.cuts.Load(); n != 1 {
		t.Fatalf("%d connections cut, want 1", n)
	}
	for _, cl := range calls {
		if cl.err != nil || !cl.res.Applied || cl.res.State != intenttype.StateSucceeded {
			t.Errorf("settlement of intent %d = %+v, %v; want applied, succeeded", cl.req.Row.ID, cl.res, cl.err)
		}
	}
	for i, s := range states(t, admin, rows) {
		if s != intenttype.StateSucceeded {
			t.Errorf("intent %d is %s, want succeeded", rows[i].ID, s)
		}
	}
	if n := openAttempts(t, admin); n != 0 {
		t.Fatalf("%d attempts without an outcome, want none", n)
	}
}

// Settlements made while every lane is busy wait for one, then share one
// transaction, and each caller gets its own result.
func TestConcurrentSettlementsShareTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	const n = 40
	store, rows := claimedIntents(t, pool, n)
	var sizes []int
	store.settles.lanes = 1
	run := store.settles.run
	store.settles.run = func(ctx context.Context, group []*call[Settlement, Settled]) {
		if len(sizes) == 0 {
			// Hold the first group until every other settlement waits.
			deadline := time.Now().Add(20 * time.Second)
			for queued := 0; queued < n-len(group); {
				if time.Now().After(deadline) {
					panic(fmt.Sprintf("only %d settlements queued behind the first group", queued))
				}
				time.Sleep(time.Millisecond)
				store.settles.mu.Lock()
				queued = len(store.settles.queue)
				store.settles.mu.Unlock()
			}
		}
		sizes = append(sizes, len(group)) // groups run one at a time
		run(ctx, group)
	}
	var wg sync.WaitGroup
	results := make([]Settled, n)
	errs := make([]error, n)
	for i, r := range rows {
		wg.Go(func() { results[i], errs[i] = store.Settle(ctx, succeeded(r)) })
	}
	wg.Wait()
	for i := range rows {
		if errs[i] != nil || !results[i].Applied || results[i].State != intenttype.StateSucceeded {
			t.Errorf("settlement %d = %+v, %v", i, results[i], errs[i])
		}
	}
	var refs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE state = 'succeeded' AND provider_ref = 'msg_' || id`).Scan(&refs); err != nil {
		t.Fatal(err)
	}
	if refs != n {
		t.Fatalf("%d intents succeeded with their own provider_ref, want %d", refs, n)
	}
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n-1 {
		t.Fatalf("groups of %v, want the first alone and then the %d that waited for it together", sizes, n-1)
	}
}

// A settlement decided before an intent was recorded after its intent
// skips the release; its guard then fails on the recorder's mark, and the
// group runs it again with the release: the outcome lands, and what now
// waits for the intent is released.
func TestSettleGroupReleasesWhatWasRecordedAfterTheDecision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	store, rows := claimedIntents(t, pool, 2)
	var after InsertBatch
	after.Add(NewIntent{Key: "refund", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test",
		Order: &Order{After: []OrderAfter{{Key: rows[0].Key}}}})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &after) }); err != nil {
		t.Fatal(err)
	}
	calls := group(store, succeeded(rows[0]), succeeded(rows[1])) // rows as loaded before the refund
	for _, cl := range calls {
		if cl.err != nil || !cl.res.Applied || cl.res.State != intenttype.StateSucceeded {
			t.Fatalf("settlement of intent %d = %+v, %v; want applied, succeeded", cl.req.Row.ID, cl.res, cl.err)
		}
	}
	var state string
	var queued bool
	if err := pool.QueryRow(ctx, `SELECT state, queued FROM outbox_intents i WHERE id = $1`, after.IDs[0]).Scan(&state, &queued); err != nil {
		t.Fatal(err)
	}
	if state != "pending" || !queued {
		t.Fatalf("the intent recorded after the settled one is %s, queued %v, want released: pending, queued", state, queued)
	}
}
