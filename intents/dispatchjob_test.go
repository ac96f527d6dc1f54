package intents_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// Consume writes dispatch jobs with its own SQL, in the statement that
// stores the intents. They must be exactly the rows River's InsertManyTx
// writes, unique key included, so that River's unique index keeps one live
// job per intent (the sweep's re-enqueue relies on it).
func TestDispatchJobsMatchRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var ids []int64
	for _, id := range []string{"m1", "m2", "m3"} {
		res, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: id}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Intents[0].ID)
	}
	// Several intents in one statement (a batch, or a message recording
	// several) take the array form of the statement.
	batch, err := b.client.ConsumeBatch(ctx, []intents.Message{{Consumer: "orders", ID: "b1"}, {Consumer: "orders", ID: "b2"}}, batchOrderHandler)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range batch {
		for _, in := range r.Intents {
			ids = append(ids, in.ID)
		}
	}
	// Intent ids of every width hash alike.
	if _, err := b.pool.Exec(ctx, `ALTER TABLE outbox_intents ALTER COLUMN id RESTART WITH 9007199254740993`); err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "big"}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
	})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, res.Intents[0].ID)

	rc, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
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
	const columns = `kind, queue, priority, max_attempts, state, attempt, metadata::text, tags::text, unique_states::text,
		args = jsonb_build_object('intent_id', $1::bigint), finalized_at IS NULL, attempted_at IS NULL, errors IS NULL,
		scheduled_at <= now(), created_at <= now()`
	type row struct {
		kind, queue                                   string
		priority, maxAttempts                         int16
		state                                         string
		attempt                                       int16
		metadata, tags, uniqueStates                  string
		argsMatch, unfinalized, unattempted, noErrors bool
		scheduled, created                            bool
	}
	read := func(intentID int64) row {
		var r row
		err := b.pool.QueryRow(ctx, `SELECT `+columns+` FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint)`, intentID).Scan(
			&r.kind, &r.queue, &r.priority, &r.maxAttempts, &r.state, &r.attempt, &r.metadata, &r.tags, &r.uniqueStates,
			&r.argsMatch, &r.unfinalized, &r.unattempted, &r.noErrors, &r.scheduled, &r.created)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	want := read(other)
	for _, id := range ids {
		if got := read(id); got != want {
			t.Fatalf("job for intent %d:\n  ours  %+v\n  River %+v", id, got, want)
		}
	}
	var ourKey, riverKey []byte
	if err := b.pool.QueryRow(ctx, `SELECT
		(SELECT sha256(convert_to('&kind=outbox_dispatch&args={"intent_id":' || $1::bigint || '}', 'UTF8'))),
		(SELECT unique_key FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint))`, other).Scan(&ourKey, &riverKey); err != nil {
		t.Fatal(err)
	}
	if string(ourKey) != string(riverKey) {
		t.Fatalf("River's unique key %x, ours %x", riverKey, ourKey)
	}
}

// Recording wakes listening dispatchers as River's own insert does: a
// notification on River's insert channel naming the dispatch queue, sent
// when the transaction commits.
func TestConsumeNotifiesDispatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN "public.river_insert"`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "m1"}, orderHandler("order-1")); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	if n.Payload != `{"queue": "outbox"}` {
		t.Fatalf("notification payload %q", n.Payload)
	}
}
