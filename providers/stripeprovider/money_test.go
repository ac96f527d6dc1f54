package stripeprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

const moneyNS = "ns-money"

// moneyReq is a request of kind with the namespace and a key derived from
// name, first used now.
func moneyReq(id int64, kind, name, payload string) providers.Request {
	return providers.Request{IntentID: id, Namespace: moneyNS, IdempotencyKey: moneyNS + ":" + name, KeyFirstUsedAt: time.Now(),
		Kind: kind, Payload: json.RawMessage(payload), Attempt: 1}
}

// charge performs a charge (manual: an authorisation) and returns its id.
func charge(t *testing.T, p *stripeprovider.Provider, id int64, amount string, manual bool) string {
	t.Helper()
	pl := `{"amount": ` + amount + `, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true`
	if manual {
		pl += `, "capture_method": "manual"`
	}
	res, err := p.Perform(context.Background(), moneyReq(id, stripeprovider.KindPaymentIntent, "charge-"+amount+"-"+time.Now().String(), pl+"}"))
	if err != nil {
		t.Fatalf("charge: %v", err)
	}
	return res.ProviderRef
}

func TestValidateMoneyKinds(t *testing.T) {
	_, p := setup(t)
	valid := map[string]string{
		`{"payment_intent": "pi_123", "amount": 500, "reason": "requested_by_customer", "metadata": {"order": "7"}}`: stripeprovider.KindRefund,
		`{"payment_intent": "pi_123"}`: stripeprovider.KindRefund,
		`{"payment_intent": "pi_123", "amount_to_capture": 500, "metadata": {"o": "7"}}`: stripeprovider.KindCapture,
		`{"payment_intent": "pi_123", "cancellation_reason": "abandoned"}`:               stripeprovider.KindCancel,
	}
	for payload, kind := range valid {
		if err := p.Validate(kind, json.RawMessage(payload)); err != nil {
			t.Errorf("%s %s: %v", kind, payload, err)
		}
	}
	for _, tc := range []struct{ kind, payload, field string }{
		{stripeprovider.KindRefund, `{"amount": 500}`, "payment_intent"},
		{stripeprovider.KindRefund, `{"payment_intent": "ch_123"}`, "payment_intent"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1 2"}`, "payment_intent"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "amount": 0}`, "amount"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "amount": -3}`, "amount"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "amount": 100000000}`, "amount"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "amount": 99999999999999999999}`, "amount"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "amount": 1.5}`, "amount"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "reason": "abandoned"}`, "reason"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "metadata": {"outbox_key": "k"}}`, "metadata.outbox_key"},
		{stripeprovider.KindRefund, `{"payment_intent": "pi_1", "currency": "usd"}`, "currency"},
		{stripeprovider.KindCapture, `{}`, "payment_intent"},
		{stripeprovider.KindCapture, `{"payment_intent": "pi_1", "amount_to_capture": 0}`, "amount_to_capture"},
		{stripeprovider.KindCapture, `{"payment_intent": "pi_1", "metadata": {"intent_id": "1"}}`, "metadata.intent_id"},
		{stripeprovider.KindCapture, `{"payment_intent": "pi_1", "metadata": {"outbox_capture_key": "k"}}`, "metadata.outbox_capture_key"},
		{stripeprovider.KindCancel, `{"payment_intent": "pi_1", "cancellation_reason": "bored"}`, "cancellation_reason"},
		{stripeprovider.KindCancel, `{"payment_intent": "pi_1", "metadata": {"a": "b"}}`, "metadata"},
		{stripeprovider.KindCancel, `{"payment_intent": ""}`, "payment_intent"},
	} {
		err := p.Validate(tc.kind, json.RawMessage(tc.payload))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != tc.field || pe.Kind != tc.kind {
			t.Errorf("%s %s: %v, want a PayloadError naming %q", tc.kind, tc.payload, err, tc.field)
		}
	}
}

func TestRefundOnceAfterALostResponse(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	pi := charge(t, p, 1, "2000", false)
	r := moneyReq(2, stripeprovider.KindRefund, "refund-1", `{"payment_intent": "`+pi+`", "amount": 1500, "reason": "requested_by_customer"}`)

	// A provider of its own, so the refund goes out on a fresh connection:
	// net/http resends a keyed request that failed on a reused one.
	fresh, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL()})
	if err != nil {
		t.Fatal(err)
	}
	d.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
	_, err = fresh.Perform(ctx, r)
	ae := attemptErr(t, err)
	if ae.Outcome != providers.OutcomeRetry || ae.DidNotAct {
		t.Fatalf("lost response classified %+v", ae)
	}
	r.Attempt = 2
	res, err := p.Perform(ctx, r)
	if err != nil || !res.Replayed || !strings.HasPrefix(res.ProviderRef, "re_") {
		t.Fatalf("retry: %+v, %v", res, err)
	}
	if d.RefundsFor(2) != 1 || d.Refunded(pi) != 1500 {
		t.Fatalf("refunds %d, refunded %d", d.RefundsFor(2), d.Refunded(pi))
	}
	rf := d.Refunds()[0]
	if rf.Metadata[providers.MetadataNamespace] != moneyNS || rf.Metadata[providers.MetadataKey] != r.IdempotencyKey ||
		rf.Metadata[providers.MetadataIntentID] != "2" || rf.IdempotencyKey != r.IdempotencyKey || rf.Reason != "requested_by_customer" {
		t.Fatalf("refund %+v", rf)
	}

	// Beyond what is left: refused for good, nothing refunded.
	_, err = p.Perform(ctx, moneyReq(3, stripeprovider.KindRefund, "refund-2", `{"payment_intent": "`+pi+`", "amount": 501}`))
	ae = attemptErr(t, err)
	expect(t, ae, providers.OutcomeFailed, http.StatusBadRequest)
	if !ae.DidNotAct || ae.Code != "amount_too_large" {
		t.Fatalf("over-refund %+v", ae)
	}
	// The rest, without an amount.
	if _, err := p.Perform(ctx, moneyReq(4, stripeprovider.KindRefund, "refund-3", `{"payment_intent": "`+pi+`"}`)); err != nil {
		t.Fatal(err)
	}
	if d.Refunded(pi) != 2000 || d.RefundsFor(3) != 0 || d.RefundsFor(4) != 1 {
		t.Fatalf("refunded %d of 2000", d.Refunded(pi))
	}
	// A PaymentIntent that has not succeeded has nothing to refund.
	auth := charge(t, p, 5, "900", true)
	_, err = p.Perform(ctx, moneyReq(6, stripeprovider.KindRefund, "refund-4", `{"payment_intent": "`+auth+`"}`))
	expect(t, attemptErr(t, err), providers.OutcomeFailed, http.StatusBadRequest)
	// Never more refunded than charged.
	for _, pi := range d.PaymentIntents() {
		charged := int64(0)
		if pi.Status == "succeeded" {
			charged = pi.Amount
			if pi.AmountReceived != 0 {
				charged = pi.AmountReceived
			}
		}
		if d.Refunded(pi.ID) > charged {
			t.Fatalf("%s: refunded %d of %d charged", pi.ID, d.Refunded(pi.ID), charged)
		}
	}
}

