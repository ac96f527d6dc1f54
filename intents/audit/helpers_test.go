package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// Personal data the payloads carry: it must never leave the audit package.
const (
	receiptEmail   = "receipt.person@example.com"
	recipientEmail = "recipient.person@example.com"
)

const (
	paymentPayload = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true, "receipt_email": "` + receiptEmail + `"}`
	emailPayload   = `{"from": {"email": "shop@example.com"}, "to": [{"email": "` + recipientEmail + `"}], "subject": "Receipt", "text": "Thanks"}`
)

type testBundle struct {
	pool     *pgxpool.Pool
	registry *providers.Registry
	recorder *intents.Client
	store    *audit.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	rec, reg := fixture.Client(t, pool)
	return &testBundle{pool: pool, registry: reg, recorder: rec, store: fixture.Audit(t, pool, reg)}
}

// record records one intent for message (consumer, messageID) and returns
// its id.
func (b *testBundle) record(t *testing.T, consumer, messageID, reference, kind, payload string) int64 {
	t.Helper()
	res, err := b.recorder.Consume(context.Background(), intents.Message{Consumer: consumer, ID: messageID},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: kind, Reference: reference, Payload: json.RawMessage(payload)})
		})
	if err != nil {
		t.Fatal(err)
	}
	return res.Intents[0].ID
}

// recordN records n payments for fresh messages of consumer and returns
// their ids, oldest first.
func (b *testBundle) recordN(t *testing.T, consumer string, n int) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = b.record(t, consumer, fmt.Sprintf("%s-%d", consumer, i), "", stripeprovider.KindPaymentIntent, paymentPayload)
	}
	return ids
}

// setState puts an intent in state as the dispatcher would have left it:
// finished_at set for a terminal state, and its dispatch job completed
// unless it is pending or dispatching.
func (b *testBundle) setState(t *testing.T, id int64, state intenttype.State) {
	t.Helper()
	ctx := context.Background()
	// An in_doubt or dispatching intent's attempt may have acted; a
	// dispatching one is held by its attempt.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET state = $2, attempt_count = 1, queued = queued AND $2 IN ('pending', 'dispatching'),
		may_have_acted = $2 IN ('in_doubt', 'dispatching'),
		claimed_attempt = CASE WHEN $2 = 'dispatching' THEN 1 END,
		finished_at = CASE WHEN $2 IN ('succeeded', 'failed', 'cancelled') THEN now() END WHERE id = $1`, id, state); err != nil {
		t.Fatal(err)
	}
	// Written behind the store's back: bring its finished counts in line.
	recount(t, b.pool)
}

// snapshot is everything an operator action could change about an intent.
type snapshot struct {
	Row    string // the whole intent row as JSON
	Events int
	// Dispatchable counts what will dispatch it: the queue, if it holds
	// it, and its live River jobs.
	Dispatchable int
}

func (b *testBundle) snapshot(t *testing.T, id int64) snapshot {
	t.Helper()
	ctx := context.Background()
	var s snapshot
	if err := b.pool.QueryRow(ctx, `SELECT row_to_json(i)::text FROM outbox_intents i WHERE id = $1`, id).Scan(&s.Row); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intent_events WHERE intent_id = $1`, id).Scan(&s.Events); err != nil {
		t.Fatal(err)
	}
	if err := b.pool.QueryRow(ctx, `SELECT queued::int + (SELECT count(*) FROM river_job WHERE kind = 'outbox_dispatch'
		AND (args->>'intent_id')::bigint = $1 AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))
		FROM outbox_intents WHERE id = $1`, id).Scan(&s.Dispatchable); err != nil {
		t.Fatal(err)
	}
	return s
}

// lastEvent returns the intent's newest event.
func (b *testBundle) lastEvent(t *testing.T, id int64) intenttype.Event {
	t.Helper()
	var e intenttype.Event
	var from *string
	if err := b.pool.QueryRow(context.Background(), `SELECT id, intent_id, at, actor, from_state, to_state, reason FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at DESC, id DESC NULLS LAST LIMIT 1`, id).
		Scan(&e.ID, &e.IntentID, &e.At, &e.Actor, &from, &e.ToState, &e.Reason); err != nil {
		t.Fatal(err)
	}
	if from != nil {
		e.FromState = intenttype.State(*from)
	}
	return e
}

func ids(list []intenttype.Intent) []int64 {
	out := make([]int64, len(list))
	for i, in := range list {
		out[i] = in.ID
	}
	return out
}

// recount rebuilds the store's finished counts after a test wrote intents
// directly.
func recount(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	store, err := intentstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Recount(context.Background()); err != nil {
		t.Fatal(err)
	}
}
