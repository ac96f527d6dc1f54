package sendgridprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

var fixedNow = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func newProvider(t *testing.T, cfg sendgridprovider.Config) *sendgridprovider.Provider {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = sendgriddouble.DefaultAPIKey
	}
	p, err := sendgridprovider.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func startDouble(t *testing.T, cfg sendgriddouble.Config) *sendgriddouble.Server {
	t.Helper()
	s, err := sendgriddouble.NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func request(id int64, payload string) providers.Request {
	return providers.Request{IntentID: id, IdempotencyKey: fmt.Sprintf("msg-%d", id), Kind: sendgridprovider.KindEmail, Payload: json.RawMessage(payload), Attempt: 1}
}

func perform(t *testing.T, p *sendgridprovider.Provider, req providers.Request) (providers.Result, *providers.AttemptError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.Perform(ctx, req)
	if err == nil {
		return res, nil
	}
	var attemptErr *providers.AttemptError
	if !errors.As(err, &attemptErr) {
		t.Fatalf("Perform returned %T %v, want an *AttemptError", err, err)
	}
	return res, attemptErr
}

func TestPerformSendsTheMappedEmail(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL()})
	payload := `{"from":{"email":"shop@example.com","name":"Shop"},"to":[{"email":"a@example.com"},{"email":"b@example.com"}],
		"cc":[{"email":"c@example.com"}],"bcc":[{"email":"d@example.com"}],"reply_to":{"email":"help@example.com"},
		"subject":"Hi","text":"plain","html":"<b>rich</b>","categories":["x","y"],"custom_args":{"order":"9"}}`
	res, attemptErr := perform(t, p, request(31, payload))
	if attemptErr != nil {
		t.Fatalf("Perform: %v", attemptErr)
	}
	emails := s.Emails()
	if len(emails) != 1 {
		t.Fatalf("double recorded %d emails", len(emails))
	}
	e := emails[0]
	if res.ProviderRef != e.MessageID || res.HTTPStatus != http.StatusAccepted || res.Replayed {
		t.Fatalf("Result %+v, double's id %s", res, e.MessageID)
	}
	if e.From != "shop@example.com" || strings.Join(e.To, ",") != "a@example.com,b@example.com" ||
		strings.Join(e.Cc, ",") != "c@example.com" || strings.Join(e.Bcc, ",") != "d@example.com" ||
		e.Subject != "Hi" || strings.Join(e.Categories, ",") != "x,y" {
		t.Fatalf("recorded %+v", e)
	}
	want := map[string]string{"order": "9", "intent_id": "31", "outbox_key": "msg-31"}
	if fmt.Sprint(e.CustomArgs) != fmt.Sprint(want) {
		t.Fatalf("custom_args = %v, want %v", e.CustomArgs, want)
	}
}

