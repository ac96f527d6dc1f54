package adminhttp_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/adminhttp"
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
