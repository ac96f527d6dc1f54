package webhookprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/webhookprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider/webhookdouble"
)

// leaks lists what must never appear in an error or a log: the secret and
// the token in the endpoint's query string.
var leaks = []string{testSecret, "TopSecretSigningKey", "path-token-9876", "/hooks/orders"}

func noLeak(t *testing.T, what, s string) {
	t.Helper()
	for _, l := range leaks {
		if strings.Contains(s, l) {
			t.Fatalf("%s leaks %q: %s", what, l, s)
		}
	}
}

// attemptErr asserts err is an *AttemptError whose texts do not leak.
func attemptErr(t *testing.T, err error) *providers.AttemptError {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error, got nil")
	}
	var ae *providers.AttemptError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *AttemptError", err, err)
	}
	noLeak(t, "error", err.Error())
	noLeak(t, "AttemptError.Message", ae.Message)
	if ae.Err != nil {
		noLeak(t, "AttemptError.Err", ae.Err.Error())
	}
	return ae
}

func request(id int64, key, payload string) providers.Request {
	return providers.Request{IntentID: id, IdempotencyKey: key, Kind: webhookprovider.KindPost, Payload: json.RawMessage(payload), Attempt: 1}
}

const payload = `{"endpoint": "orders", "event": "note.created", "data": {"note": "hello", "tags": ["a"]}}`

// receiver is an httptest server answering with handle and recording the
// requests it got.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*http.Request
	bod [][]byte
}

func newReceiver(t *testing.T, handle http.HandlerFunc) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, r)
		rc.bod = append(rc.bod, b)
		rc.mu.Unlock()
		handle(w, r)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

func answer(status int, header map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestPerformSendsASignedDelivery(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, keyed := range []bool{true, false} {
		t.Run(fmt.Sprintf("keyed=%t", keyed), func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, answer(200, map[string]string{"X-Request-Id": "rcv_1"}, `{"ok":true}`))
			p, err := webhookprovider.New(webhookprovider.Config{
				Endpoints: map[string]webhookprovider.Endpoint{"orders": endpoint(rc.srv.URL, keyed)},
				Now:       func() time.Time { return now },
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Perform(context.Background(), request(7, "consumer:msg-1", payload))
			if err != nil {
				t.Fatal(err)
			}
			if res.ProviderRef != "rcv_1" || res.HTTPStatus != 200 || res.Replayed {
				t.Fatalf("result %+v", res)
			}
			if rc.requests() != 1 {
				t.Fatalf("receiver got %d requests", rc.requests())
			}
			r, body := rc.got[0], rc.bod[0]
			if r.Method != http.MethodPost || r.URL.Path != "/hooks/orders" || r.URL.Query().Get("token") != "path-token-9876" {
				t.Fatalf("request %s %s", r.Method, r.URL)
			}
			if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Outbox-Intent-Id") != "7" {
				t.Fatalf("headers %v", r.Header)
			}
			if got := r.Header.Get(keyHeader); keyed && got != "consumer:msg-1" || !keyed && got != "" {
				t.Fatalf("%s = %q (keyed %t)", keyHeader, got, keyed)
			}
			if err := webhookprovider.VerifyAt(testSecret, r.Header.Get("X-Outbox-Signature"), body, 0, now); err != nil {
				t.Fatalf("the receiver cannot verify the delivery: %v", err)
			}
			var env struct {
				ID        string          `json:"id"`
				Event     string          `json:"event"`
				Data      json.RawMessage `json:"data"`
				CreatedAt time.Time       `json:"created_at"`
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&env); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			if env.ID != "consumer:msg-1" || env.Event != "note.created" || !env.CreatedAt.Equal(now) {
				t.Fatalf("body %s", body)
			}
			if !jsonEqual(t, env.Data, `{"note": "hello", "tags": ["a"]}`) {
				t.Fatalf("data %s", env.Data)
			}
			if _, ok := r.Header["X-Outbox-Namespace"]; ok {
				t.Fatalf("an intent without a namespace was sent one: %v", r.Header)
			}
		})
	}
}

