package intents_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

var fillPI = map[string]string{"payment_intent": intents.ResultProviderRef}

func refund(after ...intents.After) intents.Intent {
	return intents.Intent{Kind: stripeprovider.KindRefund, Name: "refund", Payload: json.RawMessage(`{"amount": 200}`), After: after}
}

func charge(name string, after ...intents.After) intents.Intent {
	return intents.Intent{Kind: stripeprovider.KindPaymentIntent, Name: name, Payload: payment(500), After: after}
}

// consume records the intents for one message.
func (b *testBundle) consume(t *testing.T, id string, ins ...intents.Intent) (intents.Result, error) {
	t.Helper()
	return b.client.Consume(context.Background(), intents.Message{Consumer: "shop", ID: id},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			for _, in := range ins {
				if err := rec.Record(in); err != nil {
					return err
				}
			}
			return nil
		})
}

type orderedRow struct {
	State      intenttype.State
	WaitingFor int
	Payload    string
	LastError  string
}

func (b *testBundle) ordered(t *testing.T, id int64) orderedRow {
	t.Helper()
	var r orderedRow
	if err := b.pool.QueryRow(context.Background(), `SELECT state, waiting_for, payload::text, coalesce(last_error, '') FROM outbox_intents WHERE id = $1`, id).
		Scan(&r.State, &r.WaitingFor, &r.Payload, &r.LastError); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOrderIsRefusedAtRecordTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.consume(t, "earlier", charge("only")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ins  []intents.Intent
		// want is in the error, which is an *IntentError about intent
		// index wrapping an *OrderError that wraps cause.
		index int
		cause error
		want  []string
	}{
		{"unknown name", []intents.Intent{charge("payment"), refund(intents.After{Name: "charge", Fill: fillPI})},
			1, intents.ErrUnknownPredecessor, []string{`the 2nd intent (stripe.refund "refund")`, `after[0] (name "charge")`, "no intent of this call"}},
		{"unknown key", []intents.Intent{charge("payment"), refund(intents.After{Key: "shop:never", Fill: fillPI})},
			1, intents.ErrUnknownPredecessor, []string{`after[0] (key "shop:never")`, "no intent with this key"}},
		{"self by name", []intents.Intent{charge("payment", intents.After{Name: "payment"}), charge("other")},
			0, intents.ErrOrderCycle, []string{`the 1st intent (stripe.payment_intent "payment")`, `after[0] (name "payment")`, "cannot come after itself"}},
		{"self by key", []intents.Intent{charge("payment", intents.After{Key: "shop:self by key:payment"}), charge("other")},
			0, intents.ErrOrderCycle, []string{`(key "shop:self by key:payment")`, "cannot come after itself"}},
		{"cycle", []intents.Intent{charge("a", intents.After{Name: "c"}), charge("b", intents.After{Name: "a"}), charge("c", intents.After{Name: "b"})},
			0, intents.ErrOrderCycle, []string{`after[0] (name "c")`, `"a" after "c" after "b" after "a"`}},
		{"cycle through a key of the same message", []intents.Intent{charge("a", intents.After{Key: "shop:cycle through a key of the same message:b"}), charge("b", intents.After{Name: "a"})},
			0, intents.ErrOrderCycle, []string{"wait for each other forever"}},
		{"neither name nor key", []intents.Intent{charge("payment"), refund(intents.After{Fill: fillPI})},
			1, intents.ErrBadOrder, []string{"after[0]: set exactly one of name and key"}},
		{"unknown result", []intents.Intent{charge("payment"), refund(intents.After{Name: "payment", Fill: map[string]string{"payment_intent": "id"}})},
			1, intents.ErrBadOrder, []string{`fill.payment_intent: unknown result "id"`}},
		{"field the provider cannot fill", []intents.Intent{charge("payment"), refund(intents.After{Name: "payment", Fill: map[string]string{"amount": intents.ResultProviderRef}})},
			1, intents.ErrBadOrder, []string{"fill.amount: stripe cannot fill this field of stripe.refund"}},
		{"bad ordering key", []intents.Intent{{Kind: stripeprovider.KindPaymentIntent, Payload: payment(500), OrderingKey: "a\x00b"}},
			0, intents.ErrBadOrder, []string{"ordering_key: must be at most 200 printable characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := b.counts(t)
			_, err := b.consume(t, tc.name, tc.ins...)
			var ie *intents.IntentError
			var oe *intents.OrderError
			if !errors.As(err, &ie) || !errors.As(err, &oe) || !errors.Is(err, tc.cause) || !errors.Is(err, intents.ErrInvalidIntent) || ie.Index != tc.index {
				t.Fatalf("error %v (%T), want an IntentError about intent %d wrapping an OrderError and %v", err, err, tc.index, tc.cause)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if after := b.counts(t); after != before {
				t.Fatalf("a refused message wrote something: %+v, then %+v", before, after)
			}
		})
	}
}

// The payload of a refund whose payment_intent is filled from its charge
// is validated with a placeholder there: the rest is still checked.
func TestFilledFieldIsValidatedAsToBeFilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := refund(intents.After{Name: "payment", Fill: fillPI})
	in.Payload = json.RawMessage(`{"amount": -1}`)
	_, err := b.consume(t, "bad-amount", charge("payment"), in)
	var pe *providers.PayloadError
	if !errors.As(err, &pe) || pe.Field != "amount" {
		t.Fatalf("error %v, want the refund's amount refused", err)
	}
	// Without the fill, the missing payment_intent is refused.
	in.Payload = json.RawMessage(`{"amount": 200}`)
	in.After = []intents.After{{Name: "payment"}}
	_, err = b.consume(t, "no-fill", charge("payment"), in)
	if !errors.As(err, &pe) || pe.Field != "payment_intent" {
		t.Fatalf("error %v, want payment_intent required", err)
	}
	// A provider that is not a Filler is validated with a placeholder
	// string in the filled field.
	mail := intents.Intent{Kind: sendgridprovider.KindEmail, Name: "mail", Payload: receipt("buyer@example.com"),
		After: []intents.After{{Name: "payment", Fill: map[string]string{"subject": intents.ResultProviderRef}}}}
	if _, err := b.consume(t, "mail", charge("payment"), mail); err != nil {
		t.Fatalf("an email whose subject is filled from the charge: %v", err)
	}
}

