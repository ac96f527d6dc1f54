package stripedouble_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

const charge = "amount=2000&currency=usd&customer=cus_1&payment_method=pm_card_visa&confirm=true"

// TestRefusesWhatStripeRefuses posts forms real Stripe refuses with a 400:
// none creates a PaymentIntent, and none is saved under its key.
func TestRefusesWhatStripeRefuses(t *testing.T) {
	d := start(t, stripedouble.Config{})
	for _, tc := range []struct {
		name, form, param, says string
	}{
		{"ConfirmWithoutReturnURL", charge, "return_url", "A `return_url` must be specified"},
		{"ConfirmAllowingRedirects", charge + "&automatic_payment_methods[enabled]=true", "return_url", "allow_redirects"},
		{"ConfirmAllowingRedirectsAlways", charge + "&automatic_payment_methods[enabled]=true&automatic_payment_methods[allow_redirects]=always", "return_url", "return_url"},
		{"OffSessionWithoutConfirm", "amount=2000&currency=usd&payment_method=pm_card_visa&off_session=true", "off_session", "confirm=true"},
		{"ReturnURLWithoutConfirm", "amount=2000&currency=usd&return_url=https://shop.example/", "return_url", "confirm=true"},
		{"ConfirmWithoutPaymentMethod", "amount=2000&currency=usd&confirm=true&payment_method_types[0]=card", "payment_method", "missing a payment method"},
		{"BothPaymentMethodChoices", "amount=2000&currency=usd&automatic_payment_methods[enabled]=true&payment_method_types[0]=card", "automatic_payment_methods", "only specify one"},
		{"OffSessionSavingOnSession", charge + "&payment_method_types[0]=card&off_session=true&setup_future_usage=on_session", "setup_future_usage", "on_session"},
		{"BadCaptureMethod", "amount=2000&currency=usd&capture_method=later", "capture_method", "capture_method"},
		{"BadSetupFutureUsage", "amount=2000&currency=usd&setup_future_usage=always", "setup_future_usage", "setup_future_usage"},
		{"UnderTheMinimum", "amount=49&currency=usd", "amount", "at least 50"},
		{"UnderTheYenMinimum", "amount=49&currency=jpy", "amount", "at least 50"},
		{"ThreeDecimalsNotEndingIn0", "amount=1005&currency=kwd", "amount", "multiple of 10"},
		{"SuffixWithoutALetter", "amount=2000&currency=usd&statement_descriptor_suffix=1234", "statement_descriptor_suffix", "letter"},
		{"SuffixTooLong", "amount=2000&currency=usd&statement_descriptor_suffix=" + strings.Repeat("A", 23), "statement_descriptor_suffix", "22"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "key-"+tc.name, tc.form)
			var e struct {
				Error struct{ Type, Param, Message string }
			}
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param != tc.param || !strings.Contains(e.Error.Message, tc.says) {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
	}
	if n := len(d.PaymentIntents()); n != 0 {
		t.Fatalf("%d PaymentIntents created from refused requests", n)
	}
	// Not saved: the key executes afresh with parameters Stripe takes.
	resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "key-ConfirmWithoutReturnURL", charge+"&return_url=https://shop.example/back")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}

func TestChargeStates(t *testing.T) {
	d := start(t, stripedouble.Config{})
	redirectFree := "&automatic_payment_methods[enabled]=true&automatic_payment_methods[allow_redirects]=never"
	for _, tc := range []struct {
		name, form string
		status     int
		piStatus   string
	}{
		{"Succeeded", charge + redirectFree, 200, "succeeded"},
		{"ManualCapture", charge + redirectFree + "&capture_method=manual", 200, "requires_capture"},
		{"PaymentMethodTypes", charge + "&payment_method_types[0]=card", 200, "succeeded"},
		{"ReturnURL", charge + "&automatic_payment_methods[enabled]=true&return_url=https://shop.example/", 200, "succeeded"},
		{"AuthenticationOnSession", strings.Replace(charge, "pm_card_visa", stripedouble.AuthenticationRequiredCard, 1) + redirectFree, 200, "requires_action"},
		{"AuthenticationOffSession", strings.Replace(charge, "pm_card_visa", stripedouble.AuthenticationRequiredCard, 1) + redirectFree + "&off_session=true", 402, "requires_payment_method"},
		{"Processing", strings.Replace(charge, "pm_card_visa", stripedouble.ProcessingPaymentMethod, 1) + redirectFree + "&off_session=true", 200, "processing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "key-"+tc.name, tc.form)
			var pi struct {
				Status           string
				AmountCapturable int64 `json:"amount_capturable"`
				Error            *struct {
					Code          string                  `json:"code"`
					PaymentIntent struct{ Status string } `json:"payment_intent"`
				}
			}
			_ = json.Unmarshal(body, &pi)
			got := pi.Status
			if pi.Error != nil {
				got = pi.Error.PaymentIntent.Status
				if pi.Error.Code != "authentication_required" {
					t.Fatalf("error %s", body)
				}
			}
			if resp.StatusCode != tc.status || got != tc.piStatus {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if tc.piStatus == "requires_capture" && pi.AmountCapturable != 2000 {
				t.Fatalf("amount_capturable %d", pi.AmountCapturable)
			}
		})
	}
}

