package adminhttp_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adminhttp"
)

var formHeader = map[string]string{"Content-Type": "application/x-www-form-urlencoded"}

// signIn signs in on b's server with token and returns the session cookie.
func (b *testBundle) signIn(t *testing.T, token string) *http.Cookie {
	t.Helper()
	r := b.do(t, req{method: "POST", path: "/login", body: url.Values{"token": {token}, "next": {"/"}}.Encode(), noAuth: true, header: formHeader})
	if r.status != http.StatusSeeOther {
		t.Fatalf("sign-in: %s; want 303", r)
	}
	return sessionCookieOf(t, r.header)
}

// sessionCookieOf returns the one session cookie a response set.
func sessionCookieOf(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	cookies := (&http.Response{Header: h}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("response set cookies %v; want one", cookies)
	}
	return cookies[0]
}

// TestSessionCookieIsSecureOverTLSOrBehindATLSProxy: the session cookie is
// Secure when the request came over TLS, and always when the operator says
// TLS is terminated in front of the server.
func TestSessionCookieIsSecureOverTLSOrBehindATLSProxy(t *testing.T) {
	t.Parallel()
	signInRequest := func() *http.Request {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}

	// Plain HTTP, no proxy: not Secure (a browser would drop it), but
	// Secure over TLS.
	plain := setup(t, setupOpts{token: testToken})
	if c := plain.signIn(t, testToken); c.Secure {
		t.Errorf("session cookie over plain HTTP without --admin-tls-terminated is Secure: %s", c.Raw)
	}
	rq := signInRequest()
	rq.TLS = &tls.ConnectionState{}
	w := httptest.NewRecorder()
	plain.srv.Handler().ServeHTTP(w, rq)
	if c := sessionCookieOf(t, w.Header()); !c.Secure {
		t.Errorf("session cookie over TLS is not Secure: %s", c.Raw)
	}

	// Behind a TLS-terminating proxy: Secure on sign-in and on sign-out.
	proxied := setup(t, setupOpts{token: testToken, tlsTerminated: true})
	c := proxied.signIn(t, testToken)
	if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie behind a TLS proxy: %s; want Secure, HttpOnly, SameSite=Strict", c.Raw)
	}
	withSession := []*http.Cookie{{Name: c.Name, Value: c.Value}}
	page := proxied.do(t, req{path: "/", noAuth: true, cookies: withSession})
	r := proxied.do(t, req{method: "POST", path: "/logout", body: url.Values{"csrf": {scrapeCSRF(t, page.body)}}.Encode(), noAuth: true, cookies: withSession, header: formHeader})
	if r.status != http.StatusSeeOther {
		t.Fatalf("logout: %s", r)
	}
	if c := sessionCookieOf(t, r.header); !c.Secure || c.MaxAge >= 0 {
		t.Errorf("logout behind a TLS proxy cleared the cookie with %s; want Secure and Max-Age=0", c.Raw)
	}

	// Without a token the dashboard starts a session on its own: Secure
	// behind the proxy too.
	open := setup(t, setupOpts{tlsTerminated: true})
	r = open.do(t, req{path: "/"})
	if c := sessionCookieOf(t, r.header); !c.Secure {
		t.Errorf("open server's session cookie behind a TLS proxy is not Secure: %s", c.Raw)
	}
}