func TestRecordedStateFollowsThePredecessors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res, err := b.consume(t, "m1", charge("charge"), refund(intents.After{Name: "charge", Fill: fillPI}))
	if err != nil {
		t.Fatal(err)
	}
	ch, rf := res.Intents[0], res.Intents[1]
	if r := b.ordered(t, rf.ID); r.State != intenttype.StateWaiting || r.WaitingFor != 1 {
		t.Fatalf("refund after a pending charge = %+v, want waiting for 1", r)
	}
	var jobs int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint)`, rf.ID).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	if jobs != 0 {
		t.Fatalf("the waiting refund has %d dispatch jobs", jobs)
	}

	// By key, from a later message: a succeeded charge fills at once.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET state = 'succeeded', queued = false, provider_ref = 'pi_123', finished_at = now() WHERE id = $1`, ch.ID); err != nil {
		t.Fatal(err)
	}
	res, err = b.consume(t, "m2", refund(intents.After{Key: ch.Key, Fill: fillPI}))
	if err != nil {
		t.Fatal(err)
	}
	if r := b.ordered(t, res.Intents[0].ID); r.State != intenttype.StatePending || !strings.Contains(r.Payload, `"payment_intent": "pi_123"`) {
		t.Fatalf("refund after a succeeded charge = %+v, want pending with the PaymentIntent filled", r)
	}

	// A failed charge: the refund is recorded cancelled, saying why.
	if _, err := b.pool.Exec(ctx, `UPDATE outbox_intents SET state = 'failed', queued = false WHERE id = $1`, ch.ID); err != nil {
		t.Fatal(err)
	}
	res, err = b.consume(t, "m3", refund(intents.After{Key: ch.Key, Fill: fillPI}))
	if err != nil {
		t.Fatal(err)
	}
	r := b.ordered(t, res.Intents[0].ID)
	if r.State != intenttype.StateCancelled || !strings.Contains(r.LastError, "(shop:m1:charge) it comes after is failed") {
		t.Fatalf("refund after a failed charge = %+v, want cancelled with the reason", r)
	}
}

