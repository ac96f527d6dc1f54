package adminhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit/pgbouncer"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// Behind PgBouncer in transaction mode (docs/operating.md, "Behind a
// connection pooler") the admin server works as it does connected
// directly: a sign-in's session, the dashboard's pages, the JSON API and
// River's UI, whose queries go through the same pool.
func TestAdminServerBehindPgBouncer(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), pgbouncer.ForTest(t, dbURL)+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := setup(t, setupOpts{token: testToken, pool: pool})
	id := b.record(t, message("m-1", "billing", email("receipt", "order-1")))[0]
	b.setState(t, id, intenttype.StateInDoubt)

	r := b.do(t, req{method: "POST", path: "/login", body: url.Values{"token": {testToken}}.Encode(), noAuth: true, header: formHeader})
	if r.status != http.StatusSeeOther {
		t.Fatalf("sign-in through PgBouncer: %s", r)
	}
	cookie := sessionCookieOf(t, r.header)
	for _, path := range []string{"/", "/?state=in_doubt", fmt.Sprintf("/intents/%d", id)} {
		if r := b.do(t, req{path: path, noAuth: true, cookies: []*http.Cookie{cookie}}); r.status != http.StatusOK {
			t.Errorf("GET %s with a session, through PgBouncer: %s", path, r)
		}
	}
	for _, path := range []string{"/api/v1/stats", "/api/v1/intents?state=in_doubt", "/riverui/api/queues", "/riverui/api/jobs?state=available"} {
		if r := b.do(t, req{path: path}); r.status != http.StatusOK {
			t.Errorf("GET %s through PgBouncer: %s", path, r)
		}
	}
}
