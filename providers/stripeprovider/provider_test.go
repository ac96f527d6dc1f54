package stripeprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// secretKey is long and distinctive so that a leak is easy to spot.
const secretKey = "sk_test_51SuperSecretKeyThatMustNeverLeak0123456789"

func setup(t *testing.T) (*stripedouble.Server, *stripeprovider.Provider) {
	t.Helper()
	d := newDouble(t, stripedouble.Config{APIKey: secretKey})
	p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return d, p
}

func req(id int64, key, payload string) providers.Request {
	return providers.Request{IntentID: id, IdempotencyKey: key, Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(payload), Attempt: 1}
}

// attemptErr asserts err is an *AttemptError that does not leak the key.
func attemptErr(t *testing.T, err error) *providers.AttemptError {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error, got nil")
	}
	for _, s := range []string{err.Error(), providers.Classify(err).Message} {
		if strings.Contains(s, secretKey) || strings.Contains(s, "SuperSecretKey") {
			t.Fatalf("the API key leaked into an error: %s", s)
		}
	}
	var ae *providers.AttemptError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *AttemptError", err, err)
	}
	return ae
}

func expect(t *testing.T, ae *providers.AttemptError, outcome providers.Outcome, status int) {
	t.Helper()
	if ae.Outcome != outcome || ae.HTTPStatus != status {
		t.Fatalf("classified as %s HTTP %d, want %s HTTP %d (%v)", ae.Outcome, ae.HTTPStatus, outcome, status, ae)
	}
}

const payload = `{"amount": 1000, "currency": "eur", "payment_method": "pm_card_visa", "confirm": true, "metadata": {"order": "7"}}`

func TestPerformSucceedsAndReplays(t *testing.T) {
	d, p := setup(t)
	ctx := context.Background()
	res, err := p.Perform(ctx, req(1, "k1", payload))
	if err != nil {
		t.Fatal(err)
	}
	if res.HTTPStatus != 200 || res.Replayed || !strings.HasPrefix(res.ProviderRef, "pi_") {
		t.Fatalf("result %+v", res)
	}
	pis := d.PaymentIntents()
	if len(pis) != 1 || pis[0].IdempotencyKey != "k1" || pis[0].Metadata["intent_id"] != "1" || pis[0].Metadata["order"] != "7" ||
		pis[0].Amount != 1000 || pis[0].Currency != "eur" || !pis[0].Confirm || pis[0].Status != "succeeded" {
		t.Fatalf("double saw %+v", pis)
	}
	again, err := p.Perform(ctx, req(1, "k1", payload))
	if err != nil || !again.Replayed || again.ProviderRef != res.ProviderRef {
		t.Fatalf("second attempt: %+v, %v", again, err)
	}
	if d.EffectsFor(1) != 1 {
		t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
	}
}

