package cli_test

import (
	"strings"
	"testing"
)

// The suite itself runs in cmd/outboxd/internal/chaos (TestChaosBounded); here, the
// command's door: bad flags are refused before anything starts.
func TestChaosRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fault-rate", "1.5"}, "--fault-rate must be between 0 and 1"},
		{[]string{"--call-timeout", "0s"}, "--call-timeout must be positive"},
		{[]string{"--duration", "-1s"}, "--duration must be positive"},
		{[]string{"--kill-every", "0s"}, "--kill-every must be positive"},
		{[]string{"--rate", "0"}, "--rate must be positive"},
		{[]string{"--messages", "-3"}, "--messages must be between 1 and 1000000"},
		{[]string{"--dispatchers", "0"}, "--dispatchers must be between 1 and 16"},
		{[]string{"--dispatchers", "x"}, "-dispatchers"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		r := outboxd(t, invocation{args: append([]string{"chaos"}, tc.args...)})
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("chaos %q: %s; want exit 2 naming %q", tc.args, r, tc.want)
		}
	}
	r := outboxd(t, invocation{args: []string{"chaos", "--help"}})
	wantContains(t, "chaos --help", r.stdout+r.stderr, "Usage: outboxd chaos", "-duration", "-kill-every", "-backend-kill-every", "SIGKILL", "soak")
}
