package adminhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/migrations"
)

func TestTokenIsRequiredEverywhereButHealthz(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", email("", "r")))
	before := b.dbState(t)

	protected := []req{
		{path: "/api/v1/intents"},
		{path: fmt.Sprintf("/api/v1/intents/%d", ids[0])},
		{path: "/api/v1/stats"},
		{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/cancel", ids[0])},
		{method: "POST", path: "/api/v1/messages", body: message("m-2", "billing", email("", "r"))},
		{path: "/metrics"},
		{path: "/readyz"},
		{path: "/riverui/api/queues"},
	}
	for _, auth := range []struct {
		name   string
		header string
	}{
		{"no token", ""},
		{"a forged token", "Bearer " + strings.Repeat("x", len(testToken))},
		{"a token one byte short", "Bearer " + testToken[:len(testToken)-1]},
		{"another scheme", "Basic " + testToken},
	} {
		for _, rq := range protected {
			rq.noAuth = true
			if auth.header != "" {
				rq.header = map[string]string{"Authorization": auth.header}
			}
			if r := b.do(t, rq); r.status != http.StatusUnauthorized {
				t.Errorf("%s %s with %s: %s; want 401", rq.method, rq.path, auth.name, r)
			} else if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", rq.method, rq.path)
			}
		}
	}
	if after := b.dbState(t); after != before {
		t.Errorf("refused requests changed the database:\nbefore %s\nafter  %s", before, after)
	}

	// The dashboard sends a browser to sign in.
	r := b.do(t, req{path: "/?state=in_doubt", noAuth: true})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/login?next="+url.QueryEscape("/?state=in_doubt") {
		t.Errorf("dashboard without a session: %d Location %q; want 303 to /login", r.status, r.header.Get("Location"))
	}
	r = b.do(t, req{path: "/riverui/", noAuth: true})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/login") {
		t.Errorf("River UI without a session: %d Location %q; want 303 to /login", r.status, r.header.Get("Location"))
	}

	// /healthz is open; the rest answers with the token.
	if r := b.do(t, req{path: "/healthz", noAuth: true}); r.status != http.StatusOK || r.body != "ok\n" {
		t.Errorf("/healthz: %s", r)
	}
	for _, path := range []string{"/api/v1/stats", "/readyz", "/metrics", "/riverui/api/queues", "/riverui/", "/"} {
		if r := b.do(t, req{path: path}); r.status != http.StatusOK {
			t.Errorf("GET %s with the token: %s", path, r)
		}
	}
}

func TestDashboardSessionAndCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	ids := b.record(t, message("m-1", "billing", email("a", "r"), email("b", "r")))
	b.setState(t, ids[0], intenttype.StateInDoubt)
	b.setState(t, ids[1], intenttype.StateInDoubt)

	// A wrong token does not sign in.
	form := url.Values{"token": {"not-the-token-at-all"}, "next": {"/"}}
	r := b.do(t, req{method: "POST", path: "/login", body: form.Encode(), noAuth: true, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
	if r.status != http.StatusUnauthorized || r.header.Get("Set-Cookie") != "" {
		t.Fatalf("login with a wrong token: %d, Set-Cookie %q; want 401 and no cookie", r.status, r.header.Get("Set-Cookie"))
	}

	// The right one sets an HttpOnly, SameSite=Strict cookie that is not
	// the token, and redirects to next (only ever on this server).
	form = url.Values{"token": {testToken}, "next": {"//evil.example/"}}
	r = b.do(t, req{method: "POST", path: "/login", body: form.Encode(), noAuth: true, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/" {
		t.Fatalf("login: %d Location %q; want 303 to /", r.status, r.header.Get("Location"))
	}
	resp := &http.Response{Header: r.header}
	cookies := resp.Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set cookies %v, want one", cookies)
	}
	session := cookies[0]
	if !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/", session)
	}
	if strings.Contains(session.Value, testToken) || strings.Contains(session.Raw, testToken) {
		t.Errorf("the session cookie holds the token")
	}
	withSession := []*http.Cookie{{Name: session.Name, Value: session.Value}}

	// The cookie reads the dashboard and the API.
	page := b.do(t, req{path: fmt.Sprintf("/intents/%d/resolve", ids[0]), noAuth: true, cookies: withSession})
	if page.status != http.StatusOK {
		t.Fatalf("confirm page with the session: %s", page)
	}
	csrf := scrapeCSRF(t, page.body)
	if r := b.do(t, req{path: "/api/v1/stats", noAuth: true, cookies: withSession}); r.status != http.StatusOK {
		t.Errorf("API GET with the session cookie: %s", r)
	}

	before := b.dbState(t)
	resolveForm := url.Values{"as": {"failed"}, "reason": {"bounced, per the provider"}, "confirmed": {"yes"}, "seen_state": {"in_doubt"}}
	formHeader := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	// Cookie-authenticated POSTs without the CSRF token, or with a forged
	// one, or one from another session, are refused and change nothing.
	otherSession := b.do(t, req{method: "POST", path: "/login", body: url.Values{"token": {testToken}}.Encode(), noAuth: true, header: formHeader})
	otherCSRF := ""
	if cs := (&http.Response{Header: otherSession.header}).Cookies(); len(cs) == 1 {
		p := b.do(t, req{path: fmt.Sprintf("/intents/%d/resolve", ids[0]), noAuth: true, cookies: []*http.Cookie{{Name: cs[0].Name, Value: cs[0].Value}}})
		otherCSRF = scrapeCSRF(t, p.body)
	}
	if otherCSRF == "" || otherCSRF == csrf {
		t.Errorf("two sessions share a CSRF token (%q)", otherCSRF)
	}
	for _, bad := range []string{"", "forged", otherCSRF} {
		f := url.Values{}
		for k, v := range resolveForm {
			f[k] = v
		}
		if bad != "" {
			f.Set("csrf", bad)
		}
		r := b.do(t, req{method: "POST", path: fmt.Sprintf("/intents/%d/resolve", ids[0]), body: f.Encode(), noAuth: true, cookies: withSession, header: formHeader})
		if r.status != http.StatusForbidden {
			t.Errorf("dashboard POST with CSRF %q: %d; want 403", bad, r.status)
		}
	}
	r = b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/cancel", ids[0]), noAuth: true, cookies: withSession})
	if r.status != http.StatusForbidden {
		t.Errorf("API POST with a session cookie and no %s: %s; want 403", "X-CSRF-Token", r)
	}
	// A cross-site browser request is refused even with the token.
	r = b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/cancel", ids[0]), header: map[string]string{"Sec-Fetch-Site": "cross-site"}})
	if r.status != http.StatusForbidden {
		t.Errorf("cross-site POST: %s; want 403", r)
	}
	if after := b.dbState(t); after != before {
		t.Fatalf("refused POSTs changed the database:\nbefore %s\nafter  %s", before, after)
	}

	// With the CSRF token the form resolves the intent.
	resolveForm.Set("csrf", csrf)
	r = b.do(t, req{method: "POST", path: fmt.Sprintf("/intents/%d/resolve", ids[0]), body: resolveForm.Encode(), noAuth: true, cookies: withSession, header: formHeader})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != fmt.Sprintf("/intents/%d?done=resolve", ids[0]) {
		t.Fatalf("dashboard resolve: %s (Location %q)", r, r.header.Get("Location"))
	}
	if got := b.intentState(t, ids[0]); got != intenttype.StateFailed {
		t.Errorf("intent is %s after resolving as failed", got)
	}
	// And the API accepts the session with X-CSRF-Token.
	r = b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/resolve", ids[1]), body: `{"as": "succeeded", "reason": "in the activity feed"}`, noAuth: true, cookies: withSession, header: map[string]string{"X-CSRF-Token": csrf}})
	if r.status != http.StatusOK || b.intentState(t, ids[1]) != intenttype.StateSucceeded {
		t.Errorf("API POST with session and CSRF header: %s", r)
	}

	// A session expires.
	b.clock.Advance(adminhttp.DefaultSessionTTL + time.Minute)
	if r := b.do(t, req{path: "/api/v1/stats", noAuth: true, cookies: withSession}); r.status != http.StatusUnauthorized {
		t.Errorf("API GET with an expired session: %s; want 401", r)
	}
	// A forged cookie is no session.
	if r := b.do(t, req{path: "/api/v1/stats", noAuth: true, cookies: []*http.Cookie{{Name: session.Name, Value: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.AAAA"}}}); r.status != http.StatusUnauthorized {
		t.Errorf("API GET with a forged cookie: %s; want 401", r)
	}
}

// TestLoopbackRule: without a token the server must listen on loopback
// only, and then answers only to loopback host names.
func TestLoopbackRule(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:80": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false, "192.168.1.1:8080": false,
	} {
		if got := adminhttp.IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}

	pool := &pgxpool.Pool{} // never used: New fails before
	base := adminhttp.Config{Audit: fixture.Audit(t, pool, nil), Intents: &intents.Client{}, Pool: pool}
	for _, tc := range []struct {
		name  string
		cfg   func(c adminhttp.Config) adminhttp.Config
		field string
		// handler: built with NewHandler, which has no default address.
		handler bool
		want    string
	}{
		{"all interfaces without token", func(c adminhttp.Config) adminhttp.Config { c.Addr = ":8080"; return c }, "Token", false, "serving on :8080, which is not a loopback address"},
		{"public address without token", func(c adminhttp.Config) adminhttp.Config { c.Addr = "0.0.0.0:8080"; return c }, "Token", false, "not a loopback address"},
		{"mounted without token or address", func(c adminhttp.Config) adminhttp.Config { return c }, "Token", true, "unless Addr names the loopback address"},
		{"short token", func(c adminhttp.Config) adminhttp.Config { c.Addr = ":8080"; c.Token = "short"; return c }, "Token", false, "16 bytes"},
		{"bad address", func(c adminhttp.Config) adminhttp.Config { c.Addr = "8080"; return c }, "Addr", false, "not host:port"},
		{"prefix without a slash", func(c adminhttp.Config) adminhttp.Config { c.Prefix = "outbox"; return c }, "Prefix", false, `"outbox" is not a path`},
		{"prefix with a trailing slash", func(c adminhttp.Config) adminhttp.Config { c.Prefix = "/outbox/"; return c }, "Prefix", true, "no trailing one"},
		{"prefix with a query", func(c adminhttp.Config) adminhttp.Config { c.Prefix = "/outbox?x"; return c }, "Prefix", false, "only letters"},
		{"no audit", func(c adminhttp.Config) adminhttp.Config { c.Audit = nil; return c }, "Audit", false, "required"},
		{"no intents client", func(c adminhttp.Config) adminhttp.Config { c.Intents = nil; return c }, "Intents", false, "required"},
		{"no pool", func(c adminhttp.Config) adminhttp.Config { c.Pool = nil; return c }, "Pool", false, "required"},
	} {
		var err error
		if tc.handler {
			_, err = adminhttp.NewHandler(tc.cfg(base))
		} else {
			_, err = adminhttp.New(tc.cfg(base))
		}
		var cfgErr *adminhttp.ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != tc.field || !errors.Is(err, adminhttp.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a ConfigError naming %s, saying %q", tc.name, err, tc.field, tc.want)
		}
	}

	// Open (no token) on loopback: the API needs nothing, but a Host that
	// is not loopback (DNS rebinding) is refused, and so are form-encoded
	// API POSTs and dashboard POSTs without CSRF.
	b := setup(t, setupOpts{})
	ids := b.record(t, message("m-1", "billing", email("", "r")))
	if r := b.do(t, req{path: "/api/v1/stats"}); r.status != http.StatusOK {
		t.Errorf("open API GET: %s", r)
	}
	hr, err := http.NewRequest("GET", b.url+"/api/v1/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Host = "rebound.example:8080"
	resp, err := b.http.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("open server with Host rebound.example: %d; want 421", resp.StatusCode)
	}
	before := b.dbState(t)
	if r := b.do(t, req{method: "POST", path: fmt.Sprintf("/api/v1/intents/%d/cancel", ids[0]), body: "reason=x", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("form-encoded API POST: %s; want 415", r)
	}
	if r := b.do(t, req{method: "POST", path: fmt.Sprintf("/intents/%d/cancel", ids[0]), body: "reason=x&confirmed=yes", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}); r.status != http.StatusForbidden {
		t.Errorf("dashboard POST without CSRF on an open server: %d; want 403", r.status)
	}
	if after := b.dbState(t); after != before {
		t.Errorf("refused POSTs changed the database")
	}
}

func TestReadyzMetricsAndRiverUI(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	if r := b.do(t, req{path: "/readyz"}); r.status != http.StatusOK || r.body != "ready\n" {
		t.Errorf("/readyz: %s", r)
	}
	r := b.do(t, req{path: "/metrics"})
	wantContains(t, "/metrics", r.body, "adminhttp_test_probe_total 3")

	r = b.do(t, req{path: "/riverui/"})
	if r.status != http.StatusOK || !strings.Contains(r.body, "<html") {
		t.Errorf("/riverui/: %d, want River's UI page", r.status)
	}
	r = b.do(t, req{path: "/riverui/api/queues"})
	if r.status != http.StatusOK || !strings.Contains(r.body, "outbox") && !strings.Contains(r.body, "data") {
		t.Errorf("/riverui/api/queues: %s", r)
	}

	// A database behind the binary's schema is not ready.
	if _, err := migrations.New(b.pool, nil).DownTo(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	r = b.do(t, req{path: "/readyz"})
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("/readyz on an unmigrated database: %s; want 503", r)
	}
	wantContains(t, "/readyz", r.body, "outboxd migrate")
	if r := b.do(t, req{path: "/healthz"}); r.status != http.StatusOK {
		t.Errorf("/healthz on an unmigrated database: %s; want 200", r)
	}
}
