package adminhttp_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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
