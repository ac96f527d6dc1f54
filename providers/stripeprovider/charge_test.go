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
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// offSession is a background charge as the package documents it.
const offSession = `{"amount": 2000, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true, "off_session": true}`

// refusedCharges maps payloads Stripe would refuse to the field Validate
// must name.
var refusedCharges = map[string]string{
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "off_session": true}`:                                                                          "off_session",
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": false, "off_session": false}`:                                                       "off_session",
	`{"amount": 2000, "currency": "usd", "confirm": true}`:                                                                                                                "payment_method",
	`{"amount": 2000, "currency": "usd", "capture_method": "later"}`:                                                                                                      "capture_method",
	`{"amount": 2000, "currency": "usd", "setup_future_usage": "sometimes"}`:                                                                                              "setup_future_usage",
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "off_session": true, "setup_future_usage": "on_session"}`:                     "setup_future_usage",
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "automatic_payment_methods": {"enabled": true}}`:                              "return_url",
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "automatic_payment_methods": {"enabled": true, "allow_redirects": "always"}}`: "return_url",
	`{"amount": 2000, "currency": "usd", "automatic_payment_methods": {"enabled": true}, "payment_method_types": ["card"]}`:                                               "automatic_payment_methods",
	`{"amount": 2000, "currency": "usd", "automatic_payment_methods": {"allow_redirects": "never"}}`:                                                                      "automatic_payment_methods.enabled",
	`{"amount": 2000, "currency": "usd", "automatic_payment_methods": {"enabled": true, "allow_redirects": "sometimes"}}`:                                                 "automatic_payment_methods.allow_redirects",
	`{"amount": 2000, "currency": "usd", "automatic_payment_methods": {"enabled": false, "allow_redirects": "never"}}`:                                                    "automatic_payment_methods.allow_redirects",
	`{"amount": 2000, "currency": "usd", "payment_method_types": []}`:                                                                                                     "payment_method_types",
	`{"amount": 2000, "currency": "usd", "payment_method_types": ["card", "card"]}`:                                                                                       "payment_method_types[1]",
	`{"amount": 2000, "currency": "usd", "payment_method_types": ["Card!"]}`:                                                                                              "payment_method_types[0]",
	`{"amount": 2000, "currency": "usd", "return_url": "https://shop.example/back"}`:                                                                                      "return_url",
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "return_url": "not a url"}`:                                                   "return_url",
	`{"amount": 49, "currency": "usd"}`:                                           "amount",
	`{"amount": 29, "currency": "gbp"}`:                                           "amount",
	`{"amount": 49, "currency": "jpy"}`:                                           "amount",
	`{"amount": 17499, "currency": "huf"}`:                                        "amount",
	`{"amount": 1005, "currency": "bhd"}`:                                         "amount",
	`{"amount": 2001, "currency": "kwd"}`:                                         "amount",
	`{"amount": 2000, "currency": "usd", "statement_descriptor_suffix": "12345"}`: "statement_descriptor_suffix",
	`{"amount": 2000, "currency": "usd", "statement_descriptor_suffix": "` + strings.Repeat("A", 23) + `"}`: "statement_descriptor_suffix",
}

