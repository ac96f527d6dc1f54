package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

type countingObserver struct{ byKind map[string]int }

func (o *countingObserver) IntentsRecorded(kind string, n int) { o.byKind[kind] += n }

// testBundle is a test's database, its client, and a Recorder reporting to
// an observer that counts.
type testBundle struct {
	pool   *pgxpool.Pool
	client *intents.Client
	obs    *countingObserver
	rec    *ingest.Recorder
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	client, _ := fixture.Client(t, pool)
	obs := &countingObserver{byKind: map[string]int{}}
	return &testBundle{pool: pool, client: client, obs: obs, rec: ingest.New(client, obs)}
}

// TestRecordJSONNamesTheFieldAndWritesNothing: every refusal is an
// *InputError naming the field, and leaves no row behind; a good message is
// recorded once and reported to the observer once.
func TestRecordJSONNamesTheFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, obs, rec := b.pool, b.obs, b.rec
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
		{"after an unknown name", `{"message_id": "m", "consumer": "c", "intents": [` + email + `, {"kind": "stripe.refund", "name": "r", "payload": {"amount": 1}, "after": [{"name": "charge", "fill": {"payment_intent": "provider_ref"}}]}]}`, "intents[1].after[0]"},
		{"bad ordering key", `{"message_id": "m", "consumer": "c", "intents": [{"kind": "sendgrid.email", "payload": {"from": {"email": "a@example.com"}, "to": [{"email": "b@example.com"}], "subject": "s", "text": "t"}, "ordering_key": "` + strings.Repeat("k", 201) + `"}]}`, "intents[0].ordering_key"},
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

