package cli_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgbouncer"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// Through PgBouncer in transaction mode each command either works or
// stops at start with one error naming the setting to change: migrate
// needs a session, and pgx's default prepared statements cannot cross
// sessions. run's refusal without --poll-only is dispatcher.Start's
// (dispatcher/pooler_test.go).
func TestCommandsBehindPgBouncerWorkOrSayWhatToSet(t *testing.T) {
	t.Parallel()
	pool, dbURL := pgtest.NewDB(t)
	bouncer := pgbouncer.ForTest(t, dbURL)
	exec := bouncer + "&default_query_exec_mode=exec"
	message := line("order-1", "billing", intent("stripe.payment_intent", "payment", paymentPayload)) + "\n"

	r := outboxd(t, invocation{env: map[string]string{"DATABASE_URL": exec}, args: []string{"migrate"}})
	if r.code == 0 {
		t.Fatalf("migrate through PgBouncer: %s; want a refusal", r)
	}
	wantContains(t, "migrate through PgBouncer", r.stderr, "DATABASE_URL reaches", "pooler in transaction mode", "advisory lock", "point it at Postgres itself")

	r = outboxd(t, invocation{env: map[string]string{"DATABASE_URL": bouncer}, stdin: message, args: []string{"record"}})
	if r.code == 0 {
		t.Fatalf("record through PgBouncer with pgx's default statement cache: %s; want a refusal", r)
	}
	wantContains(t, "record through PgBouncer, statement cache", r.stderr, "pooler in transaction mode", "default_query_exec_mode=exec")
	if n := testkit.Count(t, pool, `SELECT count(*) FROM outbox_intents`); n != 0 {
		t.Fatalf("the refused record wrote %d intents", n)
	}

	r = outboxd(t, invocation{env: map[string]string{"DATABASE_URL": exec}, stdin: message, args: []string{"record"}})
	if r.code != 0 {
		t.Fatalf("record through PgBouncer, default_query_exec_mode=exec: %s", r)
	}
	if n := testkit.Count(t, pool, `SELECT count(*) FROM outbox_intents`); n != 1 {
		t.Fatalf("record through PgBouncer wrote %d intents, want 1", n)
	}
	r = outboxd(t, invocation{env: map[string]string{"DATABASE_URL": exec}, args: []string{"stats"}})
	if r.code != 0 {
		t.Fatalf("stats through PgBouncer: %s", r)
	}
}
