package intentstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
)

// The store writes River's dispatch jobs with its own SQL, in the
// statements that need them (the sweep's, a hand-over from the queue, a
// settlement's later attempt). They must be exactly the rows River's
// InsertManyTx writes, unique key included, so that River's unique index
// keeps one live job per intent; and a later attempt's job is River's
// scheduled job, made available by River's scheduler when it is due.
func TestDispatchJobsMatchRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	var ib intentstore.InsertBatch
	for i := range 3 {
		ib.Add(intentstore.NewIntent{Key: fmt.Sprintf("orders:m%d", i), Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	ids := ib.IDs
	// Intent ids of every width hash alike.
	if _, err := pool.Exec(ctx, `ALTER TABLE outbox_intents ALTER COLUMN id RESTART WITH 9007199254740993`); err != nil {
		t.Fatal(err)
	}
	var big intentstore.InsertBatch
	big.Add(intentstore.NewIntent{Key: "orders:big", Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(`{}`), Actor: "test"})
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &big) }); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, big.IDs[0])
	for _, id := range ids {
		if err := store.Unqueue(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Enqueue(ctx, ids); err != nil {
		t.Fatal(err)
	}

	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: intentstore.DispatchArgs{IntentID: id}}
	}
	inserted, err := rc.InsertMany(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range inserted {
		if !r.UniqueSkippedAsDuplicate {
			t.Fatalf("River inserted a second live job for intent %d: its unique key differs from ours", ids[i])
		}
	}

	// A job River writes itself, for an intent id with no job, has every
	// column ours has.
	other := ids[len(ids)-1] + 1
	if _, err := rc.Insert(ctx, intentstore.DispatchArgs{IntentID: other}, nil); err != nil {
		t.Fatal(err)
	}
	want := readJob(t, pool, other)
	for _, id := range ids {
		if got := readJob(t, pool, id); got != want {
			t.Fatalf("job for intent %d:\n  ours  %+v\n  River %+v", id, got, want)
		}
	}
	var ourKey, riverKey []byte
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT sha256(convert_to('&kind=outbox_dispatch&args={"intent_id":' || $1::bigint || '}', 'UTF8'))),
		(SELECT unique_key FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint))`, other).Scan(&ourKey, &riverKey); err != nil {
		t.Fatal(err)
	}
	if string(ourKey) != string(riverKey) {
		t.Fatalf("River's unique key %x, ours %x", riverKey, ourKey)
	}

	// A later attempt's job, as a settlement schedules it, is what River
	// writes for a job scheduled then.
	id := ids[0]
	if _, err := pool.Exec(ctx, `DELETE FROM river_job`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox_intents SET queued = true WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	row, err := store.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.Claim(ctx, intentstore.ClaimParams{Row: row, ProviderKey: "ns.0/k", Namespace: "ns", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if row, err = store.Load(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Settle(ctx, intentstore.Settlement{Row: row, From: intenttype.StateDispatching, Attempt: c.Attempt,
		To: intenttype.StatePending, LastError: "503", RetryIn: time.Hour,
		Outcome: &intentstore.AttemptOutcome{Finished: time.Now(), Outcome: "retry"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Insert(ctx, intentstore.DispatchArgs{IntentID: other + 1}, &river.InsertOpts{ScheduledAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got, want := readJob(t, pool, id), readJob(t, pool, other+1); got != want {
		t.Fatalf("a later attempt's job:\n  ours  %+v\n  River %+v", got, want)
	}
}

// jobRow is the columns of a dispatch job that must not differ between
// River's insert and ours.
type jobRow struct {
	kind, queue                                   string
	priority, maxAttempts                         int16
	state                                         string
	attempt                                       int16
	metadata, tags, uniqueStates                  string
	argsMatch, unfinalized, unattempted, noErrors bool
	dueIn                                         int64 // scheduled_at - now(), in minutes
	created                                       bool
	uniqueKey                                     bool // River's ByArgs key for the args
}

func readJob(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, intentID int64) jobRow {
	t.Helper()
	var r jobRow
	err := pool.QueryRow(context.Background(), `SELECT kind, queue, priority, max_attempts, state, attempt, metadata::text, tags::text,
		unique_states::text, args = jsonb_build_object('intent_id', $1::bigint), finalized_at IS NULL, attempted_at IS NULL,
		errors IS NULL, round(extract(epoch FROM scheduled_at - now()) / 60)::bigint, created_at <= now(),
		unique_key = sha256(convert_to('&kind=outbox_dispatch&args={"intent_id":' || $1::bigint || '}', 'UTF8'))
		FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint)`, intentID).Scan(
		&r.kind, &r.queue, &r.priority, &r.maxAttempts, &r.state, &r.attempt, &r.metadata, &r.tags, &r.uniqueStates,
		&r.argsMatch, &r.unfinalized, &r.unattempted, &r.noErrors, &r.dueIn, &r.created, &r.uniqueKey)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
