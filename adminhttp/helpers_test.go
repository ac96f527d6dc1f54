package adminhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// quiet is the servers' logger: what they log is not what the tests check.
var quiet = slog.New(slog.DiscardHandler)

// testToken is the admin token of servers that need one: recognisable, so
// a response that contains it is a leak.
const testToken = "adm_LEAKCANARY_0123456789abcdef"

// Personal data in the payloads: audit redacts it, so no response may
// contain it.
const (
	receiptEmail   = "receipt.person@example.com"
	recipientEmail = "recipient.person@example.com"
)

const (
	paymentPayload = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true, "receipt_email": "` + receiptEmail + `"}`
	emailPayload   = `{"from": {"email": "shop@example.com"}, "to": [{"email": "` + recipientEmail + `"}], "subject": "Receipt", "text": "Thanks"}`
)

// message builds a POST /api/v1/messages body.
func message(id, consumer string, intentsJSON ...string) string {
	return fmt.Sprintf(`{"message_id": %q, "consumer": %q, "intents": [%s]}`, id, consumer, strings.Join(intentsJSON, ", "))
}

func payment(name, reference string) string {
	return fmt.Sprintf(`{"kind": "stripe.payment_intent", "name": %q, "reference": %q, "payload": %s}`, name, reference, paymentPayload)
}

func email(name, reference string) string {
	return fmt.Sprintf(`{"kind": "sendgrid.email", "name": %q, "reference": %q, "payload": %s}`, name, reference, emailPayload)
}

type testBundle struct {
	pool *pgxpool.Pool
	srv  *adminhttp.Server
	// prefix is the server's Config.Prefix.
	prefix string
	url    string
	token  string
	http   *http.Client // follows no redirects, keeps no cookies
	clock  *testkit.Clock
}

type setupOpts struct {
	token string
	// prefix is Config.Prefix.
	prefix        string
	tlsTerminated bool
	// pool, when set, is the database of another server: two processes
	// that share one database.
	pool *pgxpool.Pool
}

// setup starts an admin server on a loopback port over a fresh database.
func setup(t *testing.T, opts setupOpts) *testBundle {
	t.Helper()
	pool := opts.pool
	if pool == nil {
		pool, _ = pgtest.NewDB(t)
	}
	client, reg := fixture.Client(t, pool)
	gatherer := prometheus.NewRegistry()
	probe := prometheus.NewCounter(prometheus.CounterOpts{Name: "adminhttp_test_probe_total", Help: "A counter only the test registers."})
	probe.Add(3)
	gatherer.MustRegister(probe)
	clock := testkit.NewClock(time.Now())
	srv, err := adminhttp.New(adminhttp.Config{
		Addr:     "127.0.0.1:0",
		Prefix:   opts.prefix,
		Token:    opts.token,
		Audit:    fixture.Audit(t, pool, reg),
		Intents:  client,
		Pool:     pool,
		Gatherer: gatherer,
		Now:      clock.Now,
		Logger:   quiet,

		TLSTerminated: opts.tlsTerminated,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return &testBundle{
		pool: pool, srv: srv, prefix: opts.prefix, url: "http://" + srv.Addr(), token: opts.token, clock: clock,
		http: &http.Client{
			Timeout:       30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// response is what a request got back.
type response struct {
	status int
	header http.Header
	body   string
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// json decodes the body into v.
func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.body), v); err != nil {
		t.Fatalf("response is not JSON (%v): %s", err, r)
	}
}

// errorField returns the body's "error" and "field".
func (r response) errorFields(t *testing.T) (msg, field string) {
	t.Helper()
	var e struct{ Error, Field string }
	r.json(t, &e)
	return e.Error, e.Field
}

// req is one request; auth defaults to the bundle's bearer token.
type req struct {
	method, path, body string
	header             map[string]string
	noAuth             bool
	cookies            []*http.Cookie
	// revealOK allows personal data in the response (a reveal's).
	revealOK bool
}

func (b *testBundle) do(t *testing.T, rq req) response {
	t.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	method := rq.method
	if method == "" {
		method = http.MethodGet
	}
	r, err := http.NewRequest(method, b.url+rq.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost && rq.header["Content-Type"] == "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if b.token != "" && !rq.noAuth {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	for k, v := range rq.header {
		r.Header.Set(k, v)
	}
	for _, c := range rq.cookies {
		r.AddCookie(c)
	}
	resp, err := b.http.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, body: string(data)}
	if b.token != "" && strings.Contains(out.body, b.token) {
		t.Errorf("%s %s: the response contains the admin token", method, rq.path)
	}
	for _, pii := range []string{receiptEmail, recipientEmail} {
		if !rq.revealOK && strings.Contains(out.body, pii) {
			t.Errorf("%s %s: the response contains unredacted personal data %q", method, rq.path, pii)
		}
	}
	return out
}

// record posts a message and returns the ids of its intents.
func (b *testBundle) record(t *testing.T, body string) []int64 {
	t.Helper()
	r := b.do(t, req{method: "POST", path: b.prefix + "/api/v1/messages", body: body})
	if r.status != http.StatusCreated {
		t.Fatalf("POST /api/v1/messages: %s; want 201", r)
	}
	var out struct {
		Intents []struct{ ID int64 }
	}
	r.json(t, &out)
	ids := make([]int64, len(out.Intents))
	for i, in := range out.Intents {
		ids[i] = in.ID
	}
	return ids
}

// setState puts an intent in state as the dispatcher would have left it,
// with one attempt and the dispatcher's event; its job is completed unless
// the state is pending.
func (b *testBundle) setState(t *testing.T, id int64, state intenttype.State) {
	t.Helper()
	ctx := context.Background()
	outcome := map[intenttype.State]string{intenttype.StateSucceeded: "succeeded", intenttype.StateFailed: "failed", intenttype.StateInDoubt: "ambiguous"}[state]
	type stmt struct {
		sql  string
		args []any
	}
	stmts := []stmt{{
		`UPDATE outbox_intents SET state = $2::text, attempt_count = 1, updated_at = now(),
			queued = queued AND $2::text IN ('pending', 'dispatching'),
			finished_at = CASE WHEN $2::text IN ('succeeded', 'failed', 'cancelled') THEN now() END,
			last_error = CASE WHEN $2::text = 'in_doubt' THEN 'ambiguous: 502 Bad Gateway after the request was sent; SendGrid cannot be asked' END
			WHERE id = $1`, []any{id, string(state)},
	}}
	if outcome != "" {
		stmts = append(stmts,
			stmt{`INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, error)
				VALUES ($1, 1, now() - interval '2 seconds', now(), $2::text, CASE WHEN $2::text = 'ambiguous' THEN 502 ELSE 200 END,
				CASE WHEN $2::text = 'ambiguous' THEN '502 Bad Gateway after the request was sent' END)`, []any{id, outcome}},
			stmt{`INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason) VALUES ($1, 'dispatcher', 'pending', $2::text, 'attempt 1: ' || $3::text)`, []any{id, string(state), outcome}},
		)
	}
	for _, st := range stmts {
		if _, err := b.pool.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("setState %s: %v", state, err)
		}
	}
	// Written behind the store's back: bring its finished counts in line.
	store, err := intentstore.New(b.pool, nil)
	if err == nil {
		err = store.Recount(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// dbState is everything the API could change: every intent row, and how
// many events, attempts, markers and dispatch jobs there are.
func (b *testBundle) dbState(t *testing.T) string {
	t.Helper()
	var out string
	err := b.pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT json_agg(i ORDER BY id)::text FROM outbox_intents i), '[]') || ' events=' ||
		(SELECT count(*) FROM outbox_intent_events) || ' attempts=' || (SELECT count(*) FROM outbox_intent_attempts) ||
		' markers=' || (SELECT count(*) FROM outbox_processed_messages) ||
		' jobs=' || (SELECT count(*) FROM river_job WHERE kind = 'outbox_dispatch' AND state <> 'completed')`).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *testBundle) intentState(t *testing.T, id int64) intenttype.State {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), `SELECT state FROM outbox_intents WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return intenttype.State(s)
}

var csrfPattern = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// scrapeCSRF returns the CSRF token of a page's form.
func scrapeCSRF(t *testing.T, html string) string {
	t.Helper()
	m := csrfPattern.FindStringSubmatch(html)
	if m == nil {
		t.Fatalf("no CSRF field in the page:\n%s", html)
	}
	return m[1]
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}