// acceptedCharges are payloads Stripe accepts.
var acceptedCharges = []string{
	offSession,
	`{"amount": 50, "currency": "usd"}`,
	`{"amount": 30, "currency": "gbp"}`,
	`{"amount": 50, "currency": "jpy"}`,
	`{"amount": 1, "currency": "krw"}`,
	`{"amount": 1010, "currency": "bhd"}`,
	`{"amount": 2000, "currency": "usd", "statement_descriptor_suffix": "ORDER 42"}`,
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true}`,
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "capture_method": "manual", "off_session": true}`,
	`{"amount": 2000, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true, "off_session": true, "setup_future_usage": "off_session"}`,
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "payment_method_types": ["card"]}`,
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "automatic_payment_methods": {"enabled": true, "allow_redirects": "never"}}`,
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "automatic_payment_methods": {"enabled": true}, "return_url": "https://shop.example/back"}`,
	`{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "automatic_payment_methods": {"enabled": false}}`,
	`{"amount": 2000, "currency": "usd", "capture_method": "automatic_async", "setup_future_usage": "on_session"}`,
}

func TestValidateRefusesWhatStripeRefuses(t *testing.T) {
	d, p := setup(t)
	for payload, field := range refusedCharges {
		err := p.Validate(stripeprovider.KindPaymentIntent, json.RawMessage(payload))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != field || pe.Reason == "" {
			t.Errorf("Validate(%s) = %v, want a PayloadError naming %q", payload, err, field)
		}
		// Perform refuses it too, without sending.
		_, err = p.Perform(context.Background(), req(1, "k-"+field, payload))
		if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeFailed || !ae.DidNotAct || ae.HTTPStatus != 0 {
			t.Errorf("Perform(%s) = %v", payload, ae)
		}
	}
	if st := d.Stats(); st.Requests != 0 || st.PaymentIntents != 0 {
		t.Fatalf("refused payloads reached the double: %+v", st)
	}
	for _, payload := range acceptedCharges {
		if err := p.Validate(stripeprovider.KindPaymentIntent, json.RawMessage(payload)); err != nil {
			t.Errorf("Validate(%s) = %v", payload, err)
		}
	}
}

// TestAcceptedChargesReachTheDouble performs every accepted payload and
// checks what the double was sent.
func TestAcceptedChargesReachTheDouble(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	for i, payload := range acceptedCharges {
		key := "accepted-" + string(rune('a'+i))
		if _, err := p.Perform(ctx, req(int64(100+i), key, payload)); err != nil {
			t.Errorf("Perform(%s) = %v", payload, err)
		}
	}
	if got := len(d.PaymentIntents()); got != len(acceptedCharges) {
		t.Fatalf("%d PaymentIntents for %d charges", got, len(acceptedCharges))
	}
}

func TestBackgroundChargeCannotNeedARedirect(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	res, err := p.Perform(ctx, req(1, "bg", offSession))
	if err != nil {
		t.Fatal(err)
	}
	pi := d.PaymentIntents()[0]
	if pi.ID != res.ProviderRef || pi.Status != "succeeded" || !pi.OffSession || !pi.AutomaticPaymentMethods || pi.AllowRedirects != "never" ||
		pi.PaymentMethodTypes != nil || pi.ReturnURL != "" {
		t.Fatalf("double saw %+v", pi)
	}

	// With payment_method_types, no default is added.
	if _, err := p.Perform(ctx, req(2, "types", `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "payment_method_types": ["card"]}`)); err != nil {
		t.Fatal(err)
	}
	// Nor on a PaymentIntent that is not confirmed.
	if _, err := p.Perform(ctx, req(3, "later", `{"amount": 2000, "currency": "usd"}`)); err != nil {
		t.Fatal(err)
	}
	pis := d.PaymentIntents()
	if pis[1].AutomaticPaymentMethods || len(pis[1].PaymentMethodTypes) != 1 || pis[1].PaymentMethodTypes[0] != "card" || pis[1].Status != "succeeded" {
		t.Fatalf("payment_method_types charge: %+v", pis[1])
	}
	if pis[2].AutomaticPaymentMethods || pis[2].Status != "requires_payment_method" {
		t.Fatalf("unconfirmed PaymentIntent: %+v", pis[2])
	}
}

func TestManualCaptureIsAnAuthorisation(t *testing.T) {
	d, p := setup(t)
	res, err := p.Perform(context.Background(), req(1, "auth", `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa", "confirm": true, "off_session": true, "capture_method": "manual"}`))
	if err != nil {
		t.Fatal(err)
	}
	pi := d.PaymentIntents()[0]
	if pi.ID != res.ProviderRef || pi.Status != "requires_capture" || pi.CaptureMethod != "manual" || pi.AmountCapturable != 2000 {
		t.Fatalf("double saw %+v", pi)
	}
}

const askInSession = "the bank asks the customer to authenticate; an off-session charge cannot, ask the customer to pay in session"