func TestDeliveryCarriesTheNamespace(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, answer(200, nil, `{}`))
	p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"orders": endpoint(rc.srv.URL, true)}})
	if err != nil {
		t.Fatal(err)
	}
	req := request(7, "ns-a:consumer:msg-1", payload)
	req.Namespace = "ns-a"
	if _, err := p.Perform(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if r := rc.got[0]; r.Header.Get(webhookprovider.NamespaceHeader) != "ns-a" || r.Header.Get(keyHeader) != "ns-a:consumer:msg-1" {
		t.Fatalf("headers %v", r.Header)
	}
	req.Namespace = "ns\nb"
	_, err = p.Perform(context.Background(), req)
	var ae *providers.AttemptError
	if !errors.As(err, &ae) || ae.Outcome != providers.OutcomeFailed || !ae.DidNotAct || rc.requests() != 1 {
		t.Fatalf("a namespace with a control character: %v (%d requests)", err, rc.requests())
	}
	if _, _, err := p.Reconcile(context.Background(), req); !errors.Is(err, providers.ErrReconcileUnsupported) {
		t.Fatalf("Reconcile = %v", err)
	}
}

func jsonEqual(t *testing.T, a json.RawMessage, b string) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

func TestClassification(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400)
	httpDate := func() string { return time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat) }
	cases := []struct {
		name            string
		handler         http.HandlerFunc
		keyed, unkeyed  providers.Outcome // "" means succeeded
		status          int
		ref             string
		replayed        bool // keyed only
		message         string
		minRetryAfter   time.Duration
		maxMessageBytes int
	}{
		{name: "200WithReference", handler: answer(200, map[string]string{"X-Request-Id": "req_9"}, ""), status: 200, ref: "req_9"},
		{name: "204WithoutReference", handler: answer(204, nil, ""), status: 204, ref: "status:204"},
		{name: "200Replayed", handler: answer(200, map[string]string{"Idempotent-Replayed": "true"}, ""), status: 200, ref: "status:200", replayed: true},
		{name: "429RetryAfterSeconds", handler: answer(429, map[string]string{"Retry-After": "7"}, `{"message":"slow down"}`), keyed: providers.OutcomeRetry, unkeyed: providers.OutcomeRetry, status: 429, message: "slow down", minRetryAfter: 7 * time.Second},
		{name: "429RetryAfterDate", handler: func(w http.ResponseWriter, r *http.Request) {
			answer(429, map[string]string{"Retry-After": httpDate()}, "")(w, r)
		}, keyed: providers.OutcomeRetry, unkeyed: providers.OutcomeRetry, status: 429, minRetryAfter: 60 * time.Second},
		{name: "400JSONMessage", handler: answer(400, nil, `{"message":"note is too long"}`), keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 400, message: "note is too long"},
		{name: "422NestedError", handler: answer(422, nil, `{"error":{"message":"unknown event"}}`), keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 422, message: "unknown event"},
		{name: "403ErrorString", handler: answer(403, nil, `{"error":"forbidden for this tenant"}`), keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 403, message: "forbidden for this tenant"},
		{name: "404PlainText", handler: answer(404, nil, "no  such\nhook"), keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 404, message: "no such hook"},
		{name: "401EmptyBody", handler: answer(401, nil, ""), keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 401, message: "Unauthorized"},
		{name: "400LongMessageTruncated", handler: answer(400, nil, `{"message":"`+long+`"}`), keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 400, message: "éé", maxMessageBytes: webhookprovider.MaxMessageBytes},
		{name: "400EchoesSecretAndURL", handler: func(w http.ResponseWriter, r *http.Request) {
			answer(400, nil, `{"message":"bad signature `+r.Header.Get("X-Outbox-Signature")+` for secret `+testSecret+` at `+r.URL.String()+`"}`)(w, r)
		}, keyed: providers.OutcomeFailed, unkeyed: providers.OutcomeFailed, status: 400, message: "bad signature"},
		{name: "409", handler: answer(409, nil, `{"message":"key in use"}`), keyed: providers.OutcomeRetry, unkeyed: providers.OutcomeFailed, status: 409, message: "key in use"},
		{name: "500", handler: answer(500, nil, `{"message":"boom"}`), keyed: providers.OutcomeAmbiguous, unkeyed: providers.OutcomeAmbiguous, status: 500, message: "boom"},
		{name: "502", handler: answer(502, nil, "<html>Bad Gateway</html>"), keyed: providers.OutcomeRetry, unkeyed: providers.OutcomeAmbiguous, status: 502},
		{name: "503", handler: answer(503, nil, ""), keyed: providers.OutcomeRetry, unkeyed: providers.OutcomeAmbiguous, status: 503, message: "Service Unavailable"},
		{name: "504", handler: answer(504, nil, ""), keyed: providers.OutcomeRetry, unkeyed: providers.OutcomeAmbiguous, status: 504},
		{name: "301NotFollowed", handler: answer(301, map[string]string{"Location": "https://elsewhere.example/"}, ""), keyed: providers.OutcomeAmbiguous, unkeyed: providers.OutcomeAmbiguous, status: 301, message: "redirected"},
	}
	for _, tc := range cases {
		for _, keyed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/keyed=%t", tc.name, keyed), func(t *testing.T) {
				t.Parallel()
				rc := newReceiver(t, tc.handler)
				res, err := newProvider(t, rc.srv.URL, keyed).Perform(context.Background(), request(1, "k-1", payload))
				want := tc.unkeyed
				if keyed {
					want = tc.keyed
				}
				if want == "" {
					if err != nil {
						t.Fatalf("Perform = %v, want success", err)
					}
					wantReplayed := tc.replayed && keyed
					if res.HTTPStatus != tc.status || res.ProviderRef != tc.ref || res.Replayed != wantReplayed {
						t.Fatalf("result %+v, want status %d ref %q replayed %t", res, tc.status, tc.ref, wantReplayed)
					}
					return
				}
				ae := attemptErr(t, err)
				if ae.Outcome != want || ae.HTTPStatus != tc.status {
					t.Fatalf("classified as %s HTTP %d, want %s HTTP %d (%v)", ae.Outcome, ae.HTTPStatus, want, tc.status, ae)
				}
				if !strings.Contains(ae.Message, tc.message) {
					t.Errorf("message %q does not contain %q", ae.Message, tc.message)
				}
				if tc.maxMessageBytes > 0 && len(ae.Message) > tc.maxMessageBytes {
					t.Errorf("message is %d bytes, want at most %d", len(ae.Message), tc.maxMessageBytes)
				}
				if ae.RetryAfter < tc.minRetryAfter || (tc.minRetryAfter > 0 && ae.RetryAfter > tc.minRetryAfter+time.Minute) {
					t.Errorf("RetryAfter = %s, want about %s", ae.RetryAfter, tc.minRetryAfter)
				}
			})
		}
	}
}