func TestClassification(t *testing.T) {
	t.Parallel()
	const payload = `{"from":{"email":"shop@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`
	cases := []struct {
		name    string
		fault   *fault.Fault
		apiKey  string
		payload string
		outcome providers.Outcome
		status  int
		effects int
		message string
		now     func() time.Time
	}{
		{name: "500 before acting", fault: &fault.Fault{Kind: fault.ErrorBefore}, outcome: providers.OutcomeAmbiguous, status: 500},
		{name: "503 before acting", fault: &fault.Fault{Kind: fault.ErrorBefore, Status: 503}, outcome: providers.OutcomeAmbiguous, status: 503},
		{name: "500 after acting", fault: &fault.Fault{Kind: fault.ErrorAfter}, outcome: providers.OutcomeAmbiguous, status: 500, effects: 1},
		{name: "502 after acting", fault: &fault.Fault{Kind: fault.ErrorAfter, Status: 502}, outcome: providers.OutcomeAmbiguous, status: 502, effects: 1},
		{name: "lost response", fault: &fault.Fault{Kind: fault.LoseResponse}, outcome: providers.OutcomeAmbiguous, effects: 1},
		{name: "429", fault: &fault.Fault{Kind: fault.RateLimit}, outcome: providers.OutcomeRetry, status: 429, message: "too many requests"},
		// The provider's clock runs 48 hours ahead of SendGrid's, so it
		// takes a send_at SendGrid refuses.
		{name: "400 send_at too far", now: func() time.Time { return time.Now().Add(48 * time.Hour) },
			payload: fmt.Sprintf(`{"from":{"email":"shop@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t","send_at":%d}`, time.Now().Add(100*time.Hour).Unix()),
			outcome: providers.OutcomeFailed, status: 400, message: "The send_at parameter cannot be scheduled more than 72 hours in advance."},
		{name: "401", apiKey: "SG.wrong", outcome: providers.OutcomeRetry, status: 401, message: "The provided authorization grant is invalid, expired, or revoked"},
		{name: "403 unverified sender", payload: `{"from":{"email":"` + sendgriddouble.UnverifiedSender + `"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`,
			outcome: providers.OutcomeFailed, status: 403, message: "The from address does not match a verified Sender Identity"},
		{name: "404", fault: &fault.Fault{Kind: fault.ErrorBefore, Status: 404}, outcome: providers.OutcomeFailed, status: 404, message: "not found"},
		{name: "413", fault: &fault.Fault{Kind: fault.ErrorBefore, Status: 413}, outcome: providers.OutcomeFailed, status: 413, message: "request entity too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startDouble(t, sendgriddouble.Config{})
			if c.fault != nil {
				s.Faults().Push(*c.fault)
			}
			p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), APIKey: c.apiKey, Now: c.now})
			body := payload
			if c.payload != "" {
				body = c.payload
			}
			_, got := perform(t, p, request(1, body))
			if got == nil {
				t.Fatal("Perform succeeded")
			}
			if got.Outcome != c.outcome || got.HTTPStatus != c.status {
				t.Fatalf("classified as %s HTTP %d (%v), want %s HTTP %d", got.Outcome, got.HTTPStatus, got, c.outcome, c.status)
			}
			if c.message != "" && !strings.Contains(got.Message, c.message) {
				t.Errorf("Message = %q, want it to contain %q", got.Message, c.message)
			}
			if c.status != 0 && got.Message == "" {
				t.Error("empty Message")
			}
			if n := s.EffectsFor(1); n != c.effects {
				t.Fatalf("double performed %d effects, want %d", n, c.effects)
			}
		})
	}
}

func TestRateLimitRetryAfterComesFromTheResetHeader(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return fixedNow }
	s := startDouble(t, sendgriddouble.Config{Now: now})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Now: now})
	s.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 7 * time.Second})
	_, got := perform(t, p, request(1, validPayload))
	if got == nil || got.Outcome != providers.OutcomeRetry || got.RetryAfter != 7*time.Second {
		t.Fatalf("got %+v, want retry after 7s", got)
	}

	// A reset already past (the clocks disagree) still waits a second.
	late := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Now: func() time.Time { return fixedNow.Add(time.Hour) }})
	s.Faults().Push(fault.Fault{Kind: fault.RateLimit, RetryAfter: 7 * time.Second})
	_, got = perform(t, late, request(1, validPayload))
	if got == nil || got.RetryAfter != time.Second {
		t.Fatalf("got %+v, want retry after 1s", got)
	}
	if s.EffectsFor(1) != 0 {
		t.Fatal("rate-limited requests were performed")
	}
}

func TestTimeoutAfterActingIsAmbiguous(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	s.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Hour})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	_, got := perform(t, p, request(1, validPayload))
	if got == nil || got.Outcome != providers.OutcomeAmbiguous || got.HTTPStatus != 0 {
		t.Fatalf("timeout classified as %+v, want ambiguous without a status", got)
	}
	// The double recorded the email before holding the response back.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitForEmails(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := s.EffectsFor(1); n != 1 {
		t.Fatalf("double performed %d effects, want 1", n)
	}
}