func TestAuthenticationRequiredIsAFailureToReport(t *testing.T) {
	ctx := context.Background()

	t.Run("402OffSession", func(t *testing.T) {
		d, p := setup(t)
		payload := `{"amount": 2000, "currency": "usd", "customer": "cus_1", "payment_method": "` + stripedouble.AuthenticationRequiredCard + `", "confirm": true, "off_session": true}`
		_, err := p.Perform(ctx, req(1, "auth-402", payload))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeFailed, http.StatusPaymentRequired)
		if !ae.DidNotAct || ae.Code != "authentication_required" || !strings.Contains(ae.Message, askInSession) {
			t.Fatalf("got %+v", ae)
		}
		// Stripe saves the declined PaymentIntent: a retry replays it.
		_, err = p.Perform(ctx, req(1, "auth-402", payload))
		expect(t, attemptErr(t, err), providers.OutcomeFailed, http.StatusPaymentRequired)
		if pis := d.PaymentIntents(); len(pis) != 1 || pis[0].Status != "requires_payment_method" || pis[0].DeclineCode != "authentication_required" {
			t.Fatalf("double saw %+v", pis)
		}
	})

	t.Run("RequiresActionOffSession", func(t *testing.T) {
		d, p := setup(t)
		d.RequireAction("pm_card_threeDSecure2Required")
		_, err := p.Perform(ctx, req(1, "action", `{"amount": 2000, "currency": "usd", "payment_method": "pm_card_threeDSecure2Required", "confirm": true, "off_session": true}`))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeFailed, http.StatusOK)
		if !ae.DidNotAct || ae.Code != "authentication_required" || !strings.Contains(ae.Message, askInSession) {
			t.Fatalf("got %+v", ae)
		}
		if pis := d.PaymentIntents(); len(pis) != 1 || pis[0].Status != "requires_action" {
			t.Fatalf("double saw %+v", pis)
		}
	})

	t.Run("RequiresActionOnSession", func(t *testing.T) {
		d, p := setup(t)
		_, err := p.Perform(ctx, req(1, "action", `{"amount": 2000, "currency": "usd", "payment_method": "`+stripedouble.AuthenticationRequiredCard+`", "confirm": true}`))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeFailed, http.StatusOK)
		if !ae.DidNotAct || ae.Code != "authentication_required" || !strings.Contains(ae.Message, "in session") {
			t.Fatalf("got %+v", ae)
		}
		if pis := d.PaymentIntents(); len(pis) != 1 || pis[0].Status != "requires_action" {
			t.Fatalf("double saw %+v", pis)
		}
	})
}

func TestProcessingIsRetriedUntilItSettles(t *testing.T) {
	ctx := context.Background()
	payload := `{"amount": 2000, "currency": "usd", "customer": "cus_1", "payment_method": "` + stripedouble.ProcessingPaymentMethod + `", "confirm": true, "off_session": true}`
	for _, settles := range []bool{true, false} {
		d, p := setup(t)
		_, err := p.Perform(ctx, req(1, "slow", payload))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeRetry, http.StatusOK)
		if ae.DidNotAct || ae.Code != "processing" {
			t.Fatalf("processing: %+v", ae)
		}
		// A retry with the same key is replayed "processing"; Perform
		// asks for the PaymentIntent as it is now: still processing.
		_, err = p.Perform(ctx, req(1, "slow", payload))
		if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeRetry || ae.DidNotAct || ae.Code != "processing" {
			t.Fatalf("still processing: %+v", ae)
		}
		pis := d.PaymentIntents()
		if len(pis) != 1 || pis[0].Status != "processing" {
			t.Fatalf("double saw %+v", pis)
		}
		if !d.Settle(pis[0].ID, settles) {
			t.Fatal("Settle found nothing processing")
		}
		res, err := p.Perform(ctx, req(1, "slow", payload))
		if settles {
			if err != nil || res.ProviderRef != pis[0].ID || !res.Replayed {
				t.Fatalf("after settling: %+v, %v", res, err)
			}
		} else {
			ae := attemptErr(t, err)
			if ae.Outcome != providers.OutcomeFailed || ae.Code != "insufficient_funds" || !strings.Contains(ae.Message, pis[0].ID) {
				t.Fatalf("after a failed settlement: %+v", ae)
			}
		}
		if d.EffectsFor(1) != 1 || d.Stats().Replays != 2 {
			t.Fatalf("effects %d, stats %+v", d.EffectsFor(1), d.Stats())
		}
	}
}

