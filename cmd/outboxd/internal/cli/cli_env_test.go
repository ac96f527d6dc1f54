package cli_test

import (
	"testing"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
)

func TestEnvironmentSetsFlagsAndTheCommandLineWins(t *testing.T) {
	t.Parallel()
	if got := cli.EnvName("max-attempts"); got != "OUTBOXD_MAX_ATTEMPTS" {
		t.Fatalf("EnvName(max-attempts) = %q", got)
	}
	// A bad value from the environment is a usage error naming the variable.
	r := outboxd(t, invocation{env: map[string]string{"OUTBOXD_WORKERS": "many", "STRIPE_API_KEY": secretStripeKey, "SENDGRID_API_KEY": "SG.x"}, args: []string{"run"}})
	if r.code != 2 {
		t.Fatalf("run with OUTBOXD_WORKERS=many: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, "OUTBOXD_WORKERS", "--workers")
	// The environment's value is used: 0 workers is refused by name.
	r = outboxd(t, invocation{env: map[string]string{"OUTBOXD_WORKERS": "0", "STRIPE_API_KEY": secretStripeKey, "SENDGRID_API_KEY": "SG.x"}, args: []string{"run"}})
	if r.code != 2 {
		t.Fatalf("run with OUTBOXD_WORKERS=0: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, "--workers must be between 1 and 10000, got 0")
	// The command line wins over the environment.
	r = outboxd(t, invocation{env: map[string]string{"OUTBOXD_WORKERS": "0", "STRIPE_API_KEY": secretStripeKey, "SENDGRID_API_KEY": "SG.x"}, args: []string{"run", "--workers", "-3"}})
	wantContains(t, "stderr", r.stderr, "got -3")
}
