package stripedouble_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

func start(t *testing.T, cfg stripedouble.Config) *stripedouble.Server {
	t.Helper()
	d, err := stripedouble.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// sdk returns a real stripe-go client pointed at the double, without
// stripe-go's own retries.
func sdk(d *stripedouble.Server, key string) *client.API {
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(d.URL()),
		HTTPClient:        &http.Client{Timeout: 10 * time.Second},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return client.New(key, &stripe.Backends{API: b, Connect: b, Uploads: b})
}

func params(ctx context.Context, key string, intentID int64, amount int64) *stripe.PaymentIntentParams {
	p := &stripe.PaymentIntentParams{
		Amount:        stripe.Int64(amount),
		Currency:      stripe.String("usd"),
		Customer:      stripe.String("cus_1"),
		PaymentMethod: stripe.String("pm_card_visa"),
		Confirm:       stripe.Bool(true),
		// Without it Stripe (API 2023-08-16 on) wants a return_url.
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{Enabled: stripe.Bool(true), AllowRedirects: stripe.String("never")},
	}
	p.Context = ctx
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	p.AddMetadata("intent_id", strconv.FormatInt(intentID, 10))
	return p
}

func stripeErr(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *stripe.Error", err, err)
	}
	return se
}

func TestCreateAndReplay(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()

	first, err := api.PaymentIntents.New(params(ctx, "key-1", 1, 500))
	if err != nil {
		t.Fatalf("first: %v", err)
	}
	if !strings.HasPrefix(first.ID, "pi_") || first.Status != stripe.PaymentIntentStatusSucceeded || first.Amount != 500 ||
		first.Currency != "usd" || first.Customer == nil || first.Customer.ID != "cus_1" || first.Metadata["intent_id"] != "1" {
		t.Fatalf("unexpected PaymentIntent %+v", first)
	}
	if got := first.LastResponse.Header.Get("Idempotent-Replayed"); got != "" {
		t.Fatalf("first response has Idempotent-Replayed %q", got)
	}
	if first.LastResponse.IdempotencyKey != "key-1" || !strings.HasPrefix(first.LastResponse.RequestID, "req_") {
		t.Fatalf("response headers: key %q, request id %q", first.LastResponse.IdempotencyKey, first.LastResponse.RequestID)
	}

	again, err := api.PaymentIntents.New(params(ctx, "key-1", 1, 500))
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if again.ID != first.ID {
		t.Fatalf("replay returned %s, want %s", again.ID, first.ID)
	}
	if again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay lacks Idempotent-Replayed: true")
	}
	if again.LastResponse.Header.Get("Original-Request") != first.LastResponse.RequestID {
		t.Fatalf("Original-Request = %q, want %q", again.LastResponse.Header.Get("Original-Request"), first.LastResponse.RequestID)
	}
	if n := d.EffectsFor(1); n != 1 {
		t.Fatalf("EffectsFor(1) = %d, want 1", n)
	}
	st := d.Stats()
	if st.PaymentIntents != 1 || st.Replays != 1 || st.Requests != 2 || st.DuplicateEffects != 0 {
		t.Fatalf("stats %+v", st)
	}

	// GET by id, and a 404 for an unknown id.
	got, err := api.PaymentIntents.Get(first.ID, nil)
	if err != nil || got.ID != first.ID || got.Metadata["intent_id"] != "1" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	_, err = api.PaymentIntents.Get("pi_missing", nil)
	if se := stripeErr(t, err); se.HTTPStatusCode != 404 || se.Code != stripe.ErrorCodeResourceMissing {
		t.Fatalf("Get(missing) = %+v", se)
	}

	// A request without a key is executed every time.
	for i := 0; i < 2; i++ {
		p := params(ctx, "", 2, 700)
		if _, err := api.PaymentIntents.New(p); err != nil {
			t.Fatalf("keyless: %v", err)
		}
	}
	if n := d.EffectsFor(2); n != 2 {
		t.Fatalf("keyless requests made %d PaymentIntents, want 2", n)
	}
	if d.DuplicateEffects() != 1 {
		t.Fatalf("DuplicateEffects = %d, want 1", d.DuplicateEffects())
	}
}

