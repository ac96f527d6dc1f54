package cli_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// TestRunRefusesAnExposedAdminServerWithoutToken: a non-loopback
// --admin-addr needs OUTBOXD_ADMIN_TOKEN, checked before the database is
// tried.
func TestRunRefusesAnExposedAdminServerWithoutToken(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":     "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"STRIPE_API_KEY":   secretStripeKey,
		"SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey,
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{[]string{"--admin-addr", "0.0.0.0:8080"}, env, 2, []string{"refusing to start", "OUTBOXD_ADMIN_TOKEN", "OUTBOXD_ADMIN_TOKEN_FILE", "0.0.0.0:8080"}},
		{[]string{"--admin-addr", ":9090"}, env, 2, []string{"OUTBOXD_ADMIN_TOKEN"}},
		{[]string{"--admin-addr", ":9090"}, vars(env, "OUTBOXD_ADMIN_TOKEN", "short"), 2, []string{"OUTBOXD_ADMIN_TOKEN must be at least 16 bytes"}},
		{[]string{"--admin-addr", ":9090"}, vars(env, "OUTBOXD_ADMIN_TOKEN_FILE", "/nonexistent/admin-token"), 1, []string{"OUTBOXD_ADMIN_TOKEN_FILE"}},
		{[]string{"--admin-addr", "8080"}, env, 2, []string{"--admin-addr", "host:port"}},
		{nil, vars(env, "OUTBOXD_ADMIN_TLS_TERMINATED", "maybe"), 2, []string{"OUTBOXD_ADMIN_TLS_TERMINATED", "--admin-tls-terminated"}},
	} {
		r := outboxd(t, invocation{env: tc.env, args: append([]string{"run"}, tc.args...)})
		if r.code != tc.code {
			t.Errorf("run %q: %s; want exit %d", tc.args, r, tc.code)
			continue
		}
		wantContains(t, fmt.Sprintf("run %q stderr", tc.args), r.stderr, tc.want...)
		if strings.Contains(r.stderr, "connect to database") {
			t.Errorf("run %q tried the database before checking the admin token:\n%s", tc.args, r.stderr)
		}
	}
}

var adminListening = regexp.MustCompile(`admin server listening.*addr=(127\.0\.0\.1:\d+)`)

// TestRunServesTheAdminServer: `outboxd run --admin-addr` serves probes,
// metrics and the API next to the dispatcher, and stops with it.
func TestRunServesTheAdminServer(t *testing.T) {
	t.Parallel()
	rd := startRun(t, secretStripeKey, append(fastRunFlags, "--admin-addr", "127.0.0.1:0", "--admin-tls-terminated", "--max-payload-bytes", "200000")...)
	var base string
	deadline := time.Now().Add(30 * time.Second)
	for base == "" {
		if m := adminListening.FindStringSubmatch(rd.stderr.String()); m != nil {
			base = "http://" + m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 'admin server listening' log line within 30s:\n%s", rd.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics: %d, want Prometheus metrics", code)
	}
	// --admin-tls-terminated: the dashboard's session cookie is Secure
	// though this request is plain HTTP.
	if resp, err := http.Get(base + "/"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
		if cs := resp.Cookies(); len(cs) != 1 || !cs[0].Secure {
			t.Errorf("GET / with --admin-tls-terminated set cookies %v; want one Secure session cookie", cs)
		}
	}

	postMessages(t, base, rd)
	// outboxd healthcheck finds it, also through the environment variable
	// run reads, with a wildcard host as in a container.
	addr := strings.TrimPrefix(base, "http://")
	_, port, _ := net.SplitHostPort(addr)
	for _, inv := range []invocation{
		{args: []string{"healthcheck", "--admin-addr", addr}},
		{args: []string{"healthcheck"}, env: map[string]string{"OUTBOXD_ADMIN_ADDR": "0.0.0.0:" + port}},
	} {
		if r := outboxd(t, inv); r.code != 0 || !strings.Contains(r.stdout, "healthy") {
			t.Errorf("healthcheck %v %v: %s; want exit 0", inv.args, inv.env, r)
		}
	}

	// River's routine INFO lines go out at DEBUG; the outbox's stay INFO.
	logs := rd.stderr.String()
	wantContains(t, "stderr", logs, `level=INFO msg="dispatcher started"`)
	if strings.Contains(logs, "River client started") {
		t.Errorf("River's INFO lines are logged at --log-level info:\n%s", logs)
	}

	if code, took := rd.stop(t); code != 0 {
		t.Fatalf("run returned %d after cancellation\n%s", code, rd.stderr.String())
	} else {
		t.Logf("run stopped %s after cancellation", took.Round(time.Millisecond))
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Errorf("the admin server still answers after run returned")
	}
	r := outboxd(t, invocation{args: []string{"healthcheck", "--admin-addr", addr}})
	if r.code != 1 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Errorf("healthcheck after run stopped: %s; want exit 1 and one line", r)
	}
	wantContains(t, "healthcheck stderr", r.stderr, "unhealthy", addr)
}