// TestBadBytesAreRefusedInEveryField puts each text the doors must refuse
// (invalid UTF-8, NUL, a lone surrogate escape) in every string of a
// message, keys included: each is an *InputError naming the field and the
// problem, and nothing is written. Two ids that differ only in their
// invalid bytes, which encoding/json would rewrite into one, are both
// refused; the id they would have become is still free.
func TestBadBytesAreRefusedInEveryField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, rec := b.pool, b.rec
	ctx := context.Background()
	const (
		to      = `"to": [{"email": "b@example.com"}]`
		payload = `{"from": {"email": "a@example.com"}, ` + to + `, "subject": "s", "text": "%s"}`
	)
	msg := func(id, consumer, kind, name, ref, text string) string {
		return `{"message_id": "` + id + `", "consumer": "` + consumer + `", "intents": [` +
			`{"kind": "sendgrid.email", "name": "first", "payload": ` + strings.Replace(payload, "%s", "t", 1) + `}, ` +
			`{"kind": "` + kind + `", "name": "` + name + `", "reference": "` + ref + `", "payload": ` + strings.Replace(payload, "%s", text, 1) + `}]}`
	}
	for _, bad := range testkit.BadTexts() {
		for _, tc := range []struct {
			body, field string
		}{
			{msg(bad.JSON, "c", "sendgrid.email", "n", "r", "t"), "message_id"},
			{msg("m", bad.JSON, "sendgrid.email", "n", "r", "t"), "consumer"},
			{msg("m", "c", bad.JSON, "n", "r", "t"), "intents[1].kind"},
			{msg("m", "c", "sendgrid.email", bad.JSON, "r", "t"), "intents[1].name"},
			{msg("m", "c", "sendgrid.email", "n", bad.JSON, "t"), "intents[1].reference"},
			{msg("m", "c", "sendgrid.email", "n", "r", bad.JSON), "intents[1].payload.text"},
			{strings.Replace(msg("m", "c", "sendgrid.email", "n", "r", "t"), `"subject"`, `"`+bad.JSON+`"`, 1), "intents[0].payload"},
			{`{"` + bad.JSON + `": 1, "message_id": "m", "consumer": "c", "intents": []}`, ""},
		} {
			_, err := rec.RecordJSON(ctx, []byte(tc.body))
			var inputErr *ingest.InputError
			if !errors.As(err, &inputErr) {
				t.Errorf("%s in %q: %v; want an *InputError", bad.Name, tc.field, err)
				continue
			}
			if inputErr.Field != tc.field || !strings.Contains(err.Error(), bad.Problem) {
				t.Errorf("%s: field %q, error %q; want field %q and %s", bad.Name, inputErr.Field, err, tc.field, bad.Problem)
			}
			if !utf8.ValidString(err.Error()) {
				t.Errorf("%s: the error text is not valid UTF-8: %q", bad.Name, err)
			}
		}
		// A Go caller of Record, past the JSON: the intents package
		// refuses the same strings.
		if bad.Raw != "" {
			for field, m := range map[string]ingest.Message{
				"message_id":              {MessageID: bad.Raw, Consumer: "c", Intents: []ingest.Intent{{Kind: "sendgrid.email", Payload: json.RawMessage(strings.Replace(payload, "%s", "t", 1))}}},
				"consumer":                {MessageID: "m", Consumer: bad.Raw, Intents: []ingest.Intent{{Kind: "sendgrid.email", Payload: json.RawMessage(strings.Replace(payload, "%s", "t", 1))}}},
				"intents[0].payload.text": {MessageID: "m", Consumer: "c", Intents: []ingest.Intent{{Kind: "sendgrid.email", Payload: json.RawMessage(strings.Replace(payload, "%s", bad.JSON, 1))}}},
			} {
				_, err := rec.Record(ctx, m)
				var inputErr *ingest.InputError
				if !errors.As(err, &inputErr) || inputErr.Field != field || !strings.Contains(err.Error(), bad.Problem) {
					t.Errorf("%s: Record with it in %s: %v; want an *InputError naming the field and %s", bad.Name, field, err, bad.Problem)
				}
			}
		}
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_intents) + (SELECT count(*) FROM outbox_processed_messages)`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("refused messages left %d rows", rows)
	}

	// "order-\xff" and "order-\xfe" would both decode to "order-\ufffd":
	// neither is recorded nor taken as a duplicate of the other, and the
	// id they would have become is recorded as itself, once.
	one := func(id string) []byte {
		return []byte(`{"message_id": "` + id + `", "consumer": "c", "intents": [{"kind": "sendgrid.email", "payload": ` + strings.Replace(payload, "%s", "t", 1) + `}]}`)
	}
	for _, id := range []string{"order-\xff", "order-\xfe", `order-\udfff`} {
		res, err := rec.RecordJSON(ctx, one(id))
		if !errors.Is(err, ingest.ErrInvalidInput) || res.Duplicate {
			t.Errorf("id %q: %+v, %v; want it refused, not a duplicate", id, res, err)
		}
	}
	for i, wantDup := range []bool{false, true} {
		res, err := rec.RecordJSON(ctx, one("order-\ufffd"))
		if err != nil || res.Duplicate != wantDup {
			t.Fatalf("recording order-\\ufffd #%d: %+v, %v; want duplicate %v", i+1, res, err, wantDup)
		}
	}
	var ids []string
	rows2, err := pool.Query(ctx, `SELECT message_id FROM outbox_processed_messages`)
	if err != nil {
		t.Fatal(err)
	}
	for rows2.Next() {
		var id string
		if err := rows2.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if rows2.Err() != nil || len(ids) != 1 || ids[0] != "order-\ufffd" {
		t.Errorf("processed markers %q (%v), want only order-\\ufffd", ids, rows2.Err())
	}
}

// TestRecordBatchRefusesABadMessageAloneAndRecordsTheRest: in one batch,
// each message Record would refuse (found before the transaction, by a
// provider in it, or when its key is stored) gets Record's *InputError and
// leaves nothing behind, duplicates (recorded before, or twice in the
// batch) are absorbed, and every other message is recorded, its intents
// reported to the observer once.
func TestRecordBatchRefusesABadMessageAloneAndRecordsTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, client, obs, rec := b.pool, b.client, b.obs, b.rec
	ctx := context.Background()
	email := ingest.Intent{Kind: "sendgrid.email", Name: "e", Payload: json.RawMessage(`{"from": {"email": "a@example.com"}, "to": [{"email": "b@example.com"}], "subject": "s", "text": "t"}`)}
	payment := ingest.Intent{Kind: "stripe.payment_intent", Name: "p", Payload: json.RawMessage(`{"amount": 500, "currency": "usd"}`)}
	msg := func(id string, in ...ingest.Intent) ingest.Message {
		return ingest.Message{MessageID: id, Consumer: "c", Intents: in}
	}
	if _, err := rec.Record(ctx, msg("before", email)); err != nil {
		t.Fatal(err)
	}
	// An intent recorded outside a consumer holds the key message "taken"
	// derives for its only intent.
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := client.RecordTx(ctx, tx, intents.Intent{Kind: "sendgrid.email", Payload: email.Payload, Key: "c:taken"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	obs.byKind = map[string]int{}

	withoutName := email
	withoutName.Name = ""
	badAmount := payment
	badAmount.Payload = json.RawMessage(`{"amount": -1, "currency": "usd"}`)
	huge := payment
	huge.Payload = json.RawMessage(`{"amount": 500, "currency": "usd", "metadata": {"n": 1e1000000}}`)
	batch := []struct {
		msg     ingest.Message
		refused string // the refused message's field; "" when recorded
		dup     bool
	}{
		/* 0 */ {msg: msg("m1", email, payment)},
		/* 1 */ {msg: msg("m2", email, badAmount), refused: "intents[1].payload.amount"},
		/* 2 */ {msg: msg("m3", ingest.Intent{Kind: "sendgrid.email"}), refused: "intents[0].payload"},
		/* 3 */ {msg: msg("m4"), refused: "intents"},
		/* 4 */ {msg: ingest.Message{MessageID: "m5", Consumer: "c c", Intents: []ingest.Intent{email}}, refused: "consumer"},
		/* 5 */ {msg: msg("m1", email), dup: true},
		/* 6 */ {msg: msg("before", email), dup: true},
		/* 7 */ {msg: msg("taken", withoutName), refused: "intents"},
		/* 8 */ {msg: msg("m9", huge), refused: "intents[0].payload.metadata.n"},
		/* 9 */ {msg: msg("m10", payment)},
		/* 10 */ {msg: msg("m2", email)}, // the refused m2 again, now good
	}
	msgs := make([]ingest.Message, len(batch))
	for i, want := range batch {
		msgs[i] = want.msg
	}
	results, err := rec.RecordBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(batch) {
		t.Fatalf("%d results for %d messages", len(results), len(batch))
	}
	for i, want := range batch {
		res := results[i]
		switch {
		case want.refused != "":
			if res.Refused == nil || res.Refused.Field != want.refused || !errors.Is(res.Refused, ingest.ErrInvalidInput) || res.Duplicate || res.Intents != nil {
				t.Errorf("message %d: %+v (%v); want it refused naming %q", i, res, res.Refused, want.refused)
			}
		case want.dup:
			if !res.Duplicate || res.Refused != nil {
				t.Errorf("message %d: %+v; want a duplicate", i, res)
			}
		case res.Refused != nil || res.Duplicate || len(res.Intents) != len(want.msg.Intents):
			t.Errorf("message %d: %+v (%v); want its %d intents recorded", i, res, res.Refused, len(want.msg.Intents))
		}
	}
	if !strings.Contains(results[1].Refused.Error(), `message "m2": the 2nd intent (stripe.payment_intent "p")`) {
		t.Errorf("m2's refusal %q does not name the message and the intent as Record does", results[1].Refused)
	}
	rows, err := pool.Query(ctx, `SELECT message_id FROM outbox_processed_messages ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	markers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var intentRows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents`).Scan(&intentRows); err != nil {
		t.Fatal(err)
	}
	// before and taken's intent, then m1's two, m10's and m2's.
	if fmt.Sprint(markers) != "[before m1 m10 m2]" || intentRows != 2+4 {
		t.Errorf("markers %v and %d intents; want [before m1 m10 m2] and 6", markers, intentRows)
	}
	if obs.byKind["sendgrid.email"] != 2 || obs.byKind["stripe.payment_intent"] != 2 || len(obs.byKind) != 2 {
		t.Errorf("observer saw %v, want 2 sendgrid.email and 2 stripe.payment_intent", obs.byKind)
	}

	// A batch of only refused messages writes nothing and tells the
	// observer nothing; an empty one does nothing.
	obs.byKind = map[string]int{}
	if results, err := rec.RecordBatch(ctx, []ingest.Message{msg("x1", badAmount), msg("x2")}); err != nil || results[0].Refused == nil || results[1].Refused == nil {
		t.Errorf("a batch of refused messages: %+v, %v", results, err)
	}
	if results, err := rec.RecordBatch(ctx, nil); err != nil || len(results) != 0 || len(obs.byKind) != 0 {
		t.Errorf("an empty batch: %+v, %v; observer %v", results, err, obs.byKind)
	}
}

// TestRecordBatchReturnsADatabaseErrorAsIs: an error that is no message's
// fault is returned as is, without results, and is no *InputError.
func TestRecordBatchReturnsADatabaseErrorAsIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool, rec := b.pool, b.rec
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	email := ingest.Intent{Kind: "sendgrid.email", Payload: json.RawMessage(`{"from": {"email": "a@example.com"}, "to": [{"email": "b@example.com"}], "subject": "s", "text": "t"}`)}
	results, err := rec.RecordBatch(ctx, []ingest.Message{{MessageID: "m", Consumer: "c", Intents: []ingest.Intent{email}}})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ingest.ErrInvalidInput) || results != nil {
		t.Errorf("RecordBatch with a cancelled context = %+v, %v; want context.Canceled, no results", results, err)
	}

	// The database refusing the batch for a reason of its own.
	if _, err := pool.Exec(context.Background(), `
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON outbox_intents FOR EACH STATEMENT EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	results, err = rec.RecordBatch(context.Background(), []ingest.Message{{MessageID: "m", Consumer: "c", Intents: []ingest.Intent{email}}})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") || errors.Is(err, ingest.ErrInvalidInput) || results != nil {
		t.Errorf("RecordBatch refused by the database = %+v, %v; want the database's error, no results", results, err)
	}
}
