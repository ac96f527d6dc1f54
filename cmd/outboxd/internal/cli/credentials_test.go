package cli_test

import (
	"strings"
	"testing"
)

func TestRunReportsEveryMissingCredentialAtOnce(t *testing.T) {
	t.Parallel()
	r := outboxd(t, invocation{
		env:  map[string]string{"DATABASE_URL": unreachableDB},
		args: []string{"run", "--providers", "stripe,sendgrid,webhook", "--webhook", "billing=http://127.0.0.1:1/hook", "--webhook", "audit=http://127.0.0.1:1/hook"},
	})
	if r.code != 1 {
		t.Fatalf("run without credentials: %s; want exit 1", r)
	}
	if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
		t.Errorf("stderr has %d lines, want one:\n%s", n+1, r.stderr)
	}
	wantContains(t, "stderr", r.stderr, "refusing to start", "STRIPE_API_KEY", "SENDGRID_API_KEY", "WEBHOOK_AUDIT_SECRET", "WEBHOOK_BILLING_SECRET")
	if strings.Contains(r.stderr, "connect to database") {
		t.Errorf("run tried the database before checking credentials:\n%s", r.stderr)
	}
}