func TestSameKeyOtherParametersIsIdempotencyError(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	if _, err := api.PaymentIntents.New(params(ctx, "key-x", 1, 500)); err != nil {
		t.Fatal(err)
	}
	_, err := api.PaymentIntents.New(params(ctx, "key-x", 1, 900))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency || se.Code != "" ||
		!strings.HasPrefix(se.Msg, "Keys for idempotent requests can only be used with the same parameters they were first used with") {
		t.Fatalf("got %+v", se)
	}
	var typed *stripe.IdempotencyError
	if !errors.As(err, &typed) {
		t.Fatalf("stripe-go did not type the error as IdempotencyError: %T", se.Err)
	}
	if n := d.EffectsFor(1); n != 1 {
		t.Fatalf("EffectsFor = %d, want 1", n)
	}
}

// postForm sends a raw form-encoded POST, to control parameter order.
func postForm(t *testing.T, d *stripedouble.Server, key, idemKey, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/v1/payment_intents", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestParameterOrderDoesNotMatter(t *testing.T) {
	d := start(t, stripedouble.Config{})
	r1, b1 := postForm(t, d, stripedouble.DefaultAPIKey, "k", "amount=100&currency=usd&metadata[intent_id]=9&metadata[a]=b")
	r2, b2 := postForm(t, d, stripedouble.DefaultAPIKey, "k", "metadata[a]=b&currency=usd&metadata[intent_id]=9&amount=100")
	if r1.StatusCode != 200 || r2.StatusCode != 200 || string(b1) != string(b2) || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("got %d %s / %d %s (replayed %q)", r1.StatusCode, b1, r2.StatusCode, b2, r2.Header.Get("Idempotent-Replayed"))
	}
	if d.EffectsFor(9) != 1 {
		t.Fatalf("EffectsFor(9) = %d", d.EffectsFor(9))
	}
}

func TestValidationErrorsAreNotSaved(t *testing.T) {
	d := start(t, stripedouble.Config{})
	for _, tc := range []struct{ body, param, code string }{
		{"currency=usd", "amount", "parameter_missing"},
		{"amount=100", "currency", "parameter_missing"},
		{"amount=-1&currency=usd", "amount", "parameter_invalid_integer"},
		{"amount=abc&currency=usd", "amount", "parameter_invalid_integer"},
		{"amount=100&currency=usd&bogus=1", "bogus", "parameter_unknown"},
	} {
		resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "key-v", tc.body)
		var e struct {
			Error struct{ Type, Code, Param string }
		}
		_ = json.Unmarshal(body, &e)
		if resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" || e.Error.Param != tc.param || e.Error.Code != tc.code {
			t.Errorf("%s: got %d %s", tc.body, resp.StatusCode, body)
		}
	}
	// The key was not saved by any of them: a valid request with it executes.
	resp, body := postForm(t, d, stripedouble.DefaultAPIKey, "key-v", "amount=100&currency=usd&metadata[intent_id]=3")
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("valid request after validation errors: %d %s", resp.StatusCode, body)
	}
	if d.Stats().PaymentIntents != 1 {
		t.Fatalf("stats %+v", d.Stats())
	}
}

func TestKeyInUseWhileFirstRequestIsDelayed(t *testing.T) {
	d := start(t, stripedouble.Config{})
	d.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Minute})
	api := sdk(d, stripedouble.DefaultAPIKey)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstDone := make(chan error, 1)
	go func() {
		_, err := api.PaymentIntents.New(params(ctx, "key-slow", 1, 500))
		firstDone <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the delayed request to create its PaymentIntent", func() bool { return len(d.PaymentIntents()) == 1 })

	_, err := api.PaymentIntents.New(params(context.Background(), "key-slow", 1, 500))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 409 || se.Type != stripe.ErrorTypeInvalidRequest || se.Code != stripe.ErrorCodeIdempotencyKeyInUse {
		t.Fatalf("concurrent request got %+v", se)
	}

	// The first client gives up; the double still saves the response.
	cancel()
	if err := <-firstDone; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	var replayed *stripe.PaymentIntent
	testkit.Eventually(t, 10*time.Second, "the key to be released", func() bool {
		pi, err := api.PaymentIntents.New(params(context.Background(), "key-slow", 1, 500))
		if err != nil {
			if se := stripeErr(t, err); se.Code != stripe.ErrorCodeIdempotencyKeyInUse {
				t.Fatalf("retry: %v", err)
			}
			return false
		}
		replayed = pi
		return true
	})
	if replayed.LastResponse.Header.Get("Idempotent-Replayed") != "true" || replayed.ID != d.PaymentIntents()[0].ID {
		t.Fatalf("retry after the delay was not a replay of the first PaymentIntent: %+v", replayed)
	}
	if n := d.EffectsFor(1); n != 1 {
		t.Fatalf("EffectsFor = %d, want 1", n)
	}
	if got := d.Stats().Faults[fault.Delay]; got != 1 {
		t.Fatalf("Faults[delay] = %d", got)
	}
}

