package cli_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthcheck: outboxd healthcheck exits 0 only when /healthz answers
// 200 "ok", and otherwise 1 with the reason on one line.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	serve := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
			w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hanging.Close)
	t.Cleanup(hanging.CloseClientConnections)
	// Port 1 (tcpmux) is privileged and unused: connecting is refused. (A
	// port freed by closing a server of this test can be taken at once by
	// another test's server, running in parallel.)
	const closedAddr = "127.0.0.1:1"

	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"healthy", []string{"--admin-addr", serve(200, "ok\n")}, nil, 0, []string{"healthy"}},
		{"503", []string{"--admin-addr", serve(503, "down\n")}, nil, 1, []string{"unhealthy", "503 Service Unavailable"}},
		{"another server", []string{"--admin-addr", serve(200, "<html>")}, nil, 1, []string{"unhealthy", "not \"ok\""}},
		{"nothing listens", []string{"--admin-addr", closedAddr}, nil, 1, []string{"unhealthy", closedAddr, "refused"}},
		{"no answer", []string{"--admin-addr", strings.TrimPrefix(hanging.URL, "http://"), "--timeout", "200ms"}, nil, 1, []string{"unhealthy", "did not answer within 200ms"}},
		{"from the environment", nil, map[string]string{"OUTBOXD_ADMIN_ADDR": closedAddr}, 1, []string{"unhealthy", closedAddr}},
		{"disabled", []string{"--admin-addr", ""}, nil, 1, []string{"disabled"}},
		{"not host:port", []string{"--admin-addr", "8080"}, nil, 1, []string{"not host:port"}},
	} {
		r := outboxd(t, invocation{env: tc.env, args: append([]string{"healthcheck"}, tc.args...)})
		if r.code != tc.code {
			t.Errorf("%s: %s; want exit %d", tc.name, r, tc.code)
			continue
		}
		out := r.stdout
		if tc.code != 0 {
			out = r.stderr
		}
		if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 {
			t.Errorf("%s: %d lines of output, want one:\n%s", tc.name, lines, out)
		}
		wantContains(t, tc.name, out, tc.want...)
	}
}