func TestReconcileRefund(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	pi := charge(t, p, 1, "2000", false)
	payload := `{"payment_intent": "` + pi + `", "amount": 700}`
	r := moneyReq(2, stripeprovider.KindRefund, "refund-1", payload)

	// Before: a proven absence.
	if _, found, err := p.Reconcile(ctx, r); found || err != nil {
		t.Fatalf("before the refund: %v, %v", found, err)
	}
	// Another deployment's refund of the same PaymentIntent is not ours.
	other := r
	other.Namespace = "ns-other"
	other.IdempotencyKey = "ns-other:refund-1"
	if _, err := p.Perform(ctx, other); err != nil {
		t.Fatal(err)
	}
	res, err := p.Perform(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	got, found, err := p.Reconcile(ctx, r)
	if err != nil || !found || got.ProviderRef != res.ProviderRef {
		t.Fatalf("reconcile: %+v, %v, %v (performed %s)", got, found, err, res.ProviderRef)
	}
	// Another intent's key: not found, proven.
	if _, found, err := p.Reconcile(ctx, moneyReq(3, stripeprovider.KindRefund, "refund-9", payload)); found || err != nil {
		t.Fatalf("another key: %v, %v", found, err)
	}
	// Our key, another amount: never adopted.
	mm := r
	mm.Payload = json.RawMessage(`{"payment_intent": "` + pi + `", "amount": 701}`)
	_, found, err = p.Reconcile(ctx, mm)
	var me *providers.MismatchError
	if found || !errors.As(err, &me) || me.Field != "amount" || me.ProviderRef != res.ProviderRef || me.Want != "701" || me.Got != "700" {
		t.Fatalf("mismatch: %v, %v", found, err)
	}
	// Without a namespace, nothing found proves nothing.
	legacy := moneyReq(4, stripeprovider.KindRefund, "refund-legacy", payload)
	legacy.Namespace = ""
	if _, found, err := p.Reconcile(ctx, legacy); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("legacy: %v, %v", found, err)
	}
	// The page bound: a listing cut short proves nothing.
	stripeprovider.SetListPageSize(p, 1)
	pb, _ := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL(), ReconcileMaxPages: 1})
	stripeprovider.SetListPageSize(pb, 1)
	if _, found, err := pb.Reconcile(ctx, moneyReq(5, stripeprovider.KindRefund, "refund-8", payload)); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("page bound: %v, %v", found, err)
	}
	if _, found, err := p.Reconcile(ctx, r); err != nil || !found {
		t.Fatalf("paged reconcile: %v, %v", found, err)
	}
}

