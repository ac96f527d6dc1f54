package cli_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
)

// countingReader fails nothing but counts reads: a command refused before
// it started must not have read its input.
type countingReader struct{ reads atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads.Add(1)
	n := copy(p, line("m-1", "billing", intent("stripe.payment_intent", "", paymentPayload))+"\n")
	return n, nil
}

func TestEveryDatabaseCommandRefusesAnUnmigratedDatabaseWithOneClearError(t *testing.T) {
	t.Parallel()
	dbURL := emptyDB(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	for _, args := range [][]string{
		{"stats"},
		{"stats", "--json"},
		{"intents", "list"},
		{"intents", "list", "--state", "in_doubt"},
		{"intents", "show", "1"},
		{"intents", "show", "billing:m-1"},
		{"intents", "retry", "1", "--reason", "checked"},
		{"intents", "cancel", "1", "--reason", "checked"},
		{"intents", "resolve", "1", "--as", "failed", "--reason", "checked"},
		{"record"},
		{"record", "--json"},
	} {
		in := &countingReader{}
		env, stdout, stderr := environment(map[string]string{"DATABASE_URL": dbURL}, "")
		env.Stdin = in
		code := cli.Main(context.Background(), args, env)
		name := strings.Join(args, " ")
		if code != 1 {
			t.Errorf("%s on an unmigrated database: exit %d, want 1; stderr:\n%s", name, code, stderr.String())
		}
		errText := strings.TrimSpace(stderr.String())
		if strings.Count(errText, "\n") != 0 {
			t.Errorf("%s: stderr is more than one line:\n%s", name, errText)
		}
		wantContains(t, name+" stderr", errText, "never migrated", "`outboxd migrate`")
		for _, noise := range []string{"42P01", "does not exist", "bad value", "line 1"} {
			if strings.Contains(errText, noise) {
				t.Errorf("%s: stderr says %q:\n%s", name, noise, errText)
			}
		}
		if stdout.String() != "" {
			t.Errorf("%s printed on stdout:\n%s", name, stdout.String())
		}
		if n := in.reads.Load(); n != 0 {
			t.Errorf("%s read its input %d times before refusing", name, n)
		}
	}
	var tables int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("the commands created %d tables in the unmigrated database", tables)
	}
}