// TestFailedSignInsAreRateLimitedPerClient: wrong tokens from one client
// are bounded by a token bucket on the server's clock; beyond it /login
// answers 429 with Retry-After, even to the right token, while other
// clients and, once refilled, the same one sign in as before.
func TestFailedSignInsAreRateLimitedPerClient(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	signInFrom := func(remote, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(url.Values{"token": {token}, "next": {"/"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		b.srv.Handler().ServeHTTP(w, r)
		if strings.Contains(w.Body.String(), testToken) {
			t.Errorf("a sign-in response contains the token")
		}
		return w
	}
	const wrong = "not-the-admin-token-at-all"
	refill := adminhttp.LoginFailureRefill
	retryAfter := strconv.Itoa(int((refill + time.Second - 1) / time.Second))

	// Right tokens do not count against the budget.
	for i := range 2 * adminhttp.LoginFailureBurst {
		if w := signInFrom("198.51.100.7:4000", testToken); w.Code != http.StatusSeeOther {
			t.Fatalf("right sign-in %d: %d; want 303", i+1, w.Code)
		}
	}
	// A burst of wrong ones is answered 401, then 429.
	for i := range adminhttp.LoginFailureBurst {
		if w := signInFrom("198.51.100.7:4000", wrong); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong sign-in %d of the burst: %d; want 401", i+1, w.Code)
		}
	}
	w := signInFrom("198.51.100.7:4001", wrong)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != retryAfter {
		t.Fatalf("wrong sign-in past the burst: %d Retry-After %q; want 429 and %s", w.Code, w.Header().Get("Retry-After"), retryAfter)
	}
	wantContains(t, "429 page", w.Body.String(), "Too many failed sign-ins")
	// Now even the right token is refused, and no session is started.
	if w := signInFrom("198.51.100.7:4002", testToken); w.Code != http.StatusTooManyRequests || w.Header().Get("Set-Cookie") != "" {
		t.Fatalf("right sign-in while limited: %d, Set-Cookie %q; want 429 and no cookie", w.Code, w.Header().Get("Set-Cookie"))
	}
	// Another client is not affected; one in the same IPv6 /64 is.
	if w := signInFrom("203.0.113.9:5000", wrong); w.Code != http.StatusUnauthorized {
		t.Errorf("another client's wrong sign-in: %d; want 401", w.Code)
	}
	for range adminhttp.LoginFailureBurst {
		signInFrom("[2001:db8:1:2::1]:6000", wrong)
	}
	if w := signInFrom("[2001:db8:1:2:ffff::9]:6000", wrong); w.Code != http.StatusTooManyRequests {
		t.Errorf("wrong sign-in from the same IPv6 /64: %d; want 429", w.Code)
	}
	if w := signInFrom("[2001:db8:1:3::1]:6000", wrong); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong sign-in from another IPv6 /64: %d; want 401", w.Code)
	}

	// Just short of a refill: still limited, with the rest of the wait.
	b.clock.Advance(refill - 2*time.Second)
	if w := signInFrom("198.51.100.7:4000", wrong); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" {
		t.Errorf("wrong sign-in 2s before the refill: %d Retry-After %q; want 429 and 2", w.Code, w.Header().Get("Retry-After"))
	}
	// One refill buys one attempt.
	b.clock.Advance(2 * time.Second)
	if w := signInFrom("198.51.100.7:4000", wrong); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong sign-in after one refill: %d; want 401", w.Code)
	}
	if w := signInFrom("198.51.100.7:4000", testToken); w.Code != http.StatusTooManyRequests {
		t.Errorf("sign-in right after the refill was spent: %d; want 429", w.Code)
	}
	// Once the bucket has refilled the client signs in again.
	b.clock.Advance(refill)
	if w := signInFrom("198.51.100.7:4000", testToken); w.Code != http.StatusSeeOther {
		t.Errorf("right sign-in after a refill: %d; want 303", w.Code)
	}
	// And over the server's real listener the rule is the same.
	for range adminhttp.LoginFailureBurst {
		b.do(t, req{method: "POST", path: "/login", body: url.Values{"token": {wrong}}.Encode(), noAuth: true, header: formHeader})
	}
	if r := b.do(t, req{method: "POST", path: "/login", body: url.Values{"token": {wrong}}.Encode(), noAuth: true, header: formHeader}); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Errorf("wrong sign-in past the burst over TCP: %d Retry-After %q; want 429 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
}

// sessionRows counts the sessions the database holds.
func (b *testBundle) sessionRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_admin_sessions`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sessionWorks reports whether a session cookie still opens the API, and
// checks that the dashboard agrees.
func (b *testBundle) sessionWorks(t *testing.T, c *http.Cookie) bool {
	t.Helper()
	withSession := []*http.Cookie{{Name: c.Name, Value: c.Value}}
	api := b.do(t, req{path: "/api/v1/stats", noAuth: true, cookies: withSession})
	page := b.do(t, req{path: "/", noAuth: true, cookies: withSession})
	switch {
	case api.status == http.StatusOK && page.status == http.StatusOK:
		return true
	case api.status == http.StatusUnauthorized && page.status == http.StatusSeeOther && strings.HasPrefix(page.header.Get("Location"), "/login"):
		return false
	}
	t.Fatalf("session cookie: API %s, dashboard %d (Location %q); want both to work or both to refuse", api, page.status, page.header.Get("Location"))
	return false
}

// TestLogoutEndsTheSessionOnEveryProcess: after /logout the same cookie,
// replayed by whoever copied it, opens nothing, on this process or another
// one sharing the database; other sessions go on.
func TestLogoutEndsTheSessionOnEveryProcess(t *testing.T) {
	t.Parallel()
	a := setup(t, setupOpts{token: testToken})
	b := setup(t, setupOpts{token: testToken, pool: a.pool})

	session := a.signIn(t, testToken)
	other := b.signIn(t, testToken)
	for name, srv := range map[string]*testBundle{"a": a, "b": b} {
		if !srv.sessionWorks(t, session) || !srv.sessionWorks(t, other) {
			t.Fatalf("a fresh session does not work on server %s", name)
		}
	}
	if strings.Contains(session.Value, testToken) {
		t.Fatal("the session cookie holds the token")
	}
	var leaked int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_admin_sessions WHERE position($1::bytea IN id) > 0 OR position($1::bytea IN key_id) > 0`, []byte(session.Value)).Scan(&leaked); err != nil || leaked != 0 {
		t.Fatalf("the session table holds the cookie (%d rows, %v)", leaked, err)
	}

	withSession := []*http.Cookie{{Name: session.Name, Value: session.Value}}
	page := a.do(t, req{path: "/", noAuth: true, cookies: withSession})
	r := a.do(t, req{method: "POST", path: "/logout", body: url.Values{"csrf": {scrapeCSRF(t, page.body)}}.Encode(), noAuth: true, cookies: withSession, header: formHeader})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/login" {
		t.Fatalf("logout: %d Location %q; want 303 to /login", r.status, r.header.Get("Location"))
	}
	for name, srv := range map[string]*testBundle{"a": a, "b": b} {
		if srv.sessionWorks(t, session) {
			t.Errorf("the signed-out session still works on server %s", name)
		}
		if !srv.sessionWorks(t, other) {
			t.Errorf("signing out ended another session on server %s", name)
		}
	}
	// Nor does its CSRF token do anything any more.
	if r := a.do(t, req{method: "POST", path: "/logout", body: url.Values{"csrf": {scrapeCSRF(t, page.body)}}.Encode(), noAuth: true, cookies: withSession, header: formHeader}); r.status != http.StatusUnauthorized {
		t.Errorf("POST with the signed-out session: %s; want 401", r)
	}
	if n := a.sessionRows(t); n != 1 {
		t.Errorf("%d sessions in the database after one of two signed out; want 1", n)
	}
}

