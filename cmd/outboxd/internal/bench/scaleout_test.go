package bench_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/bench"
	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
)

// asOutboxd makes this test binary, run again with it set, be outboxd:
// the scenarios that start real `outboxd run` processes run it.
const asOutboxd = "OUTBOX_BENCH_TEST_AS_OUTBOXD"

func TestMain(m *testing.M) {
	if os.Getenv(asOutboxd) == "1" {
		os.Exit(cli.Main(context.Background(), os.Args[1:], cli.OSEnv()))
	}
	// Set in this process only so that the processes it starts inherit it.
	_ = os.Setenv(asOutboxd, "1")
	os.Exit(m.Run())
}

// The scale-out scenario climbs with 1, 2 and 4 real outboxd run
// processes dispatching from one database, and says what bounded them.
func TestSmokeScaleOutRunsRealProcesses(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Skipf("no path to this executable: %v", err)
	}
	report, progress := smokeRun(t, bench.Config{Only: []string{"scaleout"}, Outboxd: self})
	if len(report.Rows) != 5 {
		t.Fatalf("%d rows, want 5 (1, 2 and 4 processes, Postgres' share, commits per intent):\n%+v\n%s", len(report.Rows), report.Rows, progress)
	}
	for i, want := range []string{"1 outboxd run process × 8 workers", "2 outboxd run processes × 4 workers", "4 outboxd run processes × 2 workers", "Postgres' share", "transactions per intent"} {
		row := report.Rows[i]
		if !strings.Contains(row.Measure, want) || row.Target == "" || row.Note == "" {
			t.Errorf("row %d = %+v, want one about %q with a target and a note", i, row, want)
		}
	}
	// Every process count sustained some rate: the processes did dispatch
	// (the climb fails on any intent called twice or never).
	for _, row := range report.Rows[:3] {
		if row.Figure <= 0 || row.BaselineFigure <= 0 {
			t.Errorf("row %q: figure %v, baseline %v", row.Measure, row.Figure, row.BaselineFigure)
		}
	}
	// Each message is recorded in a transaction of its own; claims and
	// settlements are grouped, more the busier the machine, so together
	// they cost from a little above nothing to two.
	if commits := report.Rows[4].Figure; commits <= 1 || commits > 3.5 {
		t.Errorf("%.1f transactions per intent: one to record it, and at most one to claim and one to settle it", commits)
	}
	if !strings.Contains(progress, "4 outboxd run processes") {
		t.Errorf("progress does not show the 4-process climb:\n%s", progress)
	}
}