func TestAuthFailureModes(t *testing.T) {
	d := start(t, stripedouble.Config{})
	for mode, status := range map[stripedouble.AuthFailure]int{stripedouble.AuthKeyExpired: 401, stripedouble.AuthKeyRestricted: 403} {
		d.SetAuthFailure(mode)
		resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "k", charge+"&payment_method_types[0]=card")
		if resp.StatusCode != status {
			t.Fatalf("mode %d: %d %s", mode, resp.StatusCode, body)
		}
	}
	d.SetAuthFailure(stripedouble.AuthOK)
	if n := len(d.PaymentIntents()); n != 0 {
		t.Fatalf("%d PaymentIntents created", n)
	}
	if resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "k", charge+"&payment_method_types[0]=card"); resp.StatusCode != 200 {
		t.Fatalf("after AuthOK: %d %s", resp.StatusCode, body)
	}
}

func TestCaptureOnlyWhatIsAuthorised(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()

	manual := params(ctx, "auth", 1, 2000)
	manual.CaptureMethod = stripe.String("manual")
	pi, err := api.PaymentIntents.New(manual)
	if err != nil || pi.Status != stripe.PaymentIntentStatusRequiresCapture || pi.AmountCapturable != 2000 {
		t.Fatalf("authorisation: %+v, %v", pi, err)
	}
	// More than was authorised: refused.
	cp := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(2001)}
	cp.SetIdempotencyKey("capture-1")
	if _, err := api.PaymentIntents.Capture(pi.ID, cp); stripeErr(t, err).HTTPStatusCode != 400 {
		t.Fatalf("over-capture: %v", err)
	}
	// Not saved: the key captures with a valid amount, and replays it.
	cp = &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(1500)}
	cp.SetIdempotencyKey("capture-1")
	captured, err := api.PaymentIntents.Capture(pi.ID, cp)
	if err != nil || captured.Status != stripe.PaymentIntentStatusSucceeded || captured.AmountReceived != 1500 || captured.AmountCapturable != 0 {
		t.Fatalf("capture: %+v, %v", captured, err)
	}
	again, err := api.PaymentIntents.Capture(pi.ID, cp)
	if err != nil || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	// A second capture under another key: the PaymentIntent is succeeded.
	cp = &stripe.PaymentIntentCaptureParams{}
	cp.SetIdempotencyKey("capture-2")
	_, err = api.PaymentIntents.Capture(pi.ID, cp)
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 400 || se.Code != "payment_intent_unexpected_state" || !strings.Contains(se.Msg, "status of succeeded") ||
		se.PaymentIntent == nil || se.PaymentIntent.Status != stripe.PaymentIntentStatusSucceeded {
		t.Fatalf("second capture: %+v", se)
	}
	// A charge captured at once cannot be captured either.
	charged, err := api.PaymentIntents.New(params(ctx, "charge", 2, 2000))
	if err != nil {
		t.Fatal(err)
	}
	cp = &stripe.PaymentIntentCaptureParams{}
	cp.SetIdempotencyKey("capture-3")
	if _, err := api.PaymentIntents.Capture(charged.ID, cp); stripeErr(t, err).Code != "payment_intent_unexpected_state" {
		t.Fatalf("capture of an automatic charge: %v", err)
	}
	if got := d.PaymentIntents(); got[0].AmountReceived != 1500 || got[0].Status != "succeeded" || got[1].Status != "succeeded" {
		t.Fatalf("double holds %+v", got)
	}
}
