package stripeprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// deployment is one database's view of an intent: the dispatcher derives
// the provider-facing key from the namespace and the consumer's key.
type deployment struct{ namespace string }

// consumerKey is what both deployments' consumers derive for the same
// message ("consumer:message id").
const consumerKey = "orders:msg-1"

func (dep deployment) request(intentID int64, payload string, firstUsed time.Time) providers.Request {
	key := consumerKey
	if dep.namespace != "" {
		key = dep.namespace + ":" + consumerKey
	}
	return providers.Request{
		IntentID: intentID, Namespace: dep.namespace, IdempotencyKey: key, KeyFirstUsedAt: firstUsed,
		Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(payload), Attempt: 1,
	}
}

const chargePayload = `{"amount": 2500, "currency": "usd", "customer": "cus_shared", "payment_method": "pm_card_visa", "confirm": true}`

// owned returns the double's PaymentIntents carrying namespace and key.
func owned(d *stripedouble.Server, r providers.Request) []stripedouble.PaymentIntent {
	var out []stripedouble.PaymentIntent
	for _, pi := range d.PaymentIntents() {
		if pi.Metadata[providers.MetadataNamespace] == r.Namespace && pi.Metadata[providers.MetadataKey] == r.IdempotencyKey {
			out = append(out, pi)
		}
	}
	return out
}