func TestClassificationThroughTheDouble(t *testing.T) {
	ctx := context.Background()

	t.Run("DeclineFails", func(t *testing.T) {
		d, p := setup(t)
		d.Decline("pm_card_lost", "lost_card")
		_, err := p.Perform(ctx, req(1, "k", `{"amount": 100, "currency": "usd", "payment_method": "pm_card_lost", "confirm": true}`))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeFailed, 402)
		if ae.Code != "lost_card" || !strings.Contains(ae.Message, "lost_card") || !strings.Contains(ae.Message, "declined") {
			t.Fatalf("decline: code %q message %q", ae.Code, ae.Message)
		}
		// The 402 is saved: the same key gets the same answer.
		_, err = p.Perform(ctx, req(1, "k", `{"amount": 100, "currency": "usd", "payment_method": "pm_card_lost", "confirm": true}`))
		expect(t, attemptErr(t, err), providers.OutcomeFailed, 402)
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
		}
	})

	t.Run("KeyReusedWithOtherParametersFails", func(t *testing.T) {
		_, p := setup(t)
		if _, err := p.Perform(ctx, req(1, "k", payload)); err != nil {
			t.Fatal(err)
		}
		_, err := p.Perform(ctx, req(1, "k", `{"amount": 100, "currency": "eur"}`))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeFailed, 400)
		if ae.Code != "idempotency_error" || !strings.Contains(ae.Message, "same parameters") {
			t.Fatalf("got %v", ae)
		}
	})

	t.Run("BadAPIKeyRetriesWithoutActing", func(t *testing.T) {
		d := newDouble(t, stripedouble.Config{APIKey: "sk_test_someOtherKeyEntirely000"})
		p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL()})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Perform(ctx, req(1, "k", payload))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeRetry, 401)
		if !ae.DidNotAct || ae.Code != stripeprovider.CodeProviderAuth || !strings.Contains(ae.Message, "Invalid API Key") || !strings.Contains(ae.Message, "credentials") {
			t.Fatalf("code %q DidNotAct %v message %q", ae.Code, ae.DidNotAct, ae.Message)
		}
		if len(d.PaymentIntents()) != 0 {
			t.Fatal("a PaymentIntent was created with a wrong key")
		}
	})

	t.Run("NotFoundFails", func(t *testing.T) {
		d := newDouble(t, stripedouble.Config{APIKey: secretKey})
		p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL() + "/wrong-prefix"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Perform(ctx, req(1, "k", payload))
		expect(t, attemptErr(t, err), providers.OutcomeFailed, 404)
	})

	t.Run("KeyInUseRetries", func(t *testing.T) {
		d, p := setup(t)
		d.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Minute})
		slowCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = p.Perform(slowCtx, req(1, "k", payload))
		}()
		testkit.Eventually(t, 10*time.Second, "the first attempt to reach the double", func() bool { return d.EffectsFor(1) == 1 })
		_, err := p.Perform(ctx, req(1, "k", payload))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeRetry, 409)
		if ae.Code != "idempotency_key_in_use" {
			t.Fatalf("code %q", ae.Code)
		}
		cancel()
		testkit.WaitWithin(t, &wg, time.Minute)
	})

	t.Run("RateLimitRetriesAfter", func(t *testing.T) {
		d, p := setup(t)
		d.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 7 * time.Second})
		_, err := p.Perform(ctx, req(1, "k", payload))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeRetry, 429)
		if ae.RetryAfter != 7*time.Second {
			t.Fatalf("RetryAfter = %s", ae.RetryAfter)
		}
	})

	for _, k := range []fault.Kind{fault.ErrorAfter, fault.ErrorBefore} {
		t.Run("500IsAmbiguous/"+string(k), func(t *testing.T) {
			d, p := setup(t)
			d.Faults().Push(fault.Fault{Kind: k})
			_, err := p.Perform(ctx, req(1, "k", payload))
			expect(t, attemptErr(t, err), providers.OutcomeAmbiguous, 500)
			// Retrying is useless: Stripe replays the saved 500.
			_, err = p.Perform(ctx, req(1, "k", payload))
			expect(t, attemptErr(t, err), providers.OutcomeAmbiguous, 500)
			if d.Stats().Replays != 1 {
				t.Fatalf("stats %+v", d.Stats())
			}
		})
	}

	for _, status := range []int{502, 503, 504} {
		t.Run("GatewayErrorRetries/"+http.StatusText(status), func(t *testing.T) {
			d, p := setup(t)
			d.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: status})
			_, err := p.Perform(ctx, req(1, "k", payload))
			expect(t, attemptErr(t, err), providers.OutcomeRetry, status)
			if _, err := p.Perform(ctx, req(1, "k", payload)); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if d.EffectsFor(1) != 1 {
				t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
			}
		})
	}

	t.Run("LostResponseRetriesAndReplays", func(t *testing.T) {
		d, p := setup(t)
		d.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
		_, err := p.Perform(ctx, req(1, "k", payload))
		expect(t, attemptErr(t, err), providers.OutcomeRetry, 0)
		res, err := p.Perform(ctx, req(1, "k", payload))
		if err != nil || !res.Replayed {
			t.Fatalf("retry: %+v, %v", res, err)
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
		}
	})

	t.Run("TimeoutRetries", func(t *testing.T) {
		d := newDouble(t, stripedouble.Config{APIKey: secretKey})
		p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL(), HTTPClient: &http.Client{Timeout: 50 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		d.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Minute})
		_, err = p.Perform(ctx, req(1, "k", payload))
		expect(t, attemptErr(t, err), providers.OutcomeRetry, 0)
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
		}
	})

	t.Run("ContextDeadlineRetries", func(t *testing.T) {
		d, p := setup(t)
		d.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Minute})
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := p.Perform(short, req(1, "k", payload))
		expect(t, attemptErr(t, err), providers.OutcomeRetry, 0)
	})

	t.Run("ConnectionRefusedRetries", func(t *testing.T) {
		p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: "http://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Perform(ctx, req(1, "k", payload))
		ae := attemptErr(t, err)
		expect(t, ae, providers.OutcomeRetry, 0)
		if !providers.RequestNeverSent(ae) {
			t.Fatalf("connection refused not recognised as never sent: %v", ae)
		}
	})
}