func TestTransportClassification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ConnectionRefusedIsRetried", func(t *testing.T) {
		t.Parallel()
		for _, keyed := range []bool{true, false} {
			_, err := newProvider(t, "http://127.0.0.1:1", keyed).Perform(ctx, request(1, "k", payload))
			if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeRetry {
				t.Fatalf("keyed=%t: connection refused classified %s", keyed, ae.Outcome)
			}
		}
	})

	t.Run("ContextEndedBeforeTheCallIsRetried", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, answer(200, nil, ""))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := newProvider(t, rc.srv.URL, false).Perform(cctx, request(1, "k", payload))
		if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeRetry {
			t.Fatalf("classified %s", ae.Outcome)
		}
		if rc.requests() != 0 {
			t.Fatal("a request was sent with a dead context")
		}
	})

	t.Run("TimeoutAfterWriting", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		for _, keyed := range []bool{true, false} {
			ep := endpoint(rc.srv.URL, keyed)
			ep.Timeout = 200 * time.Millisecond
			p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"orders": ep}})
			if err != nil {
				t.Fatal(err)
			}
			_, err = p.Perform(ctx, request(1, "k", payload))
			want := providers.OutcomeAmbiguous
			if keyed {
				want = providers.OutcomeRetry
			}
			if ae := attemptErr(t, err); ae.Outcome != want {
				t.Fatalf("keyed=%t: timeout after writing classified %s, want %s (%v)", keyed, ae.Outcome, want, ae)
			}
		}
	})

	t.Run("LostResponseThroughTheDouble", func(t *testing.T) {
		t.Parallel()
		d := newDouble(t, webhookdouble.Config{})
		d.Faults().Push(fault.Fault{Kind: fault.LoseResponse})
		_, err := newProvider(t, d.URL(), false).Perform(ctx, request(3, "k", payload))
		if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeAmbiguous {
			t.Fatalf("classified %s", ae.Outcome)
		}
		if d.EffectsFor(3) != 1 {
			t.Fatalf("EffectsFor = %d, want 1", d.EffectsFor(3))
		}
	})
}

func TestKeyedRetryIsAnsweredFromTheReceiversStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDouble(t, webhookdouble.Config{IdempotencyHeader: keyHeader})
	p := newProvider(t, d.URL(), true)
	// A gateway 503 after the receiver acted: retry is safe with the key.
	d.Faults().Push(fault.Fault{Kind: fault.ErrorAfter, Status: 503})
	_, err := p.Perform(ctx, request(5, "consumer:m5", payload))
	if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeRetry {
		t.Fatalf("503 classified %s, want retry", ae.Outcome)
	}
	res, err := p.Perform(ctx, request(5, "consumer:m5", payload))
	if err != nil || !res.Replayed || !strings.HasPrefix(res.ProviderRef, "dlv_") {
		t.Fatalf("retry: %+v, %v; want a replayed success", res, err)
	}
	if d.EffectsFor(5) != 1 || d.DuplicateEffects() != 0 {
		t.Fatalf("EffectsFor = %d, duplicates %d", d.EffectsFor(5), d.DuplicateEffects())
	}
}