func TestPerformCarriesIdentity(t *testing.T) {
	ctx := context.Background()
	d, p := setup(t)
	a := deployment{"ns-a"}.request(1, chargePayload, time.Now())
	if _, err := p.Perform(ctx, a); err != nil {
		t.Fatal(err)
	}
	legacy := deployment{}.request(2, chargePayload, time.Now())
	legacy.IdempotencyKey = "legacy-key"
	if _, err := p.Perform(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	pis := d.PaymentIntents()
	if len(pis) != 2 {
		t.Fatalf("double has %d PaymentIntents", len(pis))
	}
	if md := pis[0].Metadata; md["outbox_namespace"] != "ns-a" || md["outbox_key"] != "ns-a:orders:msg-1" || md["intent_id"] != "1" || pis[0].IdempotencyKey != "ns-a:orders:msg-1" {
		t.Fatalf("metadata %v, key %q", md, pis[0].IdempotencyKey)
	}
	if md := pis[1].Metadata; md["outbox_key"] != "legacy-key" || md["intent_id"] != "2" {
		t.Fatalf("legacy metadata %v", md)
	} else if _, ok := md["outbox_namespace"]; ok {
		t.Fatalf("an intent without a namespace was sent one: %v", md)
	}

	long := deployment{strings.Repeat("n", 501)}.request(3, chargePayload, time.Now())
	_, err := p.Perform(ctx, long)
	if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeFailed || !ae.DidNotAct {
		t.Fatalf("over-long namespace: %+v", ae)
	}
}

func TestValidateReservesIdentityMetadata(t *testing.T) {
	p, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"outbox_namespace", "outbox_key", "intent_id"} {
		err := p.Validate(stripeprovider.KindPaymentIntent, json.RawMessage(`{"amount": 100, "currency": "usd", "metadata": {"`+k+`": "x"}}`))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != "metadata."+k || !strings.Contains(pe.Reason, "reserved") {
			t.Errorf("metadata.%s: %v", k, err)
		}
	}
	withKeys := func(n int) json.RawMessage {
		md := map[string]string{}
		for i := 0; i < n; i++ {
			md["key_"+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
		}
		b, _ := json.Marshal(map[string]any{"amount": 100, "currency": "usd", "metadata": md})
		return b
	}
	// Stripe allows 50 keys; three are the outbox's.
	if err := p.Validate(stripeprovider.KindPaymentIntent, withKeys(47)); err != nil {
		t.Fatalf("47 keys: %v", err)
	}
	var pe *providers.PayloadError
	if err := p.Validate(stripeprovider.KindPaymentIntent, withKeys(48)); !errors.As(err, &pe) || pe.Field != "metadata" {
		t.Fatalf("48 keys: %v", err)
	}
}

// TestReconcileTwoDeploymentsShareAnAccount is the adopted-charge bug: two
// deployments on one Stripe account both have intent 1 for the same
// message. B's charge exists; A's attempt got a 500 before Stripe acted.
// A must not take B's PaymentIntent for its own: its listing proves its own
// charge absent.
func TestReconcileTwoDeploymentsShareAnAccount(t *testing.T) {
	ctx := context.Background()
	d, p := setup(t)
	a := deployment{"ns-a"}.request(1, chargePayload, time.Now())
	b := deployment{"ns-b"}.request(1, chargePayload, time.Now())

	d.Faults().Push(fault.Fault{Kind: fault.ErrorBefore})
	_, err := p.Perform(ctx, a)
	expect(t, attemptErr(t, err), providers.OutcomeAmbiguous, 500)
	bRes, err := p.Perform(ctx, b)
	if err != nil {
		t.Fatal(err)
	}

	res, found, err := p.Reconcile(ctx, a)
	if found || err != nil || res.ProviderRef != "" {
		t.Fatalf("A's Reconcile = %+v, %v, %v; want a proven absence, not B's %s", res, found, err, bRes.ProviderRef)
	}
	// The double's own records: one charge for intent 1, and it is B's.
	if n := d.EffectsFor(1); n != 1 {
		t.Fatalf("double has %d PaymentIntents for intent 1", n)
	}
	if got := owned(d, b); len(got) != 1 || got[0].ID != bRes.ProviderRef || got[0].Status != "succeeded" {
		t.Fatalf("B's PaymentIntents %+v", got)
	}
	if got := owned(d, a); len(got) != 0 {
		t.Fatalf("A has PaymentIntents %+v", got)
	}

	// B finds its own.
	if res, found, err := p.Reconcile(ctx, b); err != nil || !found || res.ProviderRef != bRes.ProviderRef {
		t.Fatalf("B's Reconcile = %+v, %v, %v", res, found, err)
	}

	// Once A's charge exists (say the dispatcher performed it under A's
	// next key), A finds that one, never B's.
	a2 := a
	a2.IdempotencyKey += ":2"
	aRes, err := p.Perform(ctx, a2)
	if err != nil {
		t.Fatal(err)
	}
	if res, found, err := p.Reconcile(ctx, a2); err != nil || !found || res.ProviderRef != aRes.ProviderRef {
		t.Fatalf("A's Reconcile = %+v, %v, %v; want %s", res, found, err, aRes.ProviderRef)
	}
	if st := d.Stats(); st.SearchRequests != 0 {
		t.Fatalf("namespaced reconciliation used search: %+v", st)
	}
}

// TestReconcileSameKeyOtherNamespace: the worst case, where both
// deployments send the very same provider-facing key (and so Stripe's
// idempotency would even replay B's answer to A): the namespace still tells
// them apart.
func TestReconcileSameKeyOtherNamespace(t *testing.T) {
	ctx := context.Background()
	d, p := setup(t)
	b := deployment{"ns-b"}.request(1, chargePayload, time.Now())
	if _, err := p.Perform(ctx, b); err != nil {
		t.Fatal(err)
	}
	a := b
	a.Namespace = "ns-a"
	if _, found, err := p.Reconcile(ctx, a); found || err != nil {
		t.Fatalf("Reconcile = %v, %v; want a proven absence", found, err)
	}
	if len(d.PaymentIntents()) != 1 {
		t.Fatal("Reconcile created something")
	}
}

func TestReconcileMismatchIsNeverAdopted(t *testing.T) {
	ctx := context.Background()
	d, p := setup(t)
	r := deployment{"ns-a"}.request(1, chargePayload, time.Now())
	res, err := p.Perform(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	for field, payload := range map[string]string{
		"amount":   `{"amount": 2600, "currency": "usd", "customer": "cus_shared", "payment_method": "pm_card_visa", "confirm": true}`,
		"currency": `{"amount": 2500, "currency": "eur", "customer": "cus_shared", "payment_method": "pm_card_visa", "confirm": true}`,
	} {
		other := r
		other.Payload = json.RawMessage(payload)
		got, found, err := p.Reconcile(ctx, other)
		var mm *providers.MismatchError
		if found || got.ProviderRef != "" || !errors.As(err, &mm) {
			t.Fatalf("%s differs: Reconcile = %+v, %v, %v; want a *MismatchError", field, got, found, err)
		}
		if mm.Field != field || mm.ProviderRef != res.ProviderRef || errors.Is(err, providers.ErrAbsenceNotProven) {
			t.Fatalf("%s differs: %+v", field, mm)
		}
	}
	// The payload names no customer, the PaymentIntent has one (a listing
	// without the customer filter finds it).
	noCustomer := r
	noCustomer.Payload = json.RawMessage(`{"amount": 2500, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true}`)
	var mm *providers.MismatchError
	if _, found, err := p.Reconcile(ctx, noCustomer); found || !errors.As(err, &mm) || mm.Field != "customer" || mm.Got != "cus_shared" {
		t.Fatalf("customer differs: %v %v", found, err)
	}
	if got := owned(d, r); len(got) != 1 || got[0].Amount != 2500 {
		t.Fatalf("records %+v", got)
	}
}

// TestReconcileListsWhatSearchMisses: a PaymentIntent created moments ago is
// invisible to Stripe's search but found by the list endpoint.
func TestReconcileListsWhatSearchMisses(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	d := newDouble(t, stripedouble.Config{APIKey: secretKey, Now: clk.Now, SearchLag: 5 * time.Minute})
	p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL()})
	if err != nil {
		t.Fatal(err)
	}
	r := deployment{"ns-a"}.request(1, chargePayload, clk.Now())
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
	_, err = p.Perform(ctx, r)
	expect(t, attemptErr(t, err), providers.OutcomeAmbiguous, 500)
	clk.Advance(time.Second)

	if n := searchCount(t, d, "metadata['outbox_key']:'"+r.IdempotencyKey+"'"); n != 0 {
		t.Fatalf("search found %d PaymentIntents: the double's search does not lag", n)
	}
	res, found, err := p.Reconcile(ctx, r)
	if err != nil || !found {
		t.Fatalf("Reconcile = %v, %v; want found by listing", found, err)
	}
	if got := owned(d, r); len(got) != 1 || got[0].ID != res.ProviderRef {
		t.Fatalf("found %s, double has %+v", res.ProviderRef, got)
	}

	// The same charge recorded before namespaces existed is looked up by
	// search: not found yet, and that proves nothing.
	legacy := deployment{}.request(2, chargePayload, clk.Now())
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
	_, _ = p.Perform(ctx, legacy)
	_, found, err = p.Reconcile(ctx, legacy)
	if found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("legacy Reconcile before the search lag = %v, %v; want ErrAbsenceNotProven", found, err)
	}
	clk.Advance(5 * time.Minute)
	if _, found, err := p.Reconcile(ctx, legacy); err != nil || !found {
		t.Fatalf("legacy Reconcile after the search lag = %v, %v", found, err)
	}
}

