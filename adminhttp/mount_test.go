package adminhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/adminhttp"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/fixture"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// TestMountedUnderAPrefix: a handler mounted at /outbox keeps everything
// under it: its routes, every link, form and redirect of its pages, the
// post-sign-in redirect and the session cookie's scope.
func TestMountedUnderAPrefix(t *testing.T) {
	t.Parallel()
	const prefix = "/outbox"
	b := setup(t, setupOpts{token: testToken, prefix: prefix})
	id := b.record(t, message("m-1", "billing", email("receipt", "order-1")))[0]
	b.setState(t, id, intenttype.StateInDoubt)

	for _, path := range []string{"/api/v1/stats", "/healthz", "/", "/login"} {
		if r := b.do(t, req{path: path}); r.status != http.StatusNotFound {
			t.Errorf("GET %s, outside the prefix: %s; want 404", path, r)
		}
	}
	r := b.do(t, req{path: prefix + "/?state=in_doubt", noAuth: true})
	if want := prefix + "/login?next=" + url.QueryEscape(prefix+"/?state=in_doubt"); r.status != http.StatusSeeOther || r.header.Get("Location") != want {
		t.Errorf("dashboard without a session: %d to %q; want 303 to %q", r.status, r.header.Get("Location"), want)
	}
	// Signing in goes back to the page asked for, never out of the prefix.
	for next, want := range map[string]string{prefix + "/?state=in_doubt": prefix + "/?state=in_doubt", "/elsewhere": prefix + "/", prefix + "x/": prefix + "/"} {
		r := b.do(t, req{method: "POST", path: prefix + "/login", body: url.Values{"token": {testToken}, "next": {next}}.Encode(), noAuth: true, header: formHeader})
		if r.status != http.StatusSeeOther || r.header.Get("Location") != want {
			t.Errorf("sign-in with next %q: %d to %q; want %q", next, r.status, r.header.Get("Location"), want)
		}
	}
	r = b.do(t, req{method: "POST", path: prefix + "/login", body: url.Values{"token": {testToken}}.Encode(), noAuth: true, header: formHeader})
	cookie := sessionCookieOf(t, r.header)
	if cookie.Path != prefix {
		t.Errorf("session cookie's path = %q, want %q", cookie.Path, prefix)
	}

	link := regexp.MustCompile(`(?:href|action|src)="(/[^"]*)"`)
	for _, path := range []string{"/", fmt.Sprintf("/intents/%d", id), fmt.Sprintf("/intents/%d/resolve", id), "/references/order-1"} {
		r := b.do(t, req{path: prefix + path, noAuth: true, cookies: []*http.Cookie{cookie}})
		if r.status != http.StatusOK {
			t.Errorf("GET %s%s with a session: %s", prefix, path, r)
			continue
		}
		links := link.FindAllStringSubmatch(r.body, -1)
		if len(links) < 3 {
			t.Errorf("GET %s%s: %d links, want the layout's at least", prefix, path, len(links))
		}
		for _, m := range links {
			if !strings.HasPrefix(m[1], prefix+"/") {
				t.Errorf("GET %s%s links to %s, outside %s", prefix, path, m[1], prefix)
			}
		}
	}
	if r := b.do(t, req{path: prefix + "/riverui/api/queues"}); r.status != http.StatusOK {
		t.Errorf("River's UI under the prefix: %s", r)
	}
}

// TestWithoutATokenOnlyLoopbackClientsAreAnswered: a handler without a
// token, mounted in a server that listens on more than the loopback
// address its Config named, still answers no client from elsewhere, nor a
// Host header that is not a loopback name.
func TestWithoutATokenOnlyLoopbackClientsAreAnswered(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	client, reg := fixture.Client(t, pool)
	h, err := adminhttp.NewHandler(adminhttp.Config{Addr: "127.0.0.1:8080", Audit: fixture.Audit(t, pool, reg), Intents: client, Pool: pool, DisableRiverUI: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		remote, host string
		want         int
	}{
		{"127.0.0.1:50000", "127.0.0.1:8080", http.StatusOK},
		{"[::1]:50000", "localhost:8080", http.StatusOK},
		{"192.0.2.7:50000", "127.0.0.1:8080", http.StatusForbidden},
		{"127.0.0.1:50000", "outbox.example.com", http.StatusMisdirectedRequest},
	} {
		rq := httptest.NewRequest(http.MethodGet, "/api/v1/stats", nil)
		rq.RemoteAddr, rq.Host = tc.remote, tc.host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, rq)
		if w.Code != tc.want {
			t.Errorf("from %s to Host %s: %d %s; want %d", tc.remote, tc.host, w.Code, w.Body, tc.want)
		}
	}
}