func TestPerformRefusesWithoutSending(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, answer(200, nil, ""))
	ep := endpoint(rc.srv.URL, true)
	ep.MaxKeyLength = 8
	p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"orders": ep}})
	if err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]providers.Request{
		"InvalidPayload":  request(1, "k", `{"endpoint": "orders"}`),
		"UnknownEndpoint": request(1, "k", `{"endpoint": "other", "event": "a", "data": 1}`),
		"UnknownKind":     {IntentID: 1, IdempotencyKey: "k", Kind: "webhook.get", Payload: json.RawMessage(payload)},
		"EmptyKey":        request(1, " ", payload),
		"KeyWithNewline":  request(1, "k\r\nX-Evil: 1", payload),
		"KeyTooLong":      request(1, "123456789", payload),
	} {
		_, err := p.Perform(context.Background(), req)
		if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeFailed || ae.Message == "" {
			t.Errorf("%s: classified %v, want failed with a message", name, ae)
		}
	}
	if rc.requests() != 0 {
		t.Fatalf("the receiver got %d requests", rc.requests())
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	keyed := func(window time.Duration, maxLen int) webhookprovider.Endpoint {
		return webhookprovider.Endpoint{URL: "https://a.example/h", Secret: "s", IdempotencyHeader: "Idempotency-Key", KeyWindow: window, MaxKeyLength: maxLen}
	}
	unkeyed := webhookprovider.Endpoint{URL: "https://b.example/h", Secret: "s"}
	cases := []struct {
		name      string
		endpoints map[string]webhookprovider.Endpoint
		want      providers.Capabilities
	}{
		{"AllKeyed", map[string]webhookprovider.Endpoint{"a": keyed(24*time.Hour, 0), "b": keyed(time.Hour, 64), "c": keyed(48*time.Hour, 255)},
			providers.Capabilities{IdempotencyKeys: true, KeyWindow: time.Hour, MaxKeyLength: 64}},
		{"OneUnkeyed", map[string]webhookprovider.Endpoint{"a": keyed(time.Hour, 64), "b": unkeyed},
			providers.Capabilities{}},
		{"NoneKeyed", map[string]webhookprovider.Endpoint{"b": unkeyed}, providers.Capabilities{}},
	}
	for _, tc := range cases {
		p, err := webhookprovider.New(webhookprovider.Config{Endpoints: tc.endpoints})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := p.Capabilities(); got != tc.want {
			t.Errorf("%s: Capabilities = %+v, want %+v", tc.name, got, tc.want)
		}
		if p.Name() != "webhook" || len(p.Kinds()) != 1 || p.Kinds()[0] != "webhook.post" {
			t.Errorf("Name %q Kinds %v", p.Name(), p.Kinds())
		}
		if _, err := providers.NewRegistry(p); err != nil {
			t.Errorf("%s: NewRegistry: %v", tc.name, err)
		}
	}
}

