package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "--only", "consume,warp"},
		{"bench", "--fetch-cooldown", "0s"},
		{"bench", "extra"},
	} {
		r := outboxd(t, invocation{args: args})
		if r.code != 2 {
			t.Errorf("%v: %s; want exit 2", args, r)
		}
	}
}

// A smoke run prints one table and writes the same table to --out.
func TestBenchPrintsAndWritesOneTable(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "bench.md")
	r := outboxd(t, invocation{args: []string{"bench", "--database-url", pgtest.ServerURL(), "--smoke", "--only", "consume,batch", "--out", out}})
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(written) != r.stdout {
		t.Fatalf("--out differs from stdout:\n%s\n---\n%s", written, r.stdout)
	}
	wantContains(t, "table", r.stdout, "| measure | figure | baseline", "Consume, 1 intent/message, 8 consumers", "ConsumeBatch", "Command: outboxd bench")
	wantContains(t, "progress", r.stderr, "consume:", "batch:")
}