func TestConcurrentSameKeyMakesOnePaymentIntent(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[string]bool{}
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pi, err := api.PaymentIntents.New(params(context.Background(), "same", 5, 100))
			if err != nil {
				var se *stripe.Error
				if !errors.As(err, &se) || se.Code != stripe.ErrorCodeIdempotencyKeyInUse {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			mu.Lock()
			ids[pi.ID] = true
			mu.Unlock()
		}()
	}
	testkit.WaitWithin(t, &wg, time.Minute)
	if len(ids) != 1 || d.EffectsFor(5) != 1 {
		t.Fatalf("ids %v, effects %d", ids, d.EffectsFor(5))
	}
}

func TestServerErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("500AfterActingIsSavedAndReplayed", func(t *testing.T) {
		d := start(t, stripedouble.Config{})
		api := sdk(d, stripedouble.DefaultAPIKey)
		d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
		_, err := api.PaymentIntents.New(params(ctx, "k500", 1, 500))
		if se := stripeErr(t, err); se.HTTPStatusCode != 500 || se.Type != stripe.ErrorTypeAPI {
			t.Fatalf("got %+v", se)
		}
		_, err = api.PaymentIntents.New(params(ctx, "k500", 1, 500))
		se := stripeErr(t, err)
		if se.HTTPStatusCode != 500 || se.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry got %+v (replayed %q)", se, se.LastResponse.Header.Get("Idempotent-Replayed"))
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d, want 1", d.EffectsFor(1))
		}
	})
	t.Run("500BeforeActingIsSavedToo", func(t *testing.T) {
		d := start(t, stripedouble.Config{})
		api := sdk(d, stripedouble.DefaultAPIKey)
		d.Faults().Push(fault.Fault{Kind: fault.ErrorBefore})
		for i := 0; i < 2; i++ {
			_, err := api.PaymentIntents.New(params(ctx, "kb500", 1, 500))
			if se := stripeErr(t, err); se.HTTPStatusCode != 500 {
				t.Fatalf("attempt %d got %+v", i, se)
			}
		}
		if d.EffectsFor(1) != 0 || d.Stats().Replays != 1 {
			t.Fatalf("effects %d, stats %+v", d.EffectsFor(1), d.Stats())
		}
	})
	t.Run("503IsNotSaved", func(t *testing.T) {
		d := start(t, stripedouble.Config{})
		api := sdk(d, stripedouble.DefaultAPIKey)
		d.Faults().Push(fault.Fault{Kind: fault.ErrorBefore, Status: 503})
		_, err := api.PaymentIntents.New(params(ctx, "k503", 1, 500))
		if se := stripeErr(t, err); se.HTTPStatusCode != 503 {
			t.Fatalf("got %+v", se)
		}
		pi, err := api.PaymentIntents.New(params(ctx, "k503", 1, 500))
		if err != nil || pi.LastResponse.Header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after 503: %v", err)
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
		}
	})
	t.Run("503AfterActingSavesTheSuccess", func(t *testing.T) {
		d := start(t, stripedouble.Config{})
		api := sdk(d, stripedouble.DefaultAPIKey)
		d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 503})
		_, err := api.PaymentIntents.New(params(ctx, "ka503", 1, 500))
		if se := stripeErr(t, err); se.HTTPStatusCode != 503 {
			t.Fatalf("got %+v", se)
		}
		pi, err := api.PaymentIntents.New(params(ctx, "ka503", 1, 500))
		if err != nil || pi.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after 503-after-acting: %v", err)
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
		}
	})
	t.Run("RateLimitIsNotSaved", func(t *testing.T) {
		d := start(t, stripedouble.Config{})
		api := sdk(d, stripedouble.DefaultAPIKey)
		d.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 2500 * time.Millisecond})
		_, err := api.PaymentIntents.New(params(ctx, "k429", 1, 500))
		se := stripeErr(t, err)
		if se.HTTPStatusCode != 429 || se.Code != stripe.ErrorCodeRateLimit || se.LastResponse.Header.Get("Retry-After") != "3" {
			t.Fatalf("got %+v, Retry-After %q", se, se.LastResponse.Header.Get("Retry-After"))
		}
		if d.EffectsFor(1) != 0 {
			t.Fatal("a rate-limited request created a PaymentIntent")
		}
		if _, err := api.PaymentIntents.New(params(ctx, "k429", 1, 500)); err != nil {
			t.Fatalf("retry after 429: %v", err)
		}
		if d.EffectsFor(1) != 1 || d.Stats().Faults[fault.RateLimit] != 1 {
			t.Fatalf("effects %d, stats %+v", d.EffectsFor(1), d.Stats())
		}
	})
	t.Run("LostResponseIsSaved", func(t *testing.T) {
		d := start(t, stripedouble.Config{})
		api := sdk(d, stripedouble.DefaultAPIKey)
		d.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
		_, err := api.PaymentIntents.New(params(ctx, "klost", 1, 500))
		var se *stripe.Error
		if err == nil || errors.As(err, &se) {
			t.Fatalf("lost response gave %v", err)
		}
		pi, err := api.PaymentIntents.New(params(ctx, "klost", 1, 500))
		if err != nil || pi.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after a lost response: %v", err)
		}
		if d.EffectsFor(1) != 1 {
			t.Fatalf("EffectsFor = %d", d.EffectsFor(1))
		}
	})
}