// In a provider with one unkeyed endpoint, a keyed endpoint still gets its
// header, but a 503 is ambiguous: the provider as a whole is unkeyed, so the
// dispatcher would not check the key window before a retry.
func TestMixedProviderIsConservative(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, answer(503, nil, ""))
	p, err := webhookprovider.New(webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{
		"orders": endpoint(rc.srv.URL, true),
		"audit":  {URL: rc.srv.URL + "/audit", Secret: "other-secret"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Perform(context.Background(), request(1, "k", payload))
	if ae := attemptErr(t, err); ae.Outcome != providers.OutcomeAmbiguous {
		t.Fatalf("503 classified %s, want ambiguous", ae.Outcome)
	}
	if rc.got[0].Header.Get(keyHeader) != "k" {
		t.Fatal("the keyed endpoint did not get its idempotency header")
	}
}

func TestBadConfigNamesTheField(t *testing.T) {
	t.Parallel()
	good := webhookprovider.Endpoint{URL: "https://hooks.example/in", Secret: testSecret}
	with := func(f func(*webhookprovider.Endpoint)) map[string]webhookprovider.Endpoint {
		e := good
		f(&e)
		return map[string]webhookprovider.Endpoint{"orders": e}
	}
	cases := map[string]struct {
		cfg  webhookprovider.Config
		want string
	}{
		"NoEndpoints":        {webhookprovider.Config{}, "Config.Endpoints"},
		"EmptyName":          {webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"": good}}, "Config.Endpoints"},
		"NoURL":              {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.URL = "" })}, `Config.Endpoints["orders"].URL`},
		"RelativeURL":        {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.URL = "/in" })}, `Config.Endpoints["orders"].URL`},
		"FTPURL":             {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.URL = "ftp://hooks.example/in" })}, `Config.Endpoints["orders"].URL`},
		"CredentialsInURL":   {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.URL = "https://user:" + testSecret + "@hooks.example/in" })}, `Config.Endpoints["orders"].URL`},
		"NoSecret":           {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.Secret = "" })}, `Config.Endpoints["orders"].Secret`},
		"KeyedWithoutWindow": {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.IdempotencyHeader = "Idempotency-Key" })}, `Config.Endpoints["orders"].KeyWindow`},
		"BadHeaderName":      {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.IdempotencyHeader = "Idem Key"; e.KeyWindow = time.Hour })}, `Config.Endpoints["orders"].IdempotencyHeader`},
		"ReservedHeader":     {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.IdempotencyHeader = "x-outbox-signature"; e.KeyWindow = time.Hour })}, `Config.Endpoints["orders"].IdempotencyHeader`},
		"NegativeTimeout":    {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.Timeout = -time.Second })}, `Config.Endpoints["orders"].Timeout`},
		"NegativeMaxKey":     {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.MaxKeyLength = -1 })}, `Config.Endpoints["orders"].MaxKeyLength`},
		"BadReferenceHeader": {webhookprovider.Config{Endpoints: with(func(e *webhookprovider.Endpoint) { e.ReferenceHeader = "a:b" })}, `Config.Endpoints["orders"].ReferenceHeader`},
	}
	for name, tc := range cases {
		p, err := webhookprovider.New(tc.cfg)
		if err == nil {
			t.Errorf("%s: New succeeded (%v), want an error naming %s", name, p, tc.want)
			continue
		}
		if !errors.Is(err, webhookprovider.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming %s", name, err, tc.want)
		}
		noLeak(t, name+" error", err.Error())
	}
}

func TestSecretNeverPrintedOrLogged(t *testing.T) {
	t.Parallel()
	ep := endpoint("https://hooks.example", true)
	cfg := webhookprovider.Config{Endpoints: map[string]webhookprovider.Endpoint{"orders": ep}}
	p, err := webhookprovider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	logger.Info("configured", "config", cfg, "endpoint", ep, "provider", p)
	logger.Info("text", slog.Any("config", cfg))
	slog.New(slog.NewTextHandler(&logs, nil)).Info("configured", "config", cfg, "endpoint", ep)
	for _, s := range []string{
		fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg),
		fmt.Sprint(ep), fmt.Sprintf("%+v", ep), fmt.Sprintf("%#v", ep),
		fmt.Sprintf("%+v", struct{ C webhookprovider.Config }{cfg}),
		fmt.Sprint(p), fmt.Sprintf("%+v", p),
		logs.String(),
	} {
		noLeak(t, "output", s)
	}
	if !strings.Contains(logs.String(), "hooks.example") || !strings.Contains(logs.String(), "Idempotency-Key") {
		t.Fatalf("the log lost the useful parts: %s", logs.String())
	}

	// The error of a delivery that never arrived names the endpoint but
	// neither its secret nor its URL's path and query.
	_, err = newProvider(t, "http://127.0.0.1:1", true).Perform(context.Background(), request(1, "k", payload))
	if ae := attemptErr(t, err); !strings.Contains(ae.Message, `endpoint "orders" (http://127.0.0.1:1/…)`) {
		t.Fatalf("message %q does not say which endpoint failed", ae.Message)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	p := newProvider(t, "https://hooks.example", false)
	got := p.Redact(webhookprovider.KindPost, json.RawMessage(
		`{"endpoint":"orders","event":"user.signed_up","data":{"user":{"email":"jane@example.com","api_token":"tok_123","name":"Jane"},"cc":["Bob <bob@example.org>"],"n":3,"card":null}}`))
	want := `{"data":{"card":null,"cc":["b***@example.org"],"n":3,"user":{"api_token":"[redacted]","email":"[redacted]","name":"Jane"}},"endpoint":"orders","event":"user.signed_up"}`
	if string(got) != want {
		t.Fatalf("Redact =\n%s\nwant\n%s", got, want)
	}
	if got := p.Redact(webhookprovider.KindPost, json.RawMessage(`[1]`)); string(got) != `{"redacted":"unparseable payload"}` {
		t.Fatalf("Redact(array) = %s", got)
	}
}