func TestCaptureThenAlreadyCaptured(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	create := moneyReq(1, stripeprovider.KindPaymentIntent, "auth", `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "capture_method": "manual"}`)
	created, err := p.Perform(ctx, create)
	if err != nil {
		t.Fatal(err)
	}
	pi := created.ProviderRef
	payload := `{"payment_intent": "` + pi + `", "amount_to_capture": 1500, "metadata": {"shipment": "s-1"}}`
	r := moneyReq(2, stripeprovider.KindCapture, "capture-1", payload)

	// Authorised, not captured: a proven absence.
	if _, found, err := p.Reconcile(ctx, r); found || err != nil {
		t.Fatalf("before the capture: %v, %v", found, err)
	}
	res, err := p.Perform(ctx, r)
	if err != nil || res.ProviderRef != pi || res.HTTPStatus != http.StatusOK {
		t.Fatalf("capture: %+v, %v", res, err)
	}
	// Another key for the same capture (a new key generation): Stripe
	// answers "already captured", which is success.
	r2 := r
	r2.IdempotencyKey = moneyNS + ":capture-1:g2"
	res, err = p.Perform(ctx, r2)
	if err != nil || res.ProviderRef != pi || res.HTTPStatus != http.StatusBadRequest {
		t.Fatalf("already captured: %+v, %v", res, err)
	}
	got := d.PaymentIntents()[0]
	if got.Status != "succeeded" || got.AmountReceived != 1500 || got.Metadata["shipment"] != "s-1" ||
		got.Metadata[stripeprovider.CaptureKeyMetadataKey] != r.IdempotencyKey || got.Metadata[stripeprovider.CaptureIntentIDMetadataKey] != "2" {
		t.Fatalf("captured %+v", got)
	}
	// The capture did not touch the charge's identity: its intent still
	// reconciles to the PaymentIntent.
	if ref, found, err := p.Reconcile(ctx, create); err != nil || !found || ref.ProviderRef != pi {
		t.Fatalf("the charge after its capture: %+v, %v, %v", ref, found, err)
	}
	if ref, found, err := p.Reconcile(ctx, r); err != nil || !found || ref.ProviderRef != pi {
		t.Fatalf("reconcile the capture: %+v, %v, %v", ref, found, err)
	}
	// Another amount: neither success nor adopted.
	other := moneyReq(3, stripeprovider.KindCapture, "capture-other", `{"payment_intent": "`+pi+`", "amount_to_capture": 1000}`)
	_, err = p.Perform(ctx, other)
	expect(t, attemptErr(t, err), providers.OutcomeFailed, http.StatusBadRequest)
	var np *providers.NotPerformedError
	if _, found, err := p.Reconcile(ctx, other); found || !errors.As(err, &np) || np.Code != "already_captured" {
		t.Fatalf("reconcile another amount: %v, %v", found, err)
	}
	mm := r
	mm.Payload = json.RawMessage(`{"payment_intent": "` + pi + `", "amount_to_capture": 1000}`)
	var me *providers.MismatchError
	if _, found, err := p.Reconcile(ctx, mm); found || !errors.As(err, &me) || me.Field != "amount_received" {
		t.Fatalf("our key, another amount: %v, %v", found, err)
	}

	// A canceled authorisation shows the capture did not happen.
	auth := charge(t, p, 4, "900", true)
	if _, err := p.Perform(ctx, moneyReq(5, stripeprovider.KindCancel, "cancel-auth", `{"payment_intent": "`+auth+`"}`)); err != nil {
		t.Fatal(err)
	}
	_, found, err := p.Reconcile(ctx, moneyReq(6, stripeprovider.KindCapture, "capture-canceled", `{"payment_intent": "`+auth+`"}`))
	if found || !errors.As(err, &np) || np.Code != "canceled" {
		t.Fatalf("capture of a canceled PaymentIntent: %v, %v", found, err)
	}
}

