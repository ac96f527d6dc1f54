package cli_test

import (
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

func TestRunRefusesARetentionThatCouldRunADuplicate(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":     unreachableDB, // refused before connecting
		"STRIPE_API_KEY":   secretStripeKey,
		"SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey,
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--dedup-window", "1h", "--max-attempts", "10", "--retry-backoff-max", "10m"},
			[]string{"--dedup-window (1h) is shorter than the retry horizon (10 attempts × 10m = 1h40m)", "would run again"}},
		{[]string{"--retry-backoff-max", "24h"}, // 10 × 24h is more than the 7-day default
			[]string{"--dedup-window (168h) is shorter than the retry horizon (10 attempts × 24h = 240h)"}},
		{[]string{"--dedup-window", "0s"}, []string{"--dedup-window must be positive"}},
		{[]string{"--audit-retention", "-1h"}, []string{"--audit-retention must be positive"}},
		{[]string{"--audit-retention", "a month"}, []string{"-audit-retention"}},
	} {
		r := outboxd(t, invocation{env: env, args: append([]string{"run"}, tc.args...)})
		if r.code != 2 {
			t.Errorf("run %q: %s; want exit 2", tc.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("run %q stderr", tc.args), r.stderr, tc.want...)
	}
}