// TestANewTokenEndsTheOldTokensSessions: a server started with a new admin
// token removes the sessions made with the old one, so they end also on
// processes still running with the old token.
func TestANewTokenEndsTheOldTokensSessions(t *testing.T) {
	t.Parallel()
	const newToken = "adm_ROTATED_fedcba9876543210"
	old := setup(t, setupOpts{token: testToken})
	session := old.signIn(t, testToken)
	if !old.sessionWorks(t, session) {
		t.Fatal("a fresh session does not work")
	}

	rotated := setup(t, setupOpts{token: newToken, pool: old.pool})
	rotated.token = newToken
	if rotated.sessionWorks(t, session) {
		t.Error("a session made with the old token works on the server with the new one")
	}
	if old.sessionWorks(t, session) {
		t.Error("a session made with the old token still works after a server started with a new one")
	}
	fresh := rotated.signIn(t, newToken)
	if !rotated.sessionWorks(t, fresh) {
		t.Error("a session made with the new token does not work")
	}
	if n := rotated.sessionRows(t); n != 1 {
		t.Errorf("%d sessions in the database; want only the new token's one", n)
	}
}

// TestExpiredSessionsArePruned: the session table keeps no more than the
// sessions of one TTL.
func TestExpiredSessionsArePruned(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	first := b.signIn(t, testToken)
	b.signIn(t, testToken)
	if n := b.sessionRows(t); n != 2 {
		t.Fatalf("%d sessions after two sign-ins; want 2", n)
	}
	b.clock.Advance(adminhttp.DefaultSessionTTL + time.Second)
	if b.sessionWorks(t, first) {
		t.Fatal("an expired session works")
	}
	latest := b.signIn(t, testToken)
	if n := b.sessionRows(t); n != 1 {
		t.Errorf("%d sessions after the first two expired and one more sign-in; want 1", n)
	}
	if !b.sessionWorks(t, latest) {
		t.Error("the new session does not work")
	}
}

// TestSessionsWhenTheDatabaseFails: a session that cannot be checked is
// answered 503, not taken for signed out (or in); the bearer token still
// opens the API.
func TestSessionsWhenTheDatabaseFails(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{token: testToken})
	session := b.signIn(t, testToken)
	if _, err := b.pool.Exec(context.Background(), `ALTER TABLE outbox_admin_sessions RENAME TO outbox_admin_sessions_away`); err != nil {
		t.Fatal(err)
	}
	withSession := []*http.Cookie{{Name: session.Name, Value: session.Value}}
	for _, path := range []string{"/", "/api/v1/stats", "/metrics"} {
		if r := b.do(t, req{path: path, noAuth: true, cookies: withSession}); r.status != http.StatusServiceUnavailable {
			t.Errorf("GET %s with a session while the session store fails: %d; want 503", path, r.status)
		}
	}
	if r := b.do(t, req{path: "/api/v1/stats"}); r.status != http.StatusOK {
		t.Errorf("GET /api/v1/stats with the bearer token while the session store fails: %s", r)
	}
	r := b.do(t, req{method: "POST", path: "/login", body: url.Values{"token": {testToken}}.Encode(), noAuth: true, header: formHeader})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Set-Cookie") != "" {
		t.Errorf("sign-in while the session store fails: %d Set-Cookie %q; want 503 and no cookie", r.status, r.header.Get("Set-Cookie"))
	}
}