func TestContextEndingAfterActingIsAmbiguous(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The context ends at the exact moment the double has acted.
	s := startDouble(t, sendgriddouble.Config{OnAccept: func(sendgriddouble.Email) { cancel() }})
	s.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Hour})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL()})
	_, err := p.Perform(ctx, request(1, validPayload))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeAmbiguous {
		t.Fatalf("classified as %v, want ambiguous", got)
	}
	if n := s.EffectsFor(1); n != 1 {
		t.Fatalf("double performed %d effects, want 1", n)
	}
}

func TestRequestsThatNeverLeftAreRetried(t *testing.T) {
	t.Parallel()
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := newProvider(t, sendgridprovider.Config{BaseURL: "http://" + addr})
	_, got := perform(t, p, request(1, validPayload))
	if got == nil || got.Outcome != providers.OutcomeRetry {
		t.Fatalf("connection refused classified as %v, want retry", got)
	}

	s := startDouble(t, sendgriddouble.Config{})
	p = newProvider(t, sendgridprovider.Config{BaseURL: s.URL()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Perform(ctx, request(1, validPayload))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry {
		t.Fatalf("a call with an ended context classified as %v, want retry", got)
	}
	if st := s.Stats(); st.Requests != 0 {
		t.Fatalf("the double saw %d requests", st.Requests)
	}
}

func TestEmptyAPIKeySendsNothing(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p, err := sendgridprovider.New(sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(validPayload)); err != nil {
		t.Fatalf("Validate without a key: %v", err)
	}
	if r := p.Redact(sendgridprovider.KindEmail, json.RawMessage(validPayload)); !json.Valid(r) {
		t.Fatalf("Redact without a key: %s", r)
	}
	_, got := perform(t, p, request(1, validPayload))
	if got == nil || got.Outcome != providers.OutcomeFailed || got.Message != "SENDGRID API key is not configured" {
		t.Fatalf("Perform without a key = %+v", got)
	}
	_, _, err = p.Reconcile(context.Background(), request(1, validPayload))
	if le := (*providers.LookupError)(nil); !errors.As(err, &le) || le.Message != "SENDGRID API key is not configured" || !strings.Contains(le.Needs, "Config.APIKey") {
		t.Fatalf("Reconcile without a key = %v", err)
	}
	if st := s.Stats(); st.Requests != 0 {
		t.Fatalf("the double saw %d requests", st.Requests)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"api.sendgrid.com", "/v3", "ftp://api.sendgrid.com", "http://", "https://user:pw@api.sendgrid.com", "http://h/?q=1", "http://[::1"} {
		_, err := sendgridprovider.New(sendgridprovider.Config{BaseURL: raw})
		if err == nil || !strings.Contains(err.Error(), "BaseURL") {
			t.Errorf("New(BaseURL %q) = %v, want an error naming BaseURL", raw, err)
		}
		if err != nil && strings.Contains(raw, "pw") && strings.Contains(err.Error(), "pw") {
			t.Errorf("error %q repeats the URL's password", err)
		}
	}
	for _, raw := range []string{"", "https://api.eu.sendgrid.com", "http://127.0.0.1:8080/"} {
		if _, err := sendgridprovider.New(sendgridprovider.Config{BaseURL: raw}); err != nil {
			t.Errorf("New(BaseURL %q) = %v", raw, err)
		}
	}
}

func TestAPIKeyNeverInErrors(t *testing.T) {
	t.Parallel()
	const secret = "SG.very-secret-api-key.abcdef"
	var errs []error

	// Refused key, server errors, lost responses, timeouts.
	s := startDouble(t, sendgriddouble.Config{})
	s.Faults().Push(fault.Fault{Kind: fault.ErrorAfter}, fault.Fault{Kind: fault.LoseResponse})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), APIKey: secret, Reconcile: true})
	for range 3 {
		_, err := p.Perform(context.Background(), request(1, validPayload))
		errs = append(errs, err)
	}
	_, _, err := p.Reconcile(context.Background(), request(1, validPayload))
	errs = append(errs, err)

	good := startDouble(t, sendgriddouble.Config{APIKey: secret})
	good.Faults().Push(fault.Fault{Kind: fault.Delay, Delay: time.Hour})
	slow := newProvider(t, sendgridprovider.Config{BaseURL: good.URL(), APIKey: secret, HTTPClient: &http.Client{Timeout: 100 * time.Millisecond}})
	_, err = slow.Perform(context.Background(), request(2, validPayload))
	errs = append(errs, err)

	// A server (or proxy) that echoes the Authorization header back.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]any{{"message": "bad header " + r.Header.Get("Authorization")}}})
	}))
	t.Cleanup(echo.Close)
	_, err = newProvider(t, sendgridprovider.Config{BaseURL: echo.URL, APIKey: secret}).Perform(context.Background(), request(3, validPayload))
	errs = append(errs, err)

	_, err = newProvider(t, sendgridprovider.Config{BaseURL: "http://127.0.0.1:1", APIKey: secret}).Perform(context.Background(), request(4, validPayload))
	errs = append(errs, err)

	for i, err := range errs {
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), secret) {
			t.Errorf("case %d: error leaks the key: %v", i, err)
		}
		if got := providers.Classify(err); strings.Contains(got.Message, secret) {
			t.Errorf("case %d: Message leaks the key: %q", i, got.Message)
		}
	}
	cfg := sendgridprovider.Config{APIKey: secret}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v %#v", cfg, cfg), fmt.Sprintf("%v %+v %#v", p, p, p)} {
		if strings.Contains(s, secret) {
			t.Errorf("formatting leaks the key: %s", s)
		}
	}
}

