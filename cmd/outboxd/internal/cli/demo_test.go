package cli_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/outboxkit/outbox/internal/testkit/pgadmin"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// TestDemoExplainsWhatItShows: the demo says what its progress columns
// count and what the report's in_doubt, failed and waiting rows mean, and
// with --keep-database prints commands that work on the kept database.
func TestDemoExplainsWhatItShows(t *testing.T) {
	t.Parallel()
	help := outboxd(t, invocation{args: []string{"demo", "--help"}}).stdout
	wantContains(t, "demo --help", help, "open (pending or\ndispatching: not performed yet)", "waiting (a refund or receipt waiting for\nits payment)", "With --keep-database the scratch database stays")

	env := map[string]string{"DATABASE_URL": pgtest.ServerURL()}
	r := outboxd(t, invocation{env: env, args: []string{"demo", "--orders", "10", "--keep-database"}})
	name := regexp.MustCompile(`outboxd_demo_\w+`).FindString(r.stdout)
	if name != "" {
		t.Cleanup(func() { _ = pgadmin.DropDatabase(context.Background(), pgtest.ServerURL(), name) })
	}
	if r.code != 0 || name == "" {
		t.Fatalf("demo --keep-database: %s", r)
	}
	wantContains(t, "demo's progress", r.stderr, "open = pending or\ndispatching (not performed yet), waiting = a refund or receipt waiting for\nits payment")
	wantContains(t, "demo's report", r.stdout, "What the rows mean:", "in_doubt   an email whose answer was lost",
		"failed     declined cards", "waiting    refunds and receipts", "The scratch database "+name+" is kept")
	kept := regexp.MustCompile(`(?m)^  export DATABASE_URL='(\S+)'$`).FindStringSubmatch(r.stdout)
	if kept == nil {
		t.Fatalf("the report prints no DATABASE_URL for the kept database:\n%s", r.stdout)
	}
	if r := outboxd(t, invocation{env: map[string]string{"DATABASE_URL": kept[1]}, args: []string{"intents", "list", "--state", "in_doubt"}}); r.code != 0 {
		t.Errorf("the printed command on the kept database: %s", r)
	}

	r = outboxd(t, invocation{env: env, args: []string{"demo", "--orders", "5"}})
	if r.code != 0 {
		t.Fatalf("demo: %s", r)
	}
	wantContains(t, "demo's report", r.stdout, "was dropped.\nRun with --keep-database to keep it")
}