func TestDecline(t *testing.T) {
	ctx := context.Background()
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	d.Decline("pm_card_stolen", "stolen_card")
	for _, tc := range []struct{ pm, code string }{
		{"pm_card_stolen", "stolen_card"},
		{stripedouble.DeclinedCard, "generic_decline"},
		{stripedouble.InsufficientFundsCard, "insufficient_funds"},
	} {
		p := params(ctx, "decline-"+tc.pm, 7, 500)
		p.PaymentMethod = stripe.String(tc.pm)
		for attempt := 0; attempt < 2; attempt++ {
			_, err := api.PaymentIntents.New(p)
			se := stripeErr(t, err)
			if se.HTTPStatusCode != 402 || se.Type != stripe.ErrorTypeCard || se.Code != stripe.ErrorCodeCardDeclined ||
				string(se.DeclineCode) != tc.code || se.Msg == "" || se.PaymentIntent == nil ||
				se.PaymentIntent.Status != stripe.PaymentIntentStatusRequiresPaymentMethod {
				t.Fatalf("%s attempt %d: %+v", tc.pm, attempt, se)
			}
			if replayed := se.LastResponse.Header.Get("Idempotent-Replayed") == "true"; replayed != (attempt == 1) {
				t.Fatalf("%s attempt %d: replayed = %v", tc.pm, attempt, replayed)
			}
		}
	}
	if n := d.EffectsFor(7); n != 3 {
		t.Fatalf("EffectsFor = %d, want 3 (one declined PaymentIntent per card)", n)
	}
	for _, pi := range d.PaymentIntents() {
		if pi.DeclineCode == "" || pi.Status != "requires_payment_method" {
			t.Fatalf("PaymentIntent %+v", pi)
		}
	}
}

func TestKeysExpireAfter24Hours(t *testing.T) {
	clk := testkit.NewClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	d := start(t, stripedouble.Config{Now: clk.Now})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	first, err := api.PaymentIntents.New(params(ctx, "old-key", 1, 500))
	if err != nil {
		t.Fatal(err)
	}
	if first.Created != clk.Now().Unix() {
		t.Fatalf("created %d, want the injected clock's %d", first.Created, clk.Now().Unix())
	}
	clk.Advance(stripedouble.KeyRetention - time.Second)
	again, err := api.PaymentIntents.New(params(ctx, "old-key", 1, 500))
	if err != nil || again.ID != first.ID || again.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("within 24h: %v, %+v", err, again)
	}
	clk.Advance(time.Second)
	fresh, err := api.PaymentIntents.New(params(ctx, "old-key", 1, 500))
	if err != nil {
		t.Fatal(err)
	}
	if fresh.ID == first.ID || fresh.LastResponse.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("a reuse after 24h was replayed")
	}
	if n := d.EffectsFor(1); n != 2 || d.DuplicateEffects() != 1 {
		t.Fatalf("EffectsFor = %d, DuplicateEffects = %d; want 2 and 1", n, d.DuplicateEffects())
	}
}

