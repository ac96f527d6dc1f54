package ingest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/testkit"
)

type countingObserver struct{ byKind map[string]int }

func (o *countingObserver) IntentsRecorded(kind string, n int) { o.byKind[kind] += n }

// TestRecordJSONNamesTheFieldAndWritesNothing: every refusal is an
// *InputError naming the field, and leaves no row behind; a good message is
// recorded once and reported to the observer once.
func TestRecordJSONNamesTheFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	client, _ := testkit.Client(t, pool)
	obs := &countingObserver{byKind: map[string]int{}}
	rec := ingest.New(client, obs)
	ctx := context.Background()
	const email = `{"kind": "sendgrid.email", "name": "e", "payload": {"from": {"email": "a@example.com"}, "to": [{"email": "b@example.com"}], "subject": "s", "text": "t"}}`

	for _, tc := range []struct {
		name, body, field string
	}{
		{"not JSON", `{"message_id": `, ""},
		{"unknown field", `{"message_id": "m", "consumer": "c", "x": 1, "intents": [` + email + `]}`, "x"},
		{"wrong type", `{"message_id": 5, "consumer": "c", "intents": [` + email + `]}`, "message_id"},
		{"two values", `{"message_id": "m", "consumer": "c", "intents": [` + email + `]} {}`, ""},
		{"no intents", `{"message_id": "m", "consumer": "c", "intents": []}`, "intents"},
		{"no message id", `{"consumer": "c", "intents": [` + email + `]}`, "message_id"},
		{"bad consumer", `{"message_id": "m", "consumer": "c c", "intents": [` + email + `]}`, "consumer"},
		{"unknown kind", `{"message_id": "m", "consumer": "c", "intents": [{"kind": "fax", "payload": {}}]}`, "intents[0].kind"},
		{"bad payload field", `{"message_id": "m", "consumer": "c", "intents": [` + email + `, {"kind": "stripe.payment_intent", "name": "p", "payload": {"amount": -1, "currency": "usd"}}]}`, "intents[1].payload.amount"},
		{"missing payload", `{"message_id": "m", "consumer": "c", "intents": [{"kind": "sendgrid.email"}]}`, "intents[0].payload"},
	} {
		_, err := rec.RecordJSON(ctx, []byte(tc.body))
		var inputErr *ingest.InputError
		if !errors.As(err, &inputErr) || !errors.Is(err, ingest.ErrInvalidInput) {
			t.Errorf("%s: error %v, want an *InputError", tc.name, err)
			continue
		}
		if inputErr.Field != tc.field {
			t.Errorf("%s: field %q, want %q (%v)", tc.name, inputErr.Field, tc.field, err)
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_intents) + (SELECT count(*) FROM outbox_processed_messages)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("refused messages left %d rows", rows)
	}

	good := []byte(`{"message_id": "m", "consumer": "c", "intents": [` + email + `]}`)
	for i, wantDup := range []bool{false, true} {
		res, err := rec.RecordJSON(ctx, good)
		if err != nil || res.Duplicate != wantDup {
			t.Fatalf("recording #%d: %+v, %v; want duplicate %v", i+1, res, err, wantDup)
		}
	}
	if obs.byKind["sendgrid.email"] != 1 || len(obs.byKind) != 1 {
		t.Errorf("observer saw %v, want one sendgrid.email", obs.byKind)
	}
}