// postMessages posts to the API of rd, a run with --max-payload-bytes
// 200000: a message with a payload past the default limit is recorded and
// performed, and a kind of a provider run does not enable is refused
// naming the flag.
func postMessages(t *testing.T, base string, rd *runningDispatcher) {
	t.Helper()
	// A message posted to the API is recorded and performed, with a
	// payload past the default limit that --max-payload-bytes allows.
	bigEmail := fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": "a@example.com"}], "subject": "s", "text": %q}`, strings.Repeat("x", 100<<10))
	resp, err := http.Post(base+"/api/v1/messages", "application/json",
		strings.NewReader(line("order-77", "billing", intent("sendgrid.email", "", bigEmail))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /api/v1/messages: %d, want 201", resp.StatusCode)
	}
	rd.waitForStates(t, 1, func(state string) bool { return state == "succeeded" })
	// A kind of a provider run does not enable is refused naming the flag.
	resp, err = http.Post(base+"/api/v1/messages", "application/json",
		strings.NewReader(line("order-78", "billing", intent("webhook.post", "", `{"endpoint": "billing", "event": "paid", "data": {}}`))))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity && resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "add it (--providers stripe,sendgrid,webhook)") {
		t.Errorf("POST /api/v1/messages of a webhook.post: %d %s; want it refused naming --providers", resp.StatusCode, body)
	}
}

// TestRunFailsWhenTheGivenAdminAddressIsTaken: the admin server's address
// must work, before anything is dispatched: an intent recorded meanwhile
// is not attempted.
func TestRunFailsWhenTheGivenAdminAddressIsTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rd := startRun(t, secretStripeKey, append(fastRunFlags, "--admin-addr", ln.Addr().String())...)
	select {
	case code := <-rd.done:
		rd.done <- code
		if code != 1 {
			t.Errorf("run with a taken --admin-addr returned %d, want 1", code)
		}
		wantContains(t, "stderr", rd.stderr.String(), "listen on "+ln.Addr().String(), "set --admin-addr to another address")
		if strings.Contains(rd.stderr.String(), "dispatcher started") {
			t.Errorf("the dispatcher started before the admin server failed:\n%s", rd.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("run with a taken --admin-addr did not stop within 60s\n%s", rd.stderr.String())
	}
}

// outboxd run waits for a database that refuses connections for now
// (53300, too many connections), as a running dispatcher rides it out,
// instead of exiting at start; once a connection is free it starts.
func TestRunWaitsForADatabaseAtItsConnectionLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, dbURL := pgtest.NewDB(t)
	role := fmt.Sprintf("outbox_limited_%d", time.Now().UnixNano())
	const limit = 40
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE ROLE %s LOGIN CONNECTION LIMIT %d`, role, limit),
		fmt.Sprintf(`GRANT ALL ON SCHEMA public TO %s`, role),
		fmt.Sprintf(`GRANT ALL ON ALL TABLES IN SCHEMA public TO %s`, role),
		fmt.Sprintf(`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO %s`, role),
		fmt.Sprintf(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO %s`, role),
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// The role's sessions end with the test's database; then it goes.
		_, _ = pool.Exec(context.Background(), fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%s'`, role))
		if _, err := pool.Exec(context.Background(), fmt.Sprintf(`REASSIGN OWNED BY %[1]s TO postgres; DROP OWNED BY %[1]s; DROP ROLE %[1]s`, role)); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	// Every connection the role may have is taken.
	var held []*pgx.Conn
	for range limit {
		c, err := pgx.Connect(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	env, _, stderr := environment(map[string]string{"DATABASE_URL": u.String(), "STRIPE_API_KEY": secretStripeKey, "SENDGRID_API_KEY": "SG.test"}, "")
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() { done <- cli.Main(runCtx, append([]string{"run", "--admin-addr", ""}, fastRunFlags...), env) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("outboxd run did not stop")
		}
	})
	testkit.Eventually(t, 30*time.Second, "run to say it waits", func() bool {
		return strings.Contains(stderr.String(), "the database refuses connections for now")
	})
	select {
	case code := <-done:
		t.Fatalf("outboxd run exited %d while the database was at its connection limit:\n%s", code, stderr)
	default:
	}
	for _, c := range held {
		_ = c.Close(ctx)
	}
	testkit.Eventually(t, 60*time.Second, "run to start once connections are free", func() bool {
		return strings.Contains(stderr.String(), "dispatcher started")
	})
	if !strings.Contains(stderr.String(), "53300") {
		t.Errorf("the wait does not name the SQLSTATE:\n%s", stderr)
	}
}