func TestCancel(t *testing.T) {
	_, p := setup(t)
	ctx := context.Background()
	charged := charge(t, p, 1, "2000", false)
	r := moneyReq(2, stripeprovider.KindCancel, "cancel-1", `{"payment_intent": "`+charged+`", "cancellation_reason": "requested_by_customer"}`)
	_, err := p.Perform(ctx, r)
	ae := attemptErr(t, err)
	expect(t, ae, providers.OutcomeFailed, http.StatusBadRequest)
	if !ae.DidNotAct || !strings.Contains(ae.Message, "status of succeeded") {
		t.Fatalf("cancel of a charge: %+v", ae)
	}
	if _, found, err := p.Reconcile(ctx, r); found || err != nil {
		t.Fatalf("reconcile the refused cancel: %v, %v", found, err)
	}

	auth := charge(t, p, 3, "900", true)
	r = moneyReq(4, stripeprovider.KindCancel, "cancel-2", `{"payment_intent": "`+auth+`", "cancellation_reason": "abandoned"}`)
	res, err := p.Perform(ctx, r)
	if err != nil || res.ProviderRef != auth {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	if res, err := p.Perform(ctx, r); err != nil || !res.Replayed {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	// Under a new key: already canceled is done.
	r2 := r
	r2.IdempotencyKey += ":g2"
	if res, err := p.Perform(ctx, r2); err != nil || res.ProviderRef != auth {
		t.Fatalf("already canceled: %+v, %v", res, err)
	}
	if ref, found, err := p.Reconcile(ctx, r); err != nil || !found || ref.ProviderRef != auth {
		t.Fatalf("reconcile: %+v, %v, %v", ref, found, err)
	}
}

func TestRedactMoneyKinds(t *testing.T) {
	_, p := setup(t)
	out := string(p.Redact(stripeprovider.KindRefund, json.RawMessage(`{"payment_intent": "pi_123", "amount": 5, "metadata": {"customer_email": "jane@example.com", "order": "7"}}`)))
	if strings.Contains(out, "jane@example.com") || !strings.Contains(out, `"order":"7"`) || !strings.Contains(out, "pi_123") {
		t.Fatalf("redacted %s", out)
	}
}

func TestMoneyKindsWithUnknownKind(t *testing.T) {
	_, p := setup(t)
	if _, _, err := p.Reconcile(context.Background(), moneyReq(1, "stripe.transfer", "x", `{}`)); !errors.Is(err, providers.ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}
