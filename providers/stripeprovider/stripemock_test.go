package stripeprovider_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// stripeMockKey is shaped like a test-mode secret key, as stripe-mock wants.
const stripeMockKey = "sk_test_stripemock0123456789"

// fullPayload sets every field the adapter can send, so that each parameter
// it maps to reaches stripe-mock's validation.
const fullPayload = `{"amount": 2000, "currency": "usd", "customer": "cus_9s6XKzkNRiz8i3", "payment_method": "pm_card_visa",
 "confirm": true, "description": "order 42", "receipt_email": "jane@example.com", "statement_descriptor_suffix": "ORDER 42",
 "metadata": {"order_id": "42"}}`

// TestStripeMockAcceptsOurRequests sends the adapter's real requests to
// stripe-mock, which validates parameters against Stripe's OpenAPI
// specification: a parameter Stripe would reject fails the build. stripe-mock
// is stateless, returns fixtures and ignores idempotency keys, so only the
// requests' acceptance is asserted, not what comes back.
//
// The binary is found through $STRIPE_MOCK_BIN, PATH or $(go env
// GOPATH)/bin. Without it the test is skipped, except under CI=true, where
// it fails: CI must install it (`make test` does).
func TestStripeMockAcceptsOurRequests(t *testing.T) {
	t.Parallel()
	mock := startStripeMock(t)
	rec := &recorder{}
	proxy := httptest.NewServer(rec.wrap(httputil.NewSingleHostReverseProxy(mock)))
	t.Cleanup(proxy.Close)

	p, err := stripeprovider.New(stripeprovider.Config{APIKey: stripeMockKey, BaseURL: proxy.URL, HTTPClient: &http.Client{Timeout: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := providers.Request{IntentID: 42, Namespace: "ns-stripemock", IdempotencyKey: "ns-stripemock:msg-42", KeyFirstUsedAt: time.Now(),
		Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(fullPayload), Attempt: 1}

	t.Run("PerformWithEveryField", func(t *testing.T) {
		mustAccept(t, p, req)
		sent := rec.last(t, http.MethodPost, "/v1/payment_intents")
		form := sent.params
		// Every payload field reached the request (so stripe-mock validated
		// it), plus the intent's identity the adapter adds.
		for _, k := range []string{"amount", "currency", "customer", "payment_method", "confirm", "description", "receipt_email",
			"statement_descriptor_suffix", "metadata[order_id]", "metadata[intent_id]", "metadata[outbox_namespace]", "metadata[outbox_key]"} {
			if !form.Has(k) {
				t.Errorf("the request lacks %q; sent %v", k, form)
			}
		}
		if form.Get("metadata[outbox_namespace]") != "ns-stripemock" || form.Get("metadata[outbox_key]") != "ns-stripemock:msg-42" {
			t.Errorf("identity metadata %v", form)
		}
		if sent.header.Get("Idempotency-Key") != "ns-stripemock:msg-42" {
			t.Error("the request carried no Idempotency-Key")
		}
	})

	// Every combination of the charge parameters the adapter sends: the
	// redirect-free default, off session, manual capture, saving the
	// payment method, payment_method_types, and automatic payment methods
	// with a return_url.
	t.Run("PerformEveryChargeCombination", func(t *testing.T) {
		for i, payload := range acceptedCharges {
			r := req
			r.IdempotencyKey = "ns-stripemock:combination-" + strconv.Itoa(i)
			r.Payload = json.RawMessage(payload)
			mustAccept(t, p, r)
			form := rec.last(t, http.MethodPost, "/v1/payment_intents").params
			var pl map[string]any
			if err := json.Unmarshal([]byte(payload), &pl); err != nil {
				t.Fatal(err)
			}
			for k := range pl {
				if k == "payment_method_types" {
					k = "payment_method_types[0]"
				}
				if k == "automatic_payment_methods" {
					k = "automatic_payment_methods[enabled]"
				}
				if !form.Has(k) {
					t.Errorf("%s: the request lacks %q; sent %v", payload, k, form)
				}
			}
			if _, given := pl["automatic_payment_methods"]; pl["confirm"] == true && !given && pl["payment_method_types"] == nil {
				if form.Get("automatic_payment_methods[enabled]") != "true" || form.Get("automatic_payment_methods[allow_redirects]") != "never" {
					t.Errorf("%s: no redirect-free default; sent %v", payload, form)
				}
			}
		}
		// stripe-mock refuses an unknown value where the spec has an enum.
		if status, body := rawPost(t, mock.String()+"/v1/payment_intents", "amount=2000&currency=usd&capture_method=later"); status != http.StatusBadRequest {
			t.Errorf("capture_method=later: %d %s", status, body)
		}
	})

	t.Run("ReconcileList", func(t *testing.T) {
		// stripe-mock's fixture carries no metadata, so it is not the
		// intent's: the (one page) listing proves absence.
		if _, found, err := p.Reconcile(ctx, req); err != nil || found {
			t.Fatalf("stripe-mock refused the adapter's list request, or it was misread: %v, %v", found, err)
		}
		q := rec.last(t, http.MethodGet, "/v1/payment_intents").params
		gte := req.KeyFirstUsedAt.Add(-stripeprovider.ListClockSkewMargin).Unix()
		if q.Get("customer") != "cus_9s6XKzkNRiz8i3" || q.Get("created[gte]") != strconv.FormatInt(gte, 10) || q.Get("limit") != "100" || len(q) != 3 {
			t.Fatalf("list query %v", q)
		}
		// The next page's request, as Reconcile sends it after has_more.
		status, body := rawGet(t, mock.String()+"/v1/payment_intents?"+q.Encode()+"&starting_after=pi_1")
		if status != http.StatusOK {
			t.Fatalf("stripe-mock refused a next-page request: %d %s", status, body)
		}
		// Without a customer or a first use, neither filter is sent.
		r := req
		r.KeyFirstUsedAt = time.Time{}
		r.Payload = json.RawMessage(`{"amount": 2000, "currency": "usd"}`)
		if _, _, err := p.Reconcile(ctx, r); err != nil {
			t.Fatalf("list without filters: %v", err)
		}
		if q := rec.last(t, http.MethodGet, "/v1/payment_intents").params; len(q) != 1 || q.Get("limit") != "100" {
			t.Fatalf("list query %v", q)
		}
	})

	t.Run("ReconcileLegacySearch", func(t *testing.T) {
		// An intent without a namespace is searched for by intent id;
		// stripe-mock's fixture does not match the payload, and search
		// never proves absence.
		r := req
		r.Namespace = ""
		r.Payload = json.RawMessage(`{"amount": 2000, "currency": "usd"}`)
		if _, found, err := p.Reconcile(ctx, r); found || !errors.Is(err, providers.ErrAbsenceNotProven) {
			t.Fatalf("stripe-mock refused the adapter's search request, or it was misread: %v, %v", found, err)
		}
		q := rec.last(t, http.MethodGet, "/v1/payment_intents/search").params
		if q.Get("query") != "metadata['intent_id']:'42'" {
			t.Fatalf("search query %q", q.Get("query"))
		}
	})

	// Refunds, captures and cancels with every field their payloads take.
	t.Run("MoneyKinds", func(t *testing.T) {
		for _, tc := range []struct {
			kind, payload, path string
			want                []string
			metadata            map[string]string
		}{
			{stripeprovider.KindRefund, `{"payment_intent": "pi_123", "amount": 500, "reason": "requested_by_customer", "metadata": {"order_id": "42"}}`,
				"/v1/refunds", []string{"payment_intent", "amount", "reason", "metadata[order_id]"},
				map[string]string{"metadata[outbox_namespace]": "ns-stripemock", "metadata[outbox_key]": "ns-stripemock:money", "metadata[intent_id]": "42"}},
			{stripeprovider.KindRefund, `{"payment_intent": "pi_123"}`, "/v1/refunds", []string{"payment_intent"}, nil},
			{stripeprovider.KindCapture, `{"payment_intent": "pi_123", "amount_to_capture": 500, "metadata": {"shipment": "s-1"}}`,
				"/v1/payment_intents/pi_123/capture", []string{"amount_to_capture", "metadata[shipment]"},
				map[string]string{"metadata[outbox_capture_namespace]": "ns-stripemock", "metadata[outbox_capture_key]": "ns-stripemock:money", "metadata[outbox_capture_intent_id]": "42"}},
			{stripeprovider.KindCapture, `{"payment_intent": "pi_123"}`, "/v1/payment_intents/pi_123/capture", nil, nil},
			{stripeprovider.KindCancel, `{"payment_intent": "pi_123", "cancellation_reason": "abandoned"}`,
				"/v1/payment_intents/pi_123/cancel", []string{"cancellation_reason"}, nil},
		} {
			r := req
			r.Kind = tc.kind
			r.IdempotencyKey = "ns-stripemock:money"
			r.Payload = json.RawMessage(tc.payload)
			if _, err := p.Perform(ctx, r); err != nil {
				if ae := providers.Classify(err); ae.HTTPStatus != http.StatusOK && ae.HTTPStatus != 0 || ae.HTTPStatus == 0 && ae.Outcome != providers.OutcomeFailed {
					t.Fatalf("%s %s: stripe-mock refused it: %v", tc.kind, tc.payload, err)
				}
			}
			sent := rec.last(t, http.MethodPost, tc.path)
			for _, k := range tc.want {
				if !sent.params.Has(k) {
					t.Errorf("%s: the request lacks %q; sent %v", tc.payload, k, sent.params)
				}
			}
			for k, v := range tc.metadata {
				if sent.params.Get(k) != v {
					t.Errorf("%s: %s = %q, want %q", tc.payload, k, sent.params.Get(k), v)
				}
			}
			if sent.header.Get("Idempotency-Key") != "ns-stripemock:money" {
				t.Errorf("%s: no Idempotency-Key", tc.payload)
			}

			// Reconcile's read is accepted too: whatever stripe-mock's
			// fixture says, no refusal of the request.
			if _, _, err := p.Reconcile(ctx, r); err != nil {
				if ae := providers.Classify(err); ae.HTTPStatus >= 400 {
					t.Fatalf("%s: stripe-mock refused the reconcile read: %v", tc.kind, err)
				}
			}
		}
		q := rec.last(t, http.MethodGet, "/v1/refunds").params
		if q.Get("payment_intent") != "pi_123" || q.Get("limit") != "100" || !q.Has("created[gte]") || len(q) != 3 {
			t.Fatalf("refund list query %v", q)
		}
		if status, body := rawGet(t, mock.String()+"/v1/refunds?"+q.Encode()+"&starting_after=re_1"); status != http.StatusOK {
			t.Fatalf("stripe-mock refused a next page of refunds: %d %s", status, body)
		}
		rec.last(t, http.MethodGet, "/v1/payment_intents/pi_123")
		// stripe-mock refuses what Stripe would here too.
		if status, body := rawPost(t, mock.String()+"/v1/refunds", "payment_intent=pi_123&reason=because"); status != http.StatusBadRequest {
			t.Errorf("reason=because: %d %s", status, body)
		}
		if status, body := rawPost(t, mock.String()+"/v1/payment_intents/pi_123/cancel", "cancellation_reason=bored"); status != http.StatusBadRequest {
			t.Errorf("cancellation_reason=bored: %d %s", status, body)
		}
	})

	// The check must be able to fail: stripe-mock refuses what Stripe would.
	t.Run("BadParametersAreRefused", func(t *testing.T) {
		for name, form := range map[string]string{
			"UnknownParameter": "amount=2000&currency=usd&definitely_not_a_stripe_param=1",
			"MissingCurrency":  "amount=2000",
			"BadMetadataShape": "amount=2000&currency=usd&metadata=notamap",
		} {
			status, body := rawPost(t, mock.String()+"/v1/payment_intents", form)
			if status != http.StatusBadRequest {
				t.Errorf("%s: stripe-mock answered %d (%s), want 400", name, status, body)
			}
		}
		for name, query := range map[string]string{
			"UnknownListParameter": "metadata[outbox_key]=k",
			"BadLimit":             "limit=x",
		} {
			status, body := rawGet(t, mock.String()+"/v1/payment_intents?"+query)
			if status != http.StatusBadRequest {
				t.Errorf("%s: stripe-mock answered %d (%s), want 400", name, status, body)
			}
		}
	})
}

// mustAccept performs req against stripe-mock and fails unless it answered
// 200. Its fixture PaymentIntent is requires_payment_method whatever was
// sent, which Perform reports as a failed charge; only the acceptance of
// the request counts here.
func mustAccept(t *testing.T, p *stripeprovider.Provider, req providers.Request) {
	t.Helper()
	res, err := p.Perform(context.Background(), req)
	if err != nil {
		ae := providers.Classify(err)
		if ae.HTTPStatus != http.StatusOK {
			t.Fatalf("stripe-mock refused the adapter's PaymentIntent request: %v", err)
		}
		return
	}
	if !strings.HasPrefix(res.ProviderRef, "pi_") || res.HTTPStatus != http.StatusOK {
		t.Fatalf("result %+v", res)
	}
}

// startStripeMock starts stripe-mock on a free loopback port, waits until it
// accepts connections and stops it at cleanup. It skips the test when the
// binary is missing, unless CI=true.
func startStripeMock(t *testing.T) *url.URL {
	t.Helper()
	bin := findStripeMock()
	if bin == "" {
		msg := "stripe-mock not found: install it with `go install github.com/stripe/stripe-mock@v0.203.0` or set STRIPE_MOCK_BIN"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// HTTPS is on by default on port 12112 unless given its own address.
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok && !sent {
				addrs <- strings.TrimSpace(a)
				sent = true
			}
		}
		if !sent {
			close(addrs)
		}
	}()
	var addr string
	select {
	case a, ok := <-addrs:
		if !ok {
			t.Fatalf("stripe-mock exited without listening; stderr: %s", stderr.String())
		}
		addr = a
	case <-time.After(60 * time.Second):
		t.Fatalf("stripe-mock did not report its address within 60s; stderr: %s", stderr.String())
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock does not accept connections at %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &url.URL{Scheme: "http", Host: addr}
}

func findStripeMock() string {
	if p := os.Getenv("STRIPE_MOCK_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "stripe-mock")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

func rawPost(t *testing.T, u, form string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+stripeMockKey)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func rawGet(t *testing.T, u string) (int, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+stripeMockKey)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// recorder keeps the requests passed to stripe-mock, to check what the
// adapter sent.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path string
	params       url.Values
	header       http.Header
}

func (rc *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		params := r.URL.Query()
		if len(body) > 0 {
			params, _ = url.ParseQuery(string(body))
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, recorded{r.Method, r.URL.Path, params, r.Header.Clone()})
		rc.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// last returns the latest request for method and path.
func (rc *recorder) last(t *testing.T, method, path string) recorded {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for j := len(rc.reqs) - 1; j >= 0; j-- {
		if rc.reqs[j].method == method && rc.reqs[j].path == path {
			return rc.reqs[j]
		}
	}
	t.Fatalf("no %s %s reached stripe-mock", method, path)
	return recorded{}
}