func TestOrderingKeyQueuesBehindTheUnfinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var states []intenttype.State
	for _, id := range []string{"k1", "k2", "k3"} {
		in := charge("")
		in.OrderingKey = "cus_1"
		res, err := b.consume(t, id, in)
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, b.ordered(t, res.Intents[0].ID).State)
	}
	// Another key is not held up.
	in := charge("")
	in.OrderingKey = "cus_2"
	res, err := b.consume(t, "other", in)
	if err != nil {
		t.Fatal(err)
	}
	states = append(states, b.ordered(t, res.Intents[0].ID).State)
	want := []intenttype.State{intenttype.StatePending, intenttype.StateWaiting, intenttype.StateWaiting, intenttype.StatePending}
	if !slicesEqual(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// In a ConsumeBatch, an intent may come after, by key, one an earlier
// message of the batch recorded, as it could after a Consume of that
// message: it waits for it, and fills from it. A later message's key is
// not known yet, as with Consume.
func TestAfterKeyOfAnEarlierMessageInTheBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	byMessage := map[string][]intents.Intent{
		"e1": {charge("charge")},
		"e2": {refund(intents.After{Key: "shop:e1", Fill: fillPI})}, // e1 records one intent: its key is the message's
	}
	msgs := []intents.Message{{Consumer: "shop", ID: "e1"}, {Consumer: "shop", ID: "e2"}}
	record := func(_ context.Context, _ pgx.Tx, m intents.Message, rec *intents.Recorder) error {
		for _, in := range byMessage[m.ID] {
			if err := rec.Record(in); err != nil {
				return err
			}
		}
		return nil
	}
	res, err := b.client.ConsumeBatch(ctx, msgs, record)
	if err != nil {
		t.Fatal(err)
	}
	ch, rf := res[0].Intents[0], res[1].Intents[0]
	if r := b.ordered(t, rf.ID); r.State != intenttype.StateWaiting || r.WaitingFor != 1 {
		t.Fatalf("refund after the batch's own pending charge = %+v, want waiting for 1", r)
	}
	var after int64
	if err := b.pool.QueryRow(ctx, `SELECT after_id FROM outbox_intent_dependencies WHERE intent_id = $1`, rf.ID).Scan(&after); err != nil || after != ch.ID {
		t.Fatalf("the refund comes after intent %d (%v), want the charge %d", after, err, ch.ID)
	}

	// The other way round: the charge's message comes first and names the
	// refund's key, recorded by a later message. Nothing is written.
	byMessage = map[string][]intents.Intent{
		"l1": {charge("charge", intents.After{Key: "shop:l2"})},
		"l2": {charge("other")},
	}
	_, err = b.client.ConsumeBatch(ctx, []intents.Message{{Consumer: "shop", ID: "l1"}, {Consumer: "shop", ID: "l2"}}, record)
	var be *intents.BatchError
	if !errors.Is(err, intents.ErrUnknownPredecessor) || !errors.As(err, &be) || be.Index != 0 {
		t.Fatalf("ConsumeBatch naming a later message's key: %v, want ErrUnknownPredecessor for message 0", err)
	}
	var written int
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_processed_messages WHERE message_id IN ('l1', 'l2')`).Scan(&written); err != nil || written != 0 {
		t.Fatalf("%d markers of the refused batch written (%v), want none", written, err)
	}
}

// A batch's messages on one key are numbered in batch order and wait for
// each other; RecordTx orders by name within its call.
func TestOrderInABatchAndInRecordTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	msgs := []intents.Message{{Consumer: "shop", ID: "b1"}, {Consumer: "shop", ID: "b2"}, {Consumer: "shop", ID: "b3"}}
	res, err := b.client.ConsumeBatch(ctx, msgs, func(_ context.Context, _ pgx.Tx, _ intents.Message, rec *intents.Recorder) error {
		in := charge("")
		in.OrderingKey = "cus_batch"
		return rec.Record(in)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		var state intenttype.State
		var seq int64
		if err := b.pool.QueryRow(ctx, `SELECT state, key_seq FROM outbox_intents WHERE id = $1`, r.Intents[0].ID).Scan(&state, &seq); err != nil {
			t.Fatal(err)
		}
		want := intenttype.StateWaiting
		if i == 0 {
			want = intenttype.StatePending
		}
		if state != want || seq != int64(i+1) {
			t.Fatalf("message %d's intent is %s, number %d in its key; want %s, number %d", i, state, seq, want, i+1)
		}
	}

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The refund is passed first, and both share an ordering key: the key
	// numbers the charge first all the same, or each would wait for the
	// other forever.
	rf, ch := refund(intents.After{Name: "charge", Fill: fillPI}), charge("charge")
	rf.OrderingKey, ch.OrderingKey = "cus_tx", "cus_tx"
	recs, err := b.client.RecordTx(ctx, tx, rf, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := b.ordered(t, recs[0].ID); r.State != intenttype.StateWaiting || r.WaitingFor != 1 {
		t.Fatalf("refund recorded before its charge in one RecordTx = %+v, want waiting for it", r)
	}
	if r := b.ordered(t, recs[1].ID); r.State != intenttype.StatePending {
		t.Fatalf("charge = %+v, want pending (first in its key)", r)
	}
}

// RecordTx does not require distinct names, but a name an intent comes
// after must name one intent.
func TestRecordTxRefusesAnAmbiguousName(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = b.client.RecordTx(ctx, tx, charge("charge"), charge("charge"), refund(intents.After{Name: "charge", Fill: fillPI}))
	var oe *intents.OrderError
	if !errors.As(err, &oe) || !errors.Is(err, intents.ErrBadOrder) || !strings.Contains(err.Error(), `after[0] (name "charge"): several intents of this call have this name`) {
		t.Fatalf("error %v, want the ambiguous name refused", err)
	}
}
