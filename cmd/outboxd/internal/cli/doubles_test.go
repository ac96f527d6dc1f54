package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

func TestDoublesServeUntilCancelledAndPrintTheEnvironment(t *testing.T) {
	t.Parallel()
	env, stdout, stderr := environment(nil, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"doubles", "--stripe-addr", "127.0.0.1:0", "--sendgrid-addr", "127.0.0.1:0", "--seed", "7"}, env)
	}()

	exports := map[string]string{}
	exportLine := regexp.MustCompile(`(?m)^  export ([A-Z_]+)=(\S+)$`)
	deadline := time.Now().Add(10 * time.Second)
	for len(exports) < 4 {
		select {
		case code := <-done:
			t.Fatalf("doubles exited %d before serving\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("doubles printed no environment within 10s\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
		for _, m := range exportLine.FindAllStringSubmatch(stdout.String(), -1) {
			exports[m[1]] = m[2]
		}
		time.Sleep(10 * time.Millisecond)
	}
	if exports["STRIPE_API_KEY"] != "sk_test_double" || exports["SENDGRID_API_KEY"] != "SG.double-key" {
		t.Errorf("exported keys = %v, want the doubles' keys", exports)
	}

	// The printed environment is enough for the real adapter to perform.
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: exports["STRIPE_API_KEY"], BaseURL: exports["STRIPE_API_BASE"]})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sp.Perform(ctx, providers.Request{IntentID: 1, IdempotencyKey: "doubles:1", Kind: stripeprovider.KindPaymentIntent, Attempt: 1,
		Payload: json.RawMessage(`{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`)})
	if err != nil || res.ProviderRef == "" {
		t.Fatalf("payment through the printed environment = %+v, %v", res, err)
	}

	for base, field := range map[string]string{exports["STRIPE_API_BASE"]: "payment_intents", exports["SENDGRID_API_BASE"]: "emails"} {
		stats := getStats(t, base)
		want := 0.0
		if field == "payment_intents" {
			want = 1
		}
		if got, ok := stats[field].(float64); !ok || got != want {
			t.Errorf("%s/_double/stats = %v, want %s %g", base, stats, field, want)
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("doubles exited %d after cancellation, want 0\nstderr:\n%s", code, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("doubles still running 10s after cancellation")
	}
	wantContains(t, "doubles stdout", stdout.String(), "Stopped. Stripe double: 1 PaymentIntents")
	if _, err := http.Get(exports["STRIPE_API_BASE"] + "/_double/stats"); err == nil {
		t.Errorf("the Stripe double still answers after shutdown")
	}
}

func getStats(t *testing.T, base string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/_double/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/_double/stats: %d, %v", base, resp.StatusCode, err)
	}
	return stats
}

func TestDoublesRefuseBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--fault-rate", "1.5"}, 2, "--fault-rate must be between 0 and 1"},
		{[]string{"--fault-rate", "-0.1"}, 2, "--fault-rate"},
		{[]string{"--seed", "x"}, 2, "-seed"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--stripe-addr", "127.0.0.1:0", "--sendgrid-addr", "not an address"}, 1, "--sendgrid-addr"},
	} {
		r := outboxd(t, invocation{args: append([]string{"doubles"}, tc.args...)})
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("doubles %q: %s; want exit %d naming %q", tc.args, r, tc.code, tc.want)
		}
	}
	r := outboxd(t, invocation{args: []string{"doubles", "--help"}})
	wantContains(t, "doubles --help", r.stdout+r.stderr, "Usage: outboxd doubles", "-stripe-addr", "-sendgrid-addr", "-fault-rate", "SIGTERM")
}

// TestDoublesHelpShowsTheLookUpsAnOperatorRehearses: 'outboxd doubles
// --help' documents the look-ups 'intents show' sends an operator to
// (SendGrid's Email Activity API, Stripe's search), and the commands it
// shows find, at running doubles, the effect an intent's key names.
func TestDoublesHelpShowsTheLookUpsAnOperatorRehearses(t *testing.T) {
	t.Parallel()
	help := outboxd(t, invocation{args: []string{"doubles", "--help"}}).stdout
	wantContains(t, "doubles --help", help, "GET /v3/messages?query=", "GET /v1/payment_intents/search?query=")
	queries := regexp.MustCompile(`--data-urlencode "query=(.*)" \\\n\s*"\$(\w+)(/\S+)"`).FindAllStringSubmatch(help, -1)
	if len(queries) != 2 {
		t.Fatalf("doubles --help shows %d look-up commands, want 2 (SendGrid's and Stripe's):\n%s", len(queries), help)
	}

	env, stdout, stderr := environment(nil, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"doubles", "--stripe-addr", "127.0.0.1:0", "--sendgrid-addr", "127.0.0.1:0"}, env)
	}()
	defer func() { cancel(); <-done }()
	exports := map[string]string{}
	testkit.Eventually(t, 10*time.Second, "the doubles to print their environment", func() bool {
		for _, m := range regexp.MustCompile(`(?m)^  export ([A-Z_]+)=(\S+)$`).FindAllStringSubmatch(stdout.String(), -1) {
			exports[m[1]] = m[2]
		}
		return len(exports) == 4 || strings.Contains(stderr.String(), "doubles")
	})
	if len(exports) != 4 {
		t.Fatalf("the doubles printed %v; stderr:\n%s", exports, stderr)
	}

	const key = "ns1.0/billing:order-42:receipt"
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: exports["STRIPE_API_KEY"], BaseURL: exports["STRIPE_API_BASE"]})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: exports["SENDGRID_API_KEY"], BaseURL: exports["SENDGRID_API_BASE"]})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		provider providers.Provider
		kind     string
		payload  string
	}{
		{sp, stripeprovider.KindPaymentIntent, `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`},
		{gp, sendgridprovider.KindEmail, `{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`},
	} {
		req := providers.Request{IntentID: 1, IdempotencyKey: key, Namespace: "ns1", Kind: p.kind, Attempt: 1, Payload: json.RawMessage(p.payload)}
		if _, err := p.provider.Perform(ctx, req); err != nil {
			t.Fatalf("%s: %v", p.kind, err)
		}
	}

	for _, q := range queries {
		query, variable, path := strings.ReplaceAll(strings.ReplaceAll(q[1], `\"`, `"`), "KEY", key), q[2], q[3]
		keyVariable := strings.Replace(variable, "_BASE", "_KEY", 1)
		req, err := http.NewRequest(http.MethodGet, exports[variable]+path+"?"+url.Values{"query": {query}}.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+exports[keyVariable])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var found struct {
			Messages []json.RawMessage `json:"messages"`
			Data     []json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &found); resp.StatusCode != http.StatusOK || err != nil || len(found.Messages)+len(found.Data) != 1 {
			t.Errorf("GET $%s%s with the help's query %s: %d %s; want the one effect of the key", variable, path, query, resp.StatusCode, body)
		}
	}
}
