package cli_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// A refund recorded by `outboxd record` after its charge waits for it, and
// `intents show` says so; when an operator cancels the charge, the refund
// is cancelled too, and `intents show` says why.
func TestOrderedIntentsAsAnOperatorSeesThem(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "USER": "alice"}
	in := `{"message_id": "o1", "consumer": "billing", "intents": [` +
		`{"kind": "stripe.payment_intent", "name": "charge", "ordering_key": "cus_1", "payload": ` + paymentPayload + `},` +
		`{"kind": "stripe.refund", "name": "refund", "ordering_key": "cus_1", "payload": {"amount": 100},` +
		` "after": [{"name": "charge", "fill": {"payment_intent": "provider_ref"}}]}]}`
	if r := outboxd(t, invocation{env: env, stdin: in, args: []string{"record"}}); r.code != 0 {
		t.Fatalf("record: %s", r)
	}
	var charge, refund int64
	if err := pool.QueryRow(context.Background(), `SELECT
		(SELECT id FROM outbox_intents WHERE name = 'charge'), (SELECT id FROM outbox_intents WHERE name = 'refund')`).Scan(&charge, &refund); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) result { return outboxd(t, invocation{env: env, args: args}) }

	r := run("intents", "show", fmt.Sprint(refund))
	if r.code != 0 {
		t.Fatalf("show: %s", r)
	}
	wantContains(t, "show of the waiting refund", r.stdout, string(intenttype.StateWaiting), "ordering key", "cus_1",
		fmt.Sprintf("comes after         intent %d (billing:o1:charge), now pending, fills payment_intent from its provider_ref", charge),
		fmt.Sprintf("recorded; waits for intent %d (billing:o1:charge) to succeed", charge))

	if r := run("intents", "cancel", fmt.Sprint(charge), "--reason", "order withdrawn"); r.code != 0 {
		t.Fatalf("cancel: %s", r)
	}
	r = run("intents", "show", fmt.Sprint(refund))
	wantContains(t, "show of the cancelled refund", r.stdout, "waiting -> cancelled", "dispatcher",
		fmt.Sprintf("not performed: intent %d (billing:o1:charge) it comes after is cancelled", charge), "now cancelled")
}