func TestValidateNamesFields(t *testing.T) {
	t.Parallel()
	p := newProvider(t, sendgridprovider.Config{})
	const head = `"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s","text":"t"`
	cases := map[string]string{
		`{"to":[{"email":"a@example.com"}],"subject":"s","text":"t"}`:                                                                                 "from",
		`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"cc":[{"email":"c@example.com"},{"email":"x"}],"subject":"s","text":"t"}`: "cc[1].email",
		`{` + head + `,"reply_to":{"email":"nope"}}`:                                                                                                  "reply_to.email",
		`{` + head + `,"categories":[""]}`:                                                                                                            "categories[0]",
		`{` + head + `,"custom_args":{"idempotency_key":"k"}}`:                                                                                        "custom_args.idempotency_key",
		`{` + head + `,"custom_args":{"outbox_key":"k"}}`:                                                                                             "custom_args.outbox_key",
		`{` + head + `,"custom_args":{"outbox_namespace":"n"}}`:                                                                                       "custom_args.outbox_namespace",
		`{` + head + `,"custom_args":{"big":"` + strings.Repeat("x", sendgridprovider.MaxCustomArgsBytes) + `"}}`:                                     "custom_args",
		`{` + head + `,"send_at":-1}`:                                                                                                                 "send_at",
		`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com"}],"subject":"s\nBcc: x@example.com","text":"t"}`:                            "subject",
		`{"from":{"email":"s@example.com"},"to":[{"email":"a@example.com","name":"A\r\nBcc: x@example.com"}],"subject":"s","text":"t"}`:               "to[0].name",
	}
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf(`{"email":"r%d@example.com"}`, i)
	}
	cases[`{"from":{"email":"s@example.com"},"to":[`+strings.Join(many, ",")+`],"subject":"s","text":"t"}`] = "to"
	for payload, field := range cases {
		err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(payload))
		var pe *providers.PayloadError
		if !errors.As(err, &pe) || pe.Field != field {
			t.Errorf("Validate(%.120s) = %v, want a PayloadError naming %q", payload, err, field)
		}
	}
	if err := p.Validate(sendgridprovider.KindEmail, json.RawMessage(`{`+head+`,"html":"<p>x</p>","send_at":1714564800}`)); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	p := newProvider(t, sendgridprovider.Config{})
	out := p.Redact(sendgridprovider.KindEmail, json.RawMessage(validPayload))
	var got sendgridprovider.Email
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("Redact output %s: %v", out, err)
	}
	if got.From.Email != "shop@example.com" || got.To[0].Email != "a***@example.com" || got.To[0].Name != "A***" ||
		got.Cc[0].Email != "b***@example.org" || got.Subject != "Your order has shipped" ||
		got.Text != "[redacted 38 bytes]" || got.HTML != "[redacted 45 bytes]" ||
		got.CustomArgs["order_id"] != "1234" || got.CustomArgs["session_token"] != "[redacted]" {
		t.Fatalf("Redact = %s", out)
	}
	if out := p.Redact(sendgridprovider.KindEmail, json.RawMessage(`{not json`)); string(out) != `{"redacted":"unparseable payload"}` {
		t.Fatalf("Redact(unparseable) = %s", out)
	}
	if got := sendgridprovider.MaskEmail("no-at-sign"); got != "***" {
		t.Fatalf("MaskEmail(no-at-sign) = %q", got)
	}
}

