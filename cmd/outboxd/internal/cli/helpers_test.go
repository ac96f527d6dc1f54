package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/migrations"
)

// secretStripeKey is the STRIPE_API_KEY the tests run with: recognisable,
// so any output that contains it is a leak. Every run checks.
const secretStripeKey = "sk_test_LEAKCANARY0123456789abcdefXYZ"

// lockedBuffer is a bytes.Buffer safe for a command's goroutines to write
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is what one in-process run of outboxd produced.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// invocation is one outboxd run: its environment, stdin and arguments.
type invocation struct {
	env   map[string]string
	stdin string
	args  []string
}

// environment returns an Env reading variables only from vars, with
// buffers for its output.
func environment(vars map[string]string, stdin string) (cli.Env, *lockedBuffer, *lockedBuffer) {
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	env := cli.Env{
		Stdin:  strings.NewReader(stdin),
		Stdout: stdout,
		Stderr: stderr,
		Getenv: func(name string) string { return vars[name] },
	}
	return env, stdout, stderr
}

// outboxd runs cli.Main in-process and returns what it printed. It fails
// the test if any secret in the environment appears in the output.
func outboxd(t *testing.T, in invocation) result {
	t.Helper()
	env, stdout, stderr := environment(in.env, in.stdin)
	code := cli.Main(context.Background(), in.args, env)
	r := result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	assertNoSecrets(t, in.env, r.stdout, r.stderr)
	return r
}

// assertNoSecrets fails when an API key from vars appears in any output.
func assertNoSecrets(t *testing.T, vars map[string]string, outputs ...string) {
	t.Helper()
	for _, name := range []string{"STRIPE_API_KEY", "SENDGRID_API_KEY"} {
		v := vars[name]
		if v == "" {
			continue
		}
		for _, out := range outputs {
			if strings.Contains(out, v) {
				t.Errorf("the value of %s appears in outboxd's output:\n%s", name, out)
			}
		}
	}
}

// vars returns a copy of base with the pairs (name, value, ...) set; an
// empty value deletes the name.
func vars(base map[string]string, pairs ...string) map[string]string {
	out := make(map[string]string, len(base)+len(pairs)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			delete(out, pairs[i])
		} else {
			out[pairs[i]] = pairs[i+1]
		}
	}
	return out
}

// waitExit waits for the exit code of a command run in a goroutine, and
// fails the test if it does not come within 30 seconds.
func waitExit(t *testing.T, exit <-chan int, what string) int {
	t.Helper()
	select {
	case code := <-exit:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not end", what)
		return 0
	}
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

// outboxVersions returns the embedded outbox schema versions as `outboxd
// migrate` prints them: applied oldest first ("[1 2]") and rolled back
// newest first ("[2 1]").
func outboxVersions() (up, down string) {
	var ups, downs []int
	for _, m := range migrations.All() {
		ups = append(ups, m.Version)
		downs = append([]int{m.Version}, downs...)
	}
	return fmt.Sprint(ups), fmt.Sprint(downs)
}