func searchCount(t *testing.T, d *stripedouble.Server, query string) int {
	t.Helper()
	api := sdkFor(t, d)
	sp := &stripe.PaymentIntentSearchParams{}
	sp.Query = query
	iter := api.PaymentIntents.Search(sp)
	n := 0
	for iter.Next() {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReconcilePageBound(t *testing.T) {
	ctx := context.Background()
	d := newDouble(t, stripedouble.Config{APIKey: secretKey})
	newP := func(pages int) *stripeprovider.Provider {
		p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL(), ReconcileMaxPages: pages})
		if err != nil {
			t.Fatal(err)
		}
		stripeprovider.SetListPageSize(p, 2)
		return p
	}
	ours := deployment{"ns-a"}.request(1, chargePayload, time.Now().Add(-time.Minute))
	if _, err := newP(1).Perform(ctx, ours); err != nil {
		t.Fatal(err)
	}
	// Four newer PaymentIntents of the same customer, from another
	// deployment, push ours to the third page of two.
	for i := int64(2); i <= 5; i++ {
		other := deployment{"ns-b"}.request(i, chargePayload, time.Now())
		other.IdempotencyKey += ":" + string(rune('0'+i))
		if _, err := newP(1).Perform(ctx, other); err != nil {
			t.Fatal(err)
		}
	}

	before := d.Stats().ListRequests
	_, found, err := newP(2).Reconcile(ctx, ours)
	if found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("Reconcile cut short by the page bound = %v, %v; want ErrAbsenceNotProven", found, err)
	}
	if n := d.Stats().ListRequests - before; n != 2 {
		t.Fatalf("listed %d pages, want the bound of 2", n)
	}
	if _, found, err := newP(3).Reconcile(ctx, ours); err != nil || !found {
		t.Fatalf("Reconcile within the bound = %v, %v", found, err)
	}

	// An intent with nothing at Stripe: the full listing (three pages)
	// proves absence, a bound of two does not.
	missing := deployment{"ns-a"}.request(9, chargePayload, time.Now().Add(-time.Minute))
	missing.IdempotencyKey += ":missing"
	if _, found, err := newP(3).Reconcile(ctx, missing); found || err != nil {
		t.Fatalf("Reconcile over the whole listing = %v, %v; want a proven absence", found, err)
	}
	if _, found, err := newP(2).Reconcile(ctx, missing); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("Reconcile cut short = %v, %v", found, err)
	}

	if _, err := stripeprovider.New(stripeprovider.Config{ReconcileMaxPages: -1}); err == nil || !strings.Contains(err.Error(), "ReconcileMaxPages") {
		t.Fatalf("New(ReconcileMaxPages: -1) = %v", err)
	}
}

