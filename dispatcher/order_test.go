package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// chargeThenRefund records, in one message, a charge and a refund of part of
// it that comes after it and takes its PaymentIntent id.
func (b *testBundle) chargeThenRefund(t *testing.T, chargePayload string) (charge, refund int64) {
	t.Helper()
	res, err := b.recorder.Consume(context.Background(), intents.Message{Consumer: "shop", ID: t.Name()},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			if err := rec.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Name: "charge", Payload: json.RawMessage(chargePayload)}); err != nil {
				return err
			}
			return rec.Record(intents.Intent{Kind: stripeprovider.KindRefund, Name: "refund",
				Payload: json.RawMessage(`{"amount": 200, "reason": "requested_by_customer"}`),
				After:   []intents.After{{Name: "charge", Fill: map[string]string{"payment_intent": intents.ResultProviderRef}}}})
		})
	if err != nil {
		t.Fatal(err)
	}
	return res.Intents[0].ID, res.Intents[1].ID
}

func TestRefundComesAfterItsChargeAndCarriesItsPaymentIntent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	charge, refund := b.chargeThenRefund(t, paymentPayload)
	if s := b.intent(t, refund); s.State != intenttype.StateWaiting {
		t.Fatalf("refund recorded %s, want waiting", s.State)
	}
	// The refund has no dispatch job until the charge succeeds.
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint)`, refund); n != 0 {
		t.Fatalf("the waiting refund has %d dispatch jobs", n)
	}
	b.start(t, b.config())

	c := b.waitSettled(t, charge)
	r := b.waitDone(t, refund)
	if c.State != intenttype.StateSucceeded || r.State != intenttype.StateSucceeded {
		t.Fatalf("charge %+v, refund %+v: want both succeeded", c, r)
	}
	refunds := b.stripe.Refunds()
	if len(refunds) != 1 || refunds[0].PaymentIntent != c.ProviderRef || refunds[0].Amount != 200 {
		t.Fatalf("the double's refunds = %+v, want one of 200 on %s", refunds, c.ProviderRef)
	}
	var pi stripedouble.PaymentIntent
	for _, p := range b.stripe.PaymentIntents() {
		if p.ID == c.ProviderRef {
			pi = p
		}
	}
	if pi.Created.After(refunds[0].Created) || pi.Status != "succeeded" || b.stripe.Refunded(pi.ID) != 200 {
		t.Fatalf("PaymentIntent %+v, refund %+v: the refund must come after the charge", pi, refunds[0])
	}
	if got := b.eventReasons(t, refund); !strings.Contains(got[0], "waits for intent "+strconv.FormatInt(charge, 10)) ||
		!strings.Contains(got[1], "released: intent "+strconv.FormatInt(charge, 10)) {
		t.Fatalf("refund's events %q: want recorded waiting for the charge, then released by it", got)
	}
}

func TestRefundAfterADeclinedChargeIsCancelledAndNeverSent(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	charge, refund := b.chargeThenRefund(t, declinedPayload)
	b.start(t, b.config())

	if s := b.waitSettled(t, charge); s.State != intenttype.StateFailed {
		t.Fatalf("charge = %+v, want failed", s)
	}
	r := b.waitDone(t, refund)
	want := fmt.Sprintf("intent %d (shop:%s:charge) it comes after is failed", charge, t.Name())
	if r.State != intenttype.StateCancelled || !strings.Contains(r.LastError, want) {
		t.Fatalf("refund = %+v, want cancelled saying %q", r, want)
	}
	if reasons := b.eventReasons(t, refund); !strings.Contains(reasons[len(reasons)-1], want) {
		t.Fatalf("refund's events %q, want the last to say %q", reasons, want)
	}
	if n := len(b.stripe.Refunds()); n != 0 {
		t.Fatalf("the double has %d refunds, want none", n)
	}
	// An operator sees it: the audit's detail has the reason.
	d, err := fixture.Audit(t, b.pool, b.registry).Get(context.Background(), strconv.FormatInt(refund, 10))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.After) != 1 || d.After[0].AfterID != charge || d.After[0].AfterState != intenttype.StateFailed || d.After[0].Fill["payment_intent"] != intents.ResultProviderRef {
		t.Fatalf("audit's After = %+v, want the failed charge filling payment_intent", d.After)
	}
	last := d.Events[len(d.Events)-1]
	if last.ToState != intenttype.StateCancelled || last.Actor != string(intenttype.ActorDispatcher) || !strings.Contains(last.Reason, want) {
		t.Fatalf("audit's last event %+v", last)
	}
}

// A refund that comes after an in_doubt intent waits; once an operator
// resolves that intent as succeeded, the refund is performed. The
// predecessor is an email the double accepts and then answers 500 (SendGrid
// has no key: ambiguous, in_doubt).
func TestDependentWaitsForAnInDoubtPredecessorUntilAnOperatorResolvesIt(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	pi := fixture.ForeignPaymentIntent(t, b.stripe, "other", "k", 0, 500, "cus_1")
	res, err := b.recorder.Consume(context.Background(), intents.Message{Consumer: "shop", ID: t.Name()},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			if err := rec.Record(intents.Intent{Kind: "sendgrid.email", Name: "notice", Payload: json.RawMessage(emailPayload)}); err != nil {
				return err
			}
			return rec.Record(intents.Intent{Kind: stripeprovider.KindRefund, Name: "refund",
				Payload: json.RawMessage(`{"payment_intent": "` + pi + `", "amount": 100}`), After: []intents.After{{Name: "notice"}}})
		})
	if err != nil {
		t.Fatal(err)
	}
	email, refund := res.Intents[0].ID, res.Intents[1].ID
	b.sendgrid.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 500})
	b.start(t, b.config())

	if s := b.waitSettled(t, email); s.State != intenttype.StateInDoubt {
		t.Fatalf("email = %+v, want in_doubt", s)
	}
	if s := b.intent(t, refund); s.State != intenttype.StateWaiting || len(b.stripe.Refunds()) != 0 {
		t.Fatalf("refund = %+v with %d refunds at the double while its predecessor is in_doubt, want waiting and none", s, len(b.stripe.Refunds()))
	}
	if _, err := fixture.Audit(t, b.pool, b.registry).Resolve(context.Background(), email, intenttype.StateSucceeded, "operator:ann", "found it in the activity feed"); err != nil {
		t.Fatal(err)
	}
	if s := b.waitDone(t, refund); s.State != intenttype.StateSucceeded || b.stripe.RefundsFor(refund) != 1 {
		t.Fatalf("refund = %+v, %d refunds at the double: want performed once after the resolve", s, b.stripe.RefundsFor(refund))
	}
}

// An operator who resolves an in_doubt charge as succeeded may name the
// PaymentIntent the provider shows: the refund ordered after the charge is
// then performed on it. Without one, the refund is cancelled, saying why.
func TestResolvedWithAProviderReferenceReleasesWhatFillsFromIt(t *testing.T) {
	t.Parallel()
	for _, withRef := range []bool{true, false} {
		t.Run(fmt.Sprintf("provider_ref=%v", withRef), func(t *testing.T) {
			t.Parallel()
			b := setup(t, options{})
			charge, refund := b.chargeThenRefund(t, paymentPayload)
			// The charge went in_doubt before this dispatcher started (its
			// job is gone with the attempt that left it so); the operator
			// found its PaymentIntent at Stripe.
			pi := fixture.ForeignPaymentIntent(t, b.stripe, "", "", charge, 500, "cus_1")
			if _, err := b.pool.Exec(context.Background(), `
				UPDATE outbox_intents SET state = 'in_doubt', queued = false, may_have_acted = true, attempt_count = 1 WHERE id = $1;`, charge); err != nil {
				t.Fatal(err)
			}
			if _, err := b.pool.Exec(context.Background(), `DELETE FROM river_job WHERE args @> jsonb_build_object('intent_id', $1::bigint)`, charge); err != nil {
				t.Fatal(err)
			}
			b.start(t, b.config())
			action := audit.Action{Kind: audit.ActionResolve, IntentID: charge, As: intenttype.StateSucceeded, Actor: "ann", Reason: "Stripe shows it succeeded"}
			if withRef {
				action.ProviderRef = pi
			}
			if _, err := fixture.Audit(t, b.pool, b.registry).Act(context.Background(), action); err != nil {
				t.Fatal(err)
			}
			r := b.waitDone(t, refund)
			refunds := b.stripe.Refunds()
			if !withRef {
				if r.State != intenttype.StateCancelled || !strings.Contains(r.LastError, "without a provider reference") || len(refunds) != 0 {
					t.Fatalf("refund = %+v, %d refunds at the double: want cancelled for want of a provider reference, none sent", r, len(refunds))
				}
				return
			}
			if r.State != intenttype.StateSucceeded || len(refunds) != 1 || refunds[0].PaymentIntent != pi || refunds[0].Amount != 200 {
				t.Fatalf("refund = %+v, the double's refunds %+v: want one of 200 on %s", r, refunds, pi)
			}
			if c := b.intent(t, charge); c.ProviderRef != pi {
				t.Fatalf("charge's provider reference = %q, want %q", c.ProviderRef, pi)
			}
			if reasons := b.eventReasons(t, charge); !strings.Contains(reasons[len(reasons)-1], "provider reference set: "+pi) {
				t.Fatalf("charge's events %q: want the resolve to name the reference", reasons)
			}
		})
	}
}

// inFlight wraps the Stripe double's handler: it slows each PaymentIntent
// create down and records, in the order they reach it, which intent each
// is for and how many were in flight at once.
type inFlight struct {
	mu sync.Mutex
	// now and most count all creates in flight; keyNow and keyMost those
	// of the stream under test.
	now, most       int
	keyNow, keyMost int
	order           []string
	ids             []string // the intents the creates were for, in the same order
	delay           time.Duration
	handler         http.Handler
}

func (f *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/payment_intents" {
		f.handler.ServeHTTP(w, r)
		return
	}
	_ = r.ParseForm()
	line := r.PostForm.Get("metadata[order_line]")
	stream := line != "other"
	f.mu.Lock()
	f.now++
	f.most = max(f.most, f.now)
	if stream {
		f.keyNow++
		f.keyMost = max(f.keyMost, f.keyNow)
	}
	f.order = append(f.order, line)
	f.ids = append(f.ids, r.PostForm.Get("metadata["+providers.MetadataIntentID+"]"))
	f.mu.Unlock()
	time.Sleep(f.delay)
	f.handler.ServeHTTP(w, r)
	f.mu.Lock()
	f.now--
	if stream {
		f.keyNow--
	}
	f.mu.Unlock()
}

// slowStripe puts inFlight, delaying each PaymentIntent create by delay,
// in front of the Stripe double, and returns it with a registry whose
// Stripe adapter calls through it and a recorder using that registry.
func (b *testBundle) slowStripe(t *testing.T, delay time.Duration) (*inFlight, *providers.Registry, *intents.Client) {
	t.Helper()
	slow := &inFlight{delay: delay, handler: b.stripe.Handler()}
	srv := httptest.NewServer(slow)
	t.Cleanup(srv.Close)
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(sp)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := intents.NewClient(b.pool, &intents.Config{Providers: reg})
	if err != nil {
		t.Fatal(err)
	}
	return slow, reg, rec
}

func TestOrderingKeyPerformsOneAtATimeInRecordedOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	slow, reg, rec := b.slowStripe(t, 20*time.Millisecond)
	const n = 12
	var ids []int64
	for i := range n {
		res, err := rec.Consume(context.Background(), intents.Message{Consumer: "shop", ID: fmt.Sprintf("line-%d", i)},
			func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
				return r.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, OrderingKey: "cus_1",
					Payload: json.RawMessage(fmt.Sprintf(`{"amount": %d, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true, "metadata": {"order_line": "%d"}}`, 500+i, i))})
			})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Intents[0].ID)
	}
	// And as many on keys of their own, which go in parallel with them.
	for i := range n {
		res, err := rec.Consume(context.Background(), intents.Message{Consumer: "shop", ID: fmt.Sprintf("other-%d", i)},
			func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
				return r.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, OrderingKey: fmt.Sprintf("cus_other_%d", i),
					Payload: json.RawMessage(`{"amount": 700, "currency": "usd", "customer": "cus_2", "payment_method": "pm_card_visa", "confirm": true, "metadata": {"order_line": "other"}}`)})
			})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Intents[0].ID)
	}
	cfg := b.config()
	cfg.Providers = reg
	cfg.MaxWorkers = 20
	b.start(t, cfg)
	for _, id := range ids {
		if s := b.waitDone(t, id); s.State != intenttype.StateSucceeded {
			t.Fatalf("intent %d = %+v", id, s)
		}
	}
	var mine []string
	for _, line := range slow.order {
		if line != "other" {
			mine = append(mine, line)
		}
	}
	for i, line := range mine {
		if line != strconv.Itoa(i) {
			t.Fatalf("the double saw the key's charges in the order %v, want 0..%d", mine, n-1)
		}
	}
	if slow.keyMost != 1 {
		t.Fatalf("%d of the key's charges were in flight at once, want 1", slow.keyMost)
	}
	if len(mine) != n {
		t.Fatalf("the double saw %d of the key's charges, want %d", len(mine), n)
	}
	if slow.most < 2 {
		// The other keys' charges overlap with the stream's: no global lock.
		t.Fatalf("never more than %d charge in flight: the keys did not go in parallel", slow.most)
	}
}

// waitDone waits until the intent is terminal.
func (b *testBundle) waitDone(t *testing.T, id int64) intentState {
	t.Helper()
	var s intentState
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("intent %d to finish", id), func() bool {
		s = b.intent(t, id)
		return s.State.Terminal()
	})
	return s
}

func (b *testBundle) eventReasons(t *testing.T, id int64) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT reason FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at, id`, id)
	if err != nil {
		t.Fatal(err)
	}
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return reasons
}