func TestReconcile(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{ActivityRequestsPerMinute: 3, Now: func() time.Time { return fixedNow }})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL(), Reconcile: true})
	if !p.Capabilities().CanReconcile || p.Capabilities().IdempotencyKeys {
		t.Fatalf("Capabilities = %+v", p.Capabilities())
	}
	res, attemptErr := perform(t, p, request(11, validPayload))
	if attemptErr != nil {
		t.Fatal(attemptErr)
	}
	ctx := context.Background()
	found, ok, err := p.Reconcile(ctx, request(11, validPayload))
	if err != nil || !ok || found.ProviderRef != res.ProviderRef {
		t.Fatalf("Reconcile = %+v %v %v, want found with ref %s", found, ok, err, res.ProviderRef)
	}
	// The activity feed is eventually consistent: not found proves nothing.
	if _, ok, err := p.Reconcile(ctx, request(12, validPayload)); ok || !errors.Is(err, providers.ErrAbsenceNotProven) {
		t.Fatalf("Reconcile(unknown) = %v %v, want ErrAbsenceNotProven", ok, err)
	}
	// The Email Activity API allows a few requests a minute.
	_, _, _ = p.Reconcile(ctx, request(13, validPayload))
	_, ok, err = p.Reconcile(ctx, request(11, validPayload))
	var le *providers.LookupError
	if ok || !errors.As(err, &le) || le.HTTPStatus != 429 || le.RetryAfter <= 0 || le.Refused() {
		t.Fatalf("rate-limited Reconcile = %v %v", ok, err)
	}

	off := newProvider(t, sendgridprovider.Config{BaseURL: s.URL()})
	if off.Capabilities().CanReconcile {
		t.Fatal("CanReconcile without Config.Reconcile")
	}
	if _, _, err := off.Reconcile(ctx, request(11, validPayload)); !errors.Is(err, providers.ErrReconcileUnsupported) {
		t.Fatalf("Reconcile disabled = %v", err)
	}
}

func TestPerformRefusesUnknownKindAndBadPayload(t *testing.T) {
	t.Parallel()
	s := startDouble(t, sendgriddouble.Config{})
	p := newProvider(t, sendgridprovider.Config{BaseURL: s.URL()})
	req := request(1, validPayload)
	req.Kind = "sendgrid.sms"
	if _, got := perform(t, p, req); got == nil || got.Outcome != providers.OutcomeFailed || !errors.Is(got, providers.ErrUnknownKind) {
		t.Fatalf("unknown kind = %v", got)
	}
	if _, got := perform(t, p, request(1, `{"to":[]}`)); got == nil || got.Outcome != providers.OutcomeFailed {
		t.Fatalf("bad payload = %v", got)
	}
	if s.Stats().Requests != 0 {
		t.Fatal("refused attempts reached SendGrid")
	}
}