func TestAuthentication(t *testing.T) {
	d := start(t, stripedouble.Config{APIKey: "sk_test_theRightKey0123456789"})
	const wrong = "sk_test_aWrongButLongKey987654321"
	_, err := sdk(d, wrong).PaymentIntents.New(params(context.Background(), "k", 1, 500))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 401 || se.Type != stripe.ErrorTypeInvalidRequest || !strings.HasPrefix(se.Msg, "Invalid API Key provided: sk_test_") {
		t.Fatalf("got %+v", se)
	}
	if strings.Contains(se.Msg, wrong) || strings.Contains(err.Error(), wrong) || strings.Contains(string(se.LastResponse.RawJSON), wrong) {
		t.Fatalf("the key was echoed whole: %s", se.Msg)
	}
	if !strings.HasSuffix(se.Msg, "4321") || !strings.Contains(se.Msg, "****") {
		t.Fatalf("key not masked the way Stripe does: %s", se.Msg)
	}
	resp, body := postForm(t, d, "", "k", "amount=1&currency=usd")
	if resp.StatusCode != 401 || !strings.Contains(string(body), "You did not provide an API key") {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	// A 401 is not saved: the right key with the same idempotency key executes.
	if _, err := sdk(d, "sk_test_theRightKey0123456789").PaymentIntents.New(params(context.Background(), "k", 1, 500)); err != nil {
		t.Fatalf("right key: %v", err)
	}
	if d.Stats().PaymentIntents != 1 {
		t.Fatalf("stats %+v", d.Stats())
	}
}

func TestSearch(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	ctx := context.Background()
	var want []string
	for i := 0; i < 3; i++ {
		pi, err := api.PaymentIntents.New(params(ctx, "s-"+strconv.Itoa(i), 42, int64(100+i)))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, pi.ID)
	}
	if _, err := api.PaymentIntents.New(params(ctx, "other", 43, 100)); err != nil {
		t.Fatal(err)
	}

	sp := &stripe.PaymentIntentSearchParams{}
	sp.Context = ctx
	sp.Query = "metadata['intent_id']:'42'"
	sp.Limit = stripe.Int64(2) // forces the iterator to fetch a second page
	iter := api.PaymentIntents.Search(sp)
	var got []string
	for iter.Next() {
		got = append(got, iter.PaymentIntent().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("search: %v", err)
	}
	if len(got) != 3 || got[0] != want[2] || got[2] != want[0] {
		t.Fatalf("search found %v, want newest first %v", got, want)
	}

	sp = &stripe.PaymentIntentSearchParams{}
	sp.Query = `metadata["intent_id"]:"43"`
	iter = api.PaymentIntents.Search(sp)
	if !iter.Next() || iter.PaymentIntent().Metadata["intent_id"] != "43" || iter.Next() || iter.Err() != nil {
		t.Fatalf("double-quoted search failed: %v", iter.Err())
	}

	sp = &stripe.PaymentIntentSearchParams{}
	sp.Query = "metadata['intent_id']:'999'"
	iter = api.PaymentIntents.Search(sp)
	if iter.Next() || iter.Err() != nil {
		t.Fatalf("search for nothing: %v", iter.Err())
	}
	if r := iter.PaymentIntentSearchResult(); r.URL != "/v1/payment_intents/search" || r.HasMore {
		t.Fatalf("search result meta %+v", r.SearchMeta)
	}

	sp = &stripe.PaymentIntentSearchParams{}
	sp.Query = "amount>100"
	iter = api.PaymentIntents.Search(sp)
	if iter.Next() {
		t.Fatal("unsupported query returned results")
	}
	if se := stripeErr(t, iter.Err()); se.HTTPStatusCode != 400 || se.Param != "query" {
		t.Fatalf("unsupported query: %+v", se)
	}
}

func TestStatsEndpoint(t *testing.T) {
	d := start(t, stripedouble.Config{})
	api := sdk(d, stripedouble.DefaultAPIKey)
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter})
	_, _ = api.PaymentIntents.New(params(context.Background(), "k", 11, 500))
	_, _ = api.PaymentIntents.New(params(context.Background(), "k", 11, 500))

	resp, err := http.Get(d.URL() + "/_double/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st stripedouble.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	want := d.Stats()
	if resp.StatusCode != 200 || st.PaymentIntents != 1 || st.Replays != 1 || st.Requests != 2 ||
		st.Faults[fault.ErrorAfter] != 1 || st.EffectsByIntent["11"] != 1 || st.PaymentIntents != want.PaymentIntents {
		t.Fatalf("stats endpoint: %d %+v (direct %+v)", resp.StatusCode, st, want)
	}
}

func TestUnknownRoute(t *testing.T) {
	d := start(t, stripedouble.Config{})
	resp, err := http.PostForm(d.URL()+"/v1/charges", url.Values{"amount": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown route: %d", resp.StatusCode)
	}
}
