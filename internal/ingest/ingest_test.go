package ingest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

type countingObserver struct{ byKind map[string]int }

func (o *countingObserver) IntentsRecorded(kind string, n int) { o.byKind[kind] += n }

// TestRecordJSONNamesTheFieldAndWritesNothing: every refusal is an
// *InputError naming the field, and leaves no row behind; a good message is
// recorded once and reported to the observer once.
func TestRecordJSONNamesTheFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	client, _ := fixture.Client(t, pool)
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
	pool, _ := pgtest.NewDB(t)
	client, _ := fixture.Client(t, pool)
	rec := ingest.New(client, nil)
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
