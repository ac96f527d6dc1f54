package intents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// emailWithText is a valid email payload whose text is given as it appears
// between the quotes of a JSON string.
func emailWithText(text string) string {
	return `{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": "` + text + `"}`
}

type emailPayload struct {
	From    map[string]string   `json:"from"`
	To      []map[string]string `json:"to"`
	Subject string              `json:"subject"`
	Text    string              `json:"text"`
}

// TestBadBytesInAPayloadAreRefusedBeforeAnythingIsWritten: a payload
// holding invalid UTF-8, a NUL or a lone surrogate escape, given as a
// json.RawMessage, a []byte or a value to marshal, is refused by Consume
// and by RecordTx with an *IntentError naming the payload field and the
// problem; nothing is written, the handler's own writes included.
func TestBadBytesInAPayloadAreRefusedBeforeAnythingIsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for i, bad := range testkit.BadTexts() {
		payloads := map[string]any{
			"json.RawMessage": json.RawMessage(emailWithText(bad.JSON)),
			"[]byte":          []byte(emailWithText(bad.JSON)),
		}
		if bad.Raw != "" {
			payloads["marshalled struct"] = emailPayload{From: map[string]string{"email": "shop@example.com"}, To: []map[string]string{{"email": "a@example.com"}}, Subject: "s", Text: bad.Raw}
			payloads["marshalled map"] = map[string]any{"from": map[string]string{"email": "shop@example.com"}, "to": []any{map[string]string{"email": "a@example.com"}}, "subject": "s", "text": bad.Raw}
		}
		for form, payload := range payloads {
			in := intents.Intent{Kind: sendgridprovider.KindEmail, Name: "receipt", Payload: payload}
			check := func(door string, err error) {
				t.Helper()
				var intentErr *intents.IntentError
				if !errors.As(err, &intentErr) || !errors.Is(err, intents.ErrInvalidIntent) {
					t.Errorf("%s, %s, %s: %v; want an *IntentError", bad.Name, form, door, err)
					return
				}
				for _, want := range []string{"payload", `"text"`, bad.Problem} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s, %s, %s: %q does not say %s", bad.Name, form, door, err, want)
					}
				}
			}
			msg := intents.Message{Consumer: "orders", ID: fmt.Sprintf("bad-bytes-%d", i)}
			_, err := b.client.Consume(ctx, msg, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
				if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, 1)`, msg.ID); err != nil {
					return err
				}
				_ = rec.Record(in) // ignored: the transaction must fail anyway
				return nil
			})
			check("Consume", err)

			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.client.RecordTx(ctx, tx, in)
			check("RecordTx", err)
			_ = tx.Rollback(ctx)
		}
	}
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after refused payloads = %+v, want none", got)
	}

	// Good text, U+FFFD written as itself included, is recorded unchanged.
	good := emailWithText(`caf\u00e9 日本 \ud83d\ude00 \ufffd �`)
	for i, payload := range []any{json.RawMessage(good), emailPayload{From: map[string]string{"email": "shop@example.com"}, To: []map[string]string{{"email": "a@example.com"}}, Subject: "s", Text: "café \ufffd"}} {
		res, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: fmt.Sprintf("good-%d", i)}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: payload})
		})
		if err != nil || len(res.Intents) != 1 {
			t.Fatalf("good payload %d: %+v, %v", i, res, err)
		}
	}
	var text string
	if err := b.pool.QueryRow(ctx, `SELECT payload->>'text' FROM outbox_intents WHERE message_id = 'good-0'`).Scan(&text); err != nil {
		t.Fatal(err)
	}
	if text != "café 日本 😀 \ufffd \ufffd" {
		t.Errorf("stored text %q", text)
	}
}

// TestBadBytesInAMessageAreRefused: a message id or consumer name holding
// invalid UTF-8 or a NUL is refused with an error saying so, and two ids
// that differ only in their invalid bytes are both refused rather than
// collapsing into one.
func TestBadBytesInAMessageAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	noop := func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com")})
	}
	for _, bad := range testkit.BadTexts() {
		if bad.Raw == "" {
			continue
		}
		for _, msg := range []intents.Message{{Consumer: "orders", ID: bad.Raw}, {Consumer: "orders" + bad.Raw, ID: "m"}} {
			_, err := b.client.Consume(ctx, msg, noop)
			if !errors.Is(err, intents.ErrInvalidMessage) || !strings.Contains(err.Error(), bad.Problem) {
				t.Errorf("%s: Consume(%q, %q) = %v; want ErrInvalidMessage saying %s", bad.Name, msg.Consumer, msg.ID, err, bad.Problem)
			}
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.client.ConsumeTx(ctx, tx, msg, noop); !errors.Is(err, intents.ErrInvalidMessage) {
				t.Errorf("%s: ConsumeTx = %v; want ErrInvalidMessage", bad.Name, err)
			}
			_ = tx.Rollback(ctx)
			if _, err := b.client.ConsumeBatch(ctx, []intents.Message{{Consumer: "orders", ID: "fine"}, msg}, func(ctx context.Context, tx pgx.Tx, msg intents.Message, rec *intents.Recorder) error {
				return noop(ctx, tx, rec)
			}); err == nil || !strings.Contains(err.Error(), bad.Problem) {
				t.Errorf("%s: ConsumeBatch = %v; want it refused", bad.Name, err)
			}
		}
	}
	// The other strings of an intent: reference, name, kind and an explicit
	// key.
	for _, bad := range testkit.BadTexts() {
		if bad.Raw == "" {
			continue
		}
		for field, in := range map[string]intents.Intent{
			"reference": {Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com"), Reference: bad.Raw},
			"name":      {Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com"), Name: bad.Raw},
			"kind":      {Kind: sendgridprovider.KindEmail + bad.Raw, Payload: receipt("a@example.com")},
			"key":       {Kind: sendgridprovider.KindEmail, Payload: receipt("a@example.com"), Key: bad.Raw},
		} {
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.client.RecordTx(ctx, tx, in)
			_ = tx.Rollback(ctx)
			if !errors.Is(err, intents.ErrInvalidIntent) && !errors.Is(err, intents.ErrInvalidMessage) {
				t.Errorf("%s in the %s: RecordTx = %v; want it refused", bad.Name, field, err)
			}
		}
	}
	if got := b.counts(t); got != (counts{}) {
		t.Fatalf("rows after refused messages = %+v, want none", got)
	}
}