// Recorders keep adding to a key while the dispatcher works through it: the
// release and the recording race on the key, and none is stranded or
// overtaken.
func TestOrderingKeyHoldsWhileRecordersAndDispatcherRace(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	slow, reg, rec := b.slowStripe(t, 5*time.Millisecond)
	cfg := b.config()
	cfg.Providers = reg
	cfg.MaxWorkers = 10
	b.start(t, cfg)

	const recorders, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, recorders*each)
	for r := range recorders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := rec.Consume(context.Background(), intents.Message{Consumer: "shop", ID: fmt.Sprintf("r%d-%d", r, i)},
					func(ctx context.Context, tx pgx.Tx, rr *intents.Recorder) error {
						return rr.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, OrderingKey: "cus_busy",
							Payload: json.RawMessage(`{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true, "metadata": {"order_line": "busy"}}`)})
					})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	testkit.WaitWithin(t, &wg, 60*time.Second)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "every intent of the key to succeed", func() bool {
		return testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intents WHERE ordering_key = 'cus_busy' AND state = 'succeeded'`) == recorders*each
	})
	rows, err := b.pool.Query(context.Background(), `SELECT id::text FROM outbox_intents WHERE ordering_key = 'cus_busy' ORDER BY key_seq`)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slow.mu.Lock()
	got := slices.Clone(slow.ids)
	most := slow.keyMost
	slow.mu.Unlock()
	if !slices.Equal(got, want) || most != 1 {
		t.Fatalf("the double saw %v (at most %d at once), want %v (the key's recorded order), one at a time", got, most, want)
	}
}

// Refunds recorded by key while their charge is being performed: each
// either waits and is released by the charge's settlement, or finds the
// charge succeeded and is filled at once. None is stranded or sent early.
func TestRefundsRecordedWhileTheirChargeSettles(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	_, reg, rec := b.slowStripe(t, 30*time.Millisecond)
	res, err := rec.Consume(context.Background(), intents.Message{Consumer: "shop", ID: "charge"},
		func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
			return r.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(paymentPayload)})
		})
	if err != nil {
		t.Fatal(err)
	}
	charge := res.Intents[0]
	cfg := b.config()
	cfg.Providers = reg
	b.start(t, cfg)

	const n = 12
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // spread over the charge's call and settlement
			res, err := rec.Consume(context.Background(), intents.Message{Consumer: "shop", ID: fmt.Sprintf("refund-%d", i)},
				func(ctx context.Context, tx pgx.Tx, r *intents.Recorder) error {
					return r.Record(intents.Intent{Kind: stripeprovider.KindRefund, Payload: json.RawMessage(`{"amount": 10}`),
						After: []intents.After{{Key: charge.Key, Fill: map[string]string{"payment_intent": intents.ResultProviderRef}}}})
				})
			errs[i] = err
			if err == nil {
				ids[i] = res.Intents[0].ID
			}
		}()
	}
	testkit.WaitWithin(t, &wg, 60*time.Second)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c := b.waitDone(t, charge.ID)
	for _, id := range ids {
		if s := b.waitDone(t, id); s.State != intenttype.StateSucceeded {
			t.Fatalf("refund %d = %+v, want succeeded", id, s)
		}
	}
	refunds := b.stripe.Refunds()
	if len(refunds) != n || b.stripe.Refunded(c.ProviderRef) != 10*n {
		t.Fatalf("the double has %d refunds, %d refunded on %s; want %d of 10", len(refunds), b.stripe.Refunded(c.ProviderRef), c.ProviderRef, n)
	}
	for _, rf := range refunds {
		if rf.PaymentIntent != c.ProviderRef {
			t.Fatalf("refund %+v is not of the charge %s", rf, c.ProviderRef)
		}
	}
}

// An ordering key is never stranded (DESIGN.md, invariant 15): one message
// records, on key K, an intent after a charge that already failed (recorded
// cancelled) and then another intent of K. The second waits for its turn
// behind the first, which finished at record; it must go, not wait for a
// settlement that never comes.
func TestAnOrderingKeyIsNotStrandedBehindAnIntentRecordedCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	b.start(t, b.config())
	charge := b.record(t, stripeprovider.KindPaymentIntent, declinedPayload)
	if s := b.waitDone(t, charge); s.State != intenttype.StateFailed {
		t.Fatalf("charge = %+v, want failed", s)
	}
	var chargeKey string
	if err := b.pool.QueryRow(context.Background(), `SELECT idempotency_key FROM outbox_intents WHERE id = $1`, charge).Scan(&chargeKey); err != nil {
		t.Fatal(err)
	}
	res, err := b.recorder.Consume(context.Background(), intents.Message{Consumer: "shop", ID: t.Name()},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			if err := rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Name: "after-charge", OrderingKey: "K",
				After: []intents.After{{Key: chargeKey}}, Payload: json.RawMessage(emailPayload)}); err != nil {
				return err
			}
			return rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Name: "next-on-K", OrderingKey: "K", Payload: json.RawMessage(emailPayload)})
		})
	if err != nil {
		t.Fatal(err)
	}
	first, next := res.Intents[0].ID, res.Intents[1].ID
	if s := b.intent(t, first); s.State != intenttype.StateCancelled {
		t.Fatalf("the intent after the failed charge = %+v, want recorded cancelled", s)
	}
	if s := b.waitDone(t, next); s.State != intenttype.StateSucceeded {
		t.Fatalf("the next intent of key K = %+v, want succeeded", s)
	}
	if n := b.sendgrid.EffectsFor(next); n != 1 {
		t.Fatalf("the SendGrid double sent %d emails for it, want 1", n)
	}
	if n := b.sendgrid.EffectsFor(first); n != 0 {
		t.Fatalf("the SendGrid double sent %d emails for the cancelled one, want 0", n)
	}
}