// TestReconcileCreationWindow: the listing starts at the key's first use
// less ListClockSkewMargin; nothing older can be the key's.
func TestReconcileCreationWindow(t *testing.T) {
	ctx := context.Background()
	clk := testkit.NewClock(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	d := newDouble(t, stripedouble.Config{APIKey: secretKey, Now: clk.Now})
	p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL()})
	if err != nil {
		t.Fatal(err)
	}
	r := deployment{"ns-a"}.request(1, chargePayload, time.Time{})
	res, err := p.Perform(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	created := clk.Now()
	// Zero KeyFirstUsedAt: no lower bound.
	if _, found, err := p.Reconcile(ctx, r); err != nil || !found {
		t.Fatalf("Reconcile without a window = %v, %v", found, err)
	}
	// Stripe's clock runs a few minutes ahead of ours: still found.
	r.KeyFirstUsedAt = created.Add(stripeprovider.ListClockSkewMargin - time.Second)
	if got, found, err := p.Reconcile(ctx, r); err != nil || !found || got.ProviderRef != res.ProviderRef {
		t.Fatalf("Reconcile within the skew margin = %v, %v", found, err)
	}
	// Created well before the key was first used: outside the window.
	r.KeyFirstUsedAt = created.Add(stripeprovider.ListClockSkewMargin + time.Minute)
	if _, found, err := p.Reconcile(ctx, r); err != nil || found {
		t.Fatalf("Reconcile of a window after the PaymentIntent = %v, %v", found, err)
	}
}

func TestReconcileLegacyNeverProvesAbsence(t *testing.T) {
	ctx := context.Background()
	d, p := setup(t)
	legacy := deployment{}.request(1, chargePayload, time.Now())

	// Nothing at all.
	_, found, err := p.Reconcile(ctx, legacy)
	if found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("legacy Reconcile of nothing = %v, %v", found, err)
	}

	// Another database's intent 1 (legacy too, other amount) and a
	// namespaced deployment's intent 1 (same parameters): neither is ours.
	otherDB := deployment{}.request(1, `{"amount": 999, "currency": "usd", "customer": "cus_shared", "payment_method": "pm_card_visa", "confirm": true}`, time.Now())
	otherDB.IdempotencyKey = "other-db-key"
	otherRes, err := p.Perform(ctx, otherDB)
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a charge made before outbox_key existed: only intent_id.
	raw := sdkFor(t, d)
	pp := &stripe.PaymentIntentParams{Amount: stripe.Int64(999), Currency: stripe.String("usd"), Customer: stripe.String("cus_shared"),
		PaymentMethod: stripe.String("pm_card_visa"), Confirm: stripe.Bool(true), PaymentMethodTypes: stripe.StringSlice([]string{"card"})}
	pp.AddMetadata("intent_id", "1")
	old, err := raw.PaymentIntents.New(pp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Perform(ctx, deployment{"ns-b"}.request(1, chargePayload, time.Now())); err != nil {
		t.Fatal(err)
	}
	res, found, err := p.Reconcile(ctx, legacy)
	if found || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("legacy Reconcile adopted %q (%v, %v)", res.ProviderRef, found, err)
	}
	if !strings.Contains(err.Error(), old.ID) || strings.Contains(err.Error(), otherRes.ProviderRef) {
		t.Fatalf("the error should name the PaymentIntent it ignored for its amount: %v", err)
	}
	if n := d.EffectsFor(1); n != 3 {
		t.Fatalf("double has %d PaymentIntents for intent 1", n)
	}

	// Ours, with our key: found.
	mine, err := p.Perform(ctx, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if res, found, err := p.Reconcile(ctx, legacy); err != nil || !found || res.ProviderRef != mine.ProviderRef {
		t.Fatalf("legacy Reconcile of ours = %+v, %v, %v", res, found, err)
	}
	// Our key with another amount: a mismatch, not adopted.
	changed := legacy
	changed.Payload = json.RawMessage(`{"amount": 100, "currency": "usd", "customer": "cus_shared", "payment_method": "pm_card_visa", "confirm": true}`)
	var mm *providers.MismatchError
	if _, found, err := p.Reconcile(ctx, changed); found || !errors.As(err, &mm) || mm.ProviderRef != mine.ProviderRef {
		t.Fatalf("legacy Reconcile with another amount = %v, %v", found, err)
	}
}

func sdkFor(t *testing.T, d *stripedouble.Server) *client.API {
	t.Helper()
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(d.URL()), HTTPClient: &http.Client{Timeout: 10 * time.Second},
		MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return client.New(secretKey, &stripe.Backends{API: b, Connect: b, Uploads: b})
}