func TestReconcileWaitsForProcessing(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	r := deployment{"ns-a"}.request(1, `{"amount": 2000, "currency": "usd", "customer": "cus_1", "payment_method": "`+stripedouble.ProcessingPaymentMethod+`", "confirm": true}`, time.Now())
	if _, err := p.Perform(ctx, r); err == nil {
		t.Fatal("a processing charge succeeded")
	}
	_, found, err := p.Reconcile(ctx, r)
	if found || !errors.Is(err, providers.ErrAbsenceNotProven) || !strings.Contains(err.Error(), "still processing") {
		t.Fatalf("Reconcile of a processing charge = %v, %v", found, err)
	}
	d.Settle(d.PaymentIntents()[0].ID, true)
	if res, found, err := p.Reconcile(ctx, r); !found || err != nil || res.ProviderRef != d.PaymentIntents()[0].ID {
		t.Fatalf("Reconcile after settling = %+v, %v, %v", res, found, err)
	}
}

func TestMisconfiguredAccountHoldsTheQueue(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		mode   stripedouble.AuthFailure
		status int
		says   string
	}{
		{stripedouble.AuthKeyExpired, http.StatusUnauthorized, "Expired API Key"},
		{stripedouble.AuthKeyRestricted, http.StatusForbidden, "permissions"},
	} {
		d, p := setup(t)
		d.SetAuthFailure(tc.mode)
		_, err := p.Perform(ctx, req(1, "k", offSession))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeRetry, tc.status)
		if !ae.DidNotAct || ae.Code != stripeprovider.CodeProviderAuth || !strings.Contains(ae.Message, "fix the Stripe credentials") || !strings.Contains(ae.Message, tc.says) {
			t.Fatalf("%d: %+v", tc.status, ae)
		}
		if n := len(d.PaymentIntents()); n != 0 {
			t.Fatalf("%d: %d PaymentIntents created", tc.status, n)
		}
		// Nothing was saved under the key: once fixed, the retry charges.
		d.SetAuthFailure(stripedouble.AuthOK)
		if res, err := p.Perform(ctx, req(1, "k", offSession)); err != nil || res.Replayed {
			t.Fatalf("%d: after the fix: %+v, %v", tc.status, res, err)
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("%d: effects %d", tc.status, d.EffectsFor(1))
		}
	}
}

func TestShouldRetryAnd424(t *testing.T) {
	ctx := context.Background()
	no := http.Header{"Stripe-Should-Retry": {"false"}}
	yes := http.Header{"Stripe-Should-Retry": {"true"}}
	for _, tc := range []struct {
		name      string
		status    int
		header    http.Header
		body      string
		outcome   providers.Outcome
		didNotAct bool
	}{
		{"424IsAmbiguous", 424, nil, `{"error":{"type":"api_error","message":"A dependency failed"}}`, providers.OutcomeAmbiguous, false},
		{"503ShouldNotRetryIsAmbiguous", 503, no, `{"error":{"type":"api_error","message":"unavailable"}}`, providers.OutcomeAmbiguous, false},
		{"409ShouldNotRetryFails", 409, no, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`, providers.OutcomeFailed, false},
		{"400ShouldNotRetryFails", 400, no, `{"error":{"type":"invalid_request_error","message":"bad"}}`, providers.OutcomeFailed, true},
		{"400ShouldRetryRetries", 400, yes, `{"error":{"type":"invalid_request_error","message":"bad"}}`, providers.OutcomeRetry, false},
		{"503ShouldRetryRetries", 503, yes, `{"error":{"type":"api_error","message":"unavailable"}}`, providers.OutcomeRetry, false},
		{"401ShouldNotRetryStillHoldsTheQueue", 401, no, `{"error":{"type":"invalid_request_error","message":"Expired API Key provided"}}`, providers.OutcomeRetry, true},
		{"402ShouldRetryStillFails", 402, yes, `{"error":{"type":"card_error","code":"authentication_required","decline_code":"authentication_required","message":"This transaction requires authentication."}}`, providers.OutcomeFailed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := canned(t, tc.status, tc.header, tc.body).Perform(ctx, req(1, "k", offSession))
			ae := attemptErr(t, err)
			expect(t, ae, tc.outcome, tc.status)
			if ae.DidNotAct != tc.didNotAct {
				t.Fatalf("DidNotAct = %v", ae.DidNotAct)
			}
		})
	}
}