// canned answers every request with a fixed response, for statuses and
// bodies the double has no reason to produce.
func canned(t *testing.T, status int, header http.Header, body string) *stripeprovider.Provider {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClassificationOfCannedAnswers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		status  int
		header  http.Header
		body    string
		outcome providers.Outcome
		code    string
	}{
		{"ValidationFails", 400, nil, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","param":"amount","message":"Invalid integer"}}`, providers.OutcomeFailed, "parameter_invalid_integer"},
		{"ForbiddenRetries", 403, nil, `{"error":{"type":"invalid_request_error","message":"The provided key does not have access"}}`, providers.OutcomeRetry, stripeprovider.CodeProviderAuth},
		{"429WithoutRetryAfterRetries", 429, nil, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, providers.OutcomeRetry, "rate_limit"},
		{"LockTimeoutRetries", 429, nil, `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"locked"}}`, providers.OutcomeRetry, "lock_timeout"},
		{"500WithShouldRetryRetries", 500, http.Header{"Stripe-Should-Retry": {"true"}}, `{"error":{"type":"api_error","message":"try again"}}`, providers.OutcomeRetry, ""},
		{"MessageWithKeyIsScrubbed", 400, nil, `{"error":{"type":"invalid_request_error","message":"bad key ` + secretKey + ` here"}}`, providers.OutcomeFailed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := canned(t, tc.status, tc.header, tc.body).Perform(ctx, req(1, "k", payload))
			ae := attemptErr(t, err)
			expect(t, ae, tc.outcome, tc.status)
			if ae.Code != tc.code || ae.Message == "" {
				t.Fatalf("code %q message %q", ae.Code, ae.Message)
			}
		})
	}
	t.Run("UndecodableBodyRetries", func(t *testing.T) {
		_, err := canned(t, 200, nil, `<html>not json</html>`).Perform(ctx, req(1, "k", payload))
		expect(t, attemptErr(t, err), providers.OutcomeRetry, 0)
	})
	t.Run("RetryAfterAsHTTPDate", func(t *testing.T) {
		when := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
		_, err := canned(t, 429, http.Header{"Retry-After": {when}}, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"slow down"}}`).Perform(ctx, req(1, "k", payload))
		ae := attemptErr(t, err)
		if ae.RetryAfter < 80*time.Second || ae.RetryAfter > 91*time.Second {
			t.Fatalf("RetryAfter = %s", ae.RetryAfter)
		}
	})
}

func TestRefusesWithoutSending(t *testing.T) {
	ctx := context.Background()
	d := newDouble(t, stripedouble.Config{APIKey: secretKey})
	keyless, err := stripeprovider.New(stripeprovider.Config{BaseURL: d.URL()})
	if err != nil {
		t.Fatalf("New without a key: %v", err)
	}
	if err := keyless.Validate(stripeprovider.KindPaymentIntent, json.RawMessage(payload)); err != nil {
		t.Fatalf("a keyless provider cannot validate: %v", err)
	}
	_, err = keyless.Perform(ctx, req(1, "k", payload))
	ae := attemptErr(t, err)
	if ae.Outcome != providers.OutcomeFailed || !strings.Contains(ae.Message, "not configured") {
		t.Fatalf("keyless Perform: %v", ae)
	}
	_, found, err := keyless.Reconcile(ctx, req(1, "k", payload))
	if ae := attemptErr(t, err); found || ae.Outcome != providers.OutcomeFailed {
		t.Fatalf("keyless Reconcile: %v %v", found, err)
	}

	p, err := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: d.URL()})
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]providers.Request{
		"NoKey":          req(1, "", payload),
		"KeyTooLong":     req(1, strings.Repeat("k", 256), payload),
		"InvalidPayload": req(1, "k", `{"amount": -1, "currency": "usd"}`),
		"UnknownKind":    {IntentID: 1, IdempotencyKey: "k", Kind: "stripe.refund", Payload: json.RawMessage(payload)},
	} {
		_, err := p.Perform(ctx, r)
		if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeFailed {
			t.Errorf("%s: %v", name, ae)
		}
	}
	if n := d.Stats().Requests; n != 0 {
		t.Fatalf("the double received %d requests", n)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg   stripeprovider.Config
		field string
	}{
		{stripeprovider.Config{BaseURL: "ftp://example.com"}, "BaseURL"},
		{stripeprovider.Config{BaseURL: "/v1"}, "BaseURL"},
		{stripeprovider.Config{BaseURL: "http://"}, "BaseURL"},
		{stripeprovider.Config{BaseURL: "::not a url"}, "BaseURL"},
		{stripeprovider.Config{BaseURL: "https://user:" + secretKey + "@example.com"}, "BaseURL"},
		{stripeprovider.Config{KeyWindow: -time.Hour}, "KeyWindow"},
		{stripeprovider.Config{KeyWindow: 48 * time.Hour}, "KeyWindow"},
		{stripeprovider.Config{APIKey: secretKey + " \n"}, "APIKey"},
	} {
		_, err := stripeprovider.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg.BaseURL, err, tc.field)
			continue
		}
		if strings.Contains(err.Error(), secretKey) {
			t.Errorf("error leaks the key: %v", err)
		}
	}
	p, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	caps := p.Capabilities()
	if !caps.IdempotencyKeys || caps.KeyWindow != 24*time.Hour || caps.MaxKeyLength != 255 || !caps.CanReconcile {
		t.Fatalf("capabilities %+v", caps)
	}
	if p.Name() != "stripe" || strings.Join(p.Kinds(), ",") != "stripe.payment_intent,stripe.refund,stripe.payment_intent_capture,stripe.payment_intent_cancel" {
		t.Fatalf("declaration %s %v", p.Name(), p.Kinds())
	}
}

func TestValidateLimits(t *testing.T) {
	p, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	many := map[string]string{}
	for i := 0; i < 50; i++ {
		many[strings.Repeat("k", 1+i%40)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	manyJSON, _ := json.Marshal(map[string]any{"amount": 100, "currency": "usd", "metadata": many})
	for payload, field := range map[string]string{
		string(manyJSON): "metadata",
		`{"amount": 100, "currency": "usd", "metadata": {"` + strings.Repeat("x", 41) + `": "v"}}`:  "metadata." + strings.Repeat("x", 41),
		`{"amount": 100, "currency": "usd", "metadata": {"k": "` + strings.Repeat("v", 501) + `"}}`: "metadata.k",
		`{"amount": 100000000, "currency": "usd"}`:                                                  "amount",
		`{"amount": 1, "currency": "usd", "confirm": "yes"}`:                                        "confirm",
		`{"amount": 1, "currency": "usd"} {}`:                                                       "",
	} {
		err := p.Validate(stripeprovider.KindPaymentIntent, json.RawMessage(payload))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != field {
			t.Errorf("Validate(%.60s...) = %v, want field %q", payload, err, field)
		}
	}
	if err := p.Validate(stripeprovider.KindPaymentIntent, json.RawMessage(`{"amount": 100, "currency": "usd", "metadata": {"a": "b"}, "statement_descriptor_suffix": "ORDER 42"}`)); err != nil {
		t.Fatal(err)
	}
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()
	d, p := setup(t)
	nsReq := func(id int64, key, payload string) providers.Request {
		r := req(id, key, payload)
		r.Namespace = "ns-test"
		r.KeyFirstUsedAt = time.Now()
		return r
	}

	res, err := p.Perform(ctx, nsReq(1, "k1", payload))
	if err != nil {
		t.Fatal(err)
	}
	got, found, err := p.Reconcile(ctx, nsReq(1, "k1", payload))
	if err != nil || !found || got.ProviderRef != res.ProviderRef || got.HTTPStatus != 200 {
		t.Fatalf("Reconcile(performed) = %+v %v %v", got, found, err)
	}

	// The charge happened but its answer was a 500: reconcile finds it.
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
	_, err = p.Perform(ctx, nsReq(2, "k2", payload))
	expect(t, attemptErr(t, err), providers.OutcomeAmbiguous, 500)
	if _, found, err := p.Reconcile(ctx, nsReq(2, "k2", payload)); err != nil || !found {
		t.Fatalf("Reconcile after a 500 = %v %v", found, err)
	}

	// Nothing was done before a 500: the listing proves it.
	d.Faults().Push(fault.Fault{Kind: fault.ErrorBefore})
	_, err = p.Perform(ctx, nsReq(3, "k3", payload))
	expect(t, attemptErr(t, err), providers.OutcomeAmbiguous, 500)
	if _, found, err := p.Reconcile(ctx, nsReq(3, "k3", payload)); err != nil || found {
		t.Fatalf("Reconcile after a 500 before acting = %v %v, want a proven absence", found, err)
	}

	// A declined PaymentIntent exists, but the payment did not happen.
	declined := `{"amount": 100, "currency": "usd", "payment_method": "` + stripedouble.DeclinedCard + `", "confirm": true}`
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
	_, _ = p.Perform(ctx, nsReq(4, "k4", declined))
	_, found, err = p.Reconcile(ctx, nsReq(4, "k4", declined))
	var np *providers.NotPerformedError
	if found || !errors.As(err, &np) || np.Code != "generic_decline" || !strings.Contains(np.Message, "requires_payment_method") {
		t.Fatalf("Reconcile(declined) = %v %+v", found, err)
	}

	// Without confirm, creating the PaymentIntent is the whole effect.
	unconfirmed := `{"amount": 100, "currency": "usd"}`
	if _, err := p.Perform(ctx, nsReq(5, "k5", unconfirmed)); err != nil {
		t.Fatal(err)
	}
	if _, found, err := p.Reconcile(ctx, nsReq(5, "k5", unconfirmed)); err != nil || !found {
		t.Fatalf("Reconcile(unconfirmed) = %v %v", found, err)
	}

	// Stripe unreachable: an error, not "not found".
	down, _ := stripeprovider.New(stripeprovider.Config{APIKey: secretKey, BaseURL: "http://127.0.0.1:1"})
	_, found, err = down.Reconcile(ctx, nsReq(1, "k1", payload))
	if err == nil || found || errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("Reconcile(unreachable) = %v %v", found, err)
	}
	if st := d.Stats(); st.SearchRequests != 0 || st.ListRequests == 0 {
		t.Fatalf("namespaced intents must be reconciled by listing, not search: %+v", st)
	}
}

func TestRedact(t *testing.T) {
	p, err := stripeprovider.New(stripeprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	in := `{"amount": 100, "currency": "usd", "receipt_email": "jane.doe@example.com", "payment_method": "pm_1NxSecretish4242",
	 "metadata": {"order": "42", "customer_email": "x@y.z", "Phone": "+15551234", "card_last4": "4242", "api_token": "tok_abc"}}`
	var out map[string]any
	if err := json.Unmarshal(p.Redact(stripeprovider.KindPaymentIntent, json.RawMessage(in)), &out); err != nil {
		t.Fatal(err)
	}
	md := out["metadata"].(map[string]any)
	if out["receipt_email"] != "j***@example.com" || out["payment_method"] != "pm_***4242" || out["amount"] != float64(100) ||
		md["order"] != "42" || md["customer_email"] != "[redacted]" || md["Phone"] != "[redacted]" ||
		md["card_last4"] != "[redacted]" || md["api_token"] != "[redacted]" {
		t.Fatalf("redacted %v", out)
	}
	for _, bad := range []string{"{not json", "[]", "null", ""} {
		if got := string(p.Redact(stripeprovider.KindPaymentIntent, json.RawMessage(bad))); got != `{"redacted":"unparseable payload"}` {
			t.Errorf("Redact(%q) = %s", bad, got)
		}
	}
}
