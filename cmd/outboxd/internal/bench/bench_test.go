package bench_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/bench"
	"github.com/outboxkit/outbox/internal/testkit/pgbouncer"
	"github.com/outboxkit/outbox/internal/testkit/pgcluster"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// smokeRun runs cfg's scenarios with SmokeSizes on the test server and
// returns the report and the progress it printed; it fails the test if
// Run does.
func smokeRun(t *testing.T, cfg bench.Config) (*bench.Report, string) {
	t.Helper()
	sizes := bench.SmokeSizes()
	var progress bytes.Buffer
	cfg.ServerURL, cfg.Sizes, cfg.Progress = pgtest.ServerURL(), &sizes, &progress
	report, err := bench.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	return report, progress.String()
}

// The throughput scenarios run end to end with tiny sizes and yield rows
// with both figures measured; record runs this test binary as outboxd
// record (TestMain).
func TestSmokeRunMeasuresEveryRow(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Skipf("no path to this executable: %v", err)
	}
	report, _ := smokeRun(t, bench.Config{Only: []string{"consume", "batch", "record", "dispatch", "latency", "slow"}, Outboxd: self})
	// Latency has two rows at half the sustainable rate (which it measures
	// first, e2e not running) and two at the fixed rate.
	if len(report.Rows) != 12 {
		t.Fatalf("%d rows, want 12 (3 consume, batch, record, 2 dispatch, 4 latency, slow)", len(report.Rows))
	}
	for _, row := range report.Rows {
		if row.Figure <= 0 || row.BaselineFigure <= 0 || row.Ratio <= 0 || row.Target == "" || row.Unit == "" {
			t.Errorf("row %+v lacks a figure, a baseline, a ratio or a target", row)
		}
	}
	if report.Machine.CPUs < 1 || !strings.HasPrefix(report.Machine.Postgres, "PostgreSQL ") {
		t.Errorf("machine = %+v", report.Machine)
	}
	var table bytes.Buffer
	if err := report.WriteTable(&table, "outboxd bench --smoke"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| measure | figure |", "Consume, 1 intent/message, 32 consumers", "ConsumeBatch", "outboxd record, one stream, --batch 100 (default)", "outboxd record --batch 1", "Dispatch keyed", "Dispatch unkeyed", "p99", "Command: outboxd bench --smoke"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := bench.Run(ctx, bench.Config{}); err == nil || !strings.Contains(err.Error(), "ServerURL") {
		t.Errorf("no server: %v", err)
	}
	if _, err := bench.Run(ctx, bench.Config{ServerURL: pgtest.ServerURL(), Only: []string{"warp"}}); err == nil || !strings.Contains(err.Error(), `"warp"`) {
		t.Errorf("unknown scenario: %v", err)
	}
	sizes := bench.SmokeSizes()
	sizes.Workers = 0
	if _, err := bench.Run(ctx, bench.Config{ServerURL: pgtest.ServerURL(), Sizes: &sizes}); err == nil || !strings.Contains(err.Error(), "Sizes.Workers") {
		t.Errorf("zero workers: %v", err)
	}
}

func TestTableShowsFigureBaselineRatioAndMisses(t *testing.T) {
	t.Parallel()
	r := &bench.Report{
		Machine: bench.Machine{CPUs: 2, CPUModel: "Test CPU", Postgres: "PostgreSQL 15.0", Go: "go1.26", OS: "linux/amd64"},
		Rows: []bench.Row{
			{Measure: "fast thing", Figure: 1234.5, Unit: "msg/s", Baseline: "raw", BaselineFigure: 1500, Ratio: 0.823, Target: "≥ 80% of baseline", Met: true},
			{Measure: "slow thing", Figure: 7.5, Unit: "ms", Baseline: "River", BaselineFigure: 5, Ratio: 1.5, Target: "≤ 5 ms", Met: false, Note: "why"},
		},
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b, "make bench"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"2 CPUs, Test CPU; PostgreSQL 15.0",
		"| fast thing | 1234 msg/s | raw: 1500 | 82% | ≥ 80% of baseline | yes |",
		"| slow thing [2] | 7.50 ms | River: 5.00 | 150% | ≤ 5 ms | **no** |",
		"[2] why",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	if r.AllMet() {
		t.Error("AllMet with a missed target")
	}
}

// The memory row reads the kB fields of /proc/<pid>/status.
func TestReadStatusOfThisProcess(t *testing.T) {
	t.Parallel()
	st, err := bench.ReadStatus(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if st["VmHWM"] <= 0 || st["VmRSS"] <= 0 || st["VmRSS"] > st["VmHWM"] {
		t.Fatalf("VmHWM %d, VmRSS %d", st["VmHWM"], st["VmRSS"])
	}
}

// The e2e scenario climbs for this module and every peer, at both provider
// latencies, and each row says what it was measured against.
func TestSmokeE2ECoversEveryPeer(t *testing.T) {
	t.Parallel()
	report, progress := smokeRun(t, bench.Config{Only: []string{"e2e"}})
	want := 2 * (1 + len(bench.Peers()))
	if len(report.Rows) != want {
		t.Fatalf("%d rows, want %d:\n%+v\n%s", len(report.Rows), want, report.Rows, progress)
	}
	for _, row := range report.Rows {
		if row.BaselineFigure <= 0 && strings.Contains(row.Measure, "this module") || row.Target == "" || row.Note == "" {
			t.Errorf("row %+v lacks a baseline, a target or a note", row)
		}
	}
	wants := []string{"River alone", "zero-latency provider", "10ms provider"}
	if len(bench.UnlinkedPeers()) == 0 { // built with -tags benchpeers, as make test does
		wants = append(wants, "Watermill SQL", "DBOS Transact")
	} else {
		wants = append(wants, "Not in this binary: watermill, dbos")
	}
	for _, want := range wants {
		found := false
		for _, row := range report.Rows {
			found = found || strings.Contains(row.Measure, want) || strings.Contains(row.Note, want)
		}
		if !found {
			t.Errorf("no row mentions %q", want)
		}
	}
}

// The retained scenario fills its database, measures both sides and keeps
// stats exact on the filled one.
func TestSmokeRetainedMeasuresEveryRow(t *testing.T) {
	t.Parallel()
	report, _ := smokeRun(t, bench.Config{Only: []string{"retained"}})
	if len(report.Rows) != 14 {
		t.Fatalf("%d rows, want 14 (consume, dispatch, HOT share, 11 reads)", len(report.Rows))
	}
	for _, row := range report.Rows {
		// A share of HOT updates may be 0 in so small a run; a rate or a
		// time may not.
		positive := row.Unit != "%"
		if (positive && (row.Figure <= 0 || row.BaselineFigure <= 0)) || row.Target == "" || row.Unit == "" {
			t.Errorf("row %+v lacks a figure, a baseline or a target", row)
		}
	}
}

// The work scenario counts, for this module, what every message writes: an
// intent row at least, the processed marker and the claim's attempt, and a
// row per table in its note; heap tuples and index entries never zero.
func TestWorkCountsWhatEachMessageWrites(t *testing.T) {
	t.Parallel()
	report, _ := smokeRun(t, bench.Config{Only: []string{"work"}, Peers: []string{"river"}})
	if len(report.Rows) != 5 {
		t.Fatalf("%d rows, want 5 (heap, index entries bounded and from the WAL, WAL, CPU):\n%s", len(report.Rows), report.Rows[0].Note)
	}
	for _, row := range report.Rows[:4] {
		if row.Figure <= 0 || row.BaselineFigure <= 0 {
			t.Errorf("row %q: figure %v, baseline %v; want both measured", row.Measure, row.Figure, row.BaselineFigure)
		}
	}
	// Entries counted from the WAL are those written: never more than an
	// entry in every index of every table at each write.
	if bound, exact := report.Rows[1], report.Rows[2]; exact.Figure > bound.Figure || exact.BaselineFigure > bound.BaselineFigure {
		t.Errorf("index entries from the WAL %.2f (peer %.2f) exceed the upper bound %.2f (peer %.2f)",
			exact.Figure, exact.BaselineFigure, bound.Figure, bound.BaselineFigure)
	}
	// Per message: the marker, the intent, its claim and its settlement.
	if heap := report.Rows[0].Figure; heap < 4 {
		t.Errorf("%.2f heap tuples a message, want at least the marker, the intent, its claim and its settlement", heap)
	}
	for _, want := range []string{"outbox_intents 1.00 ins + 2.00 upd", "outbox_processed_messages 1.00 ins", "River", "left out: "} {
		if !strings.Contains(report.Rows[0].Note, want) {
			t.Errorf("note lacks %q:\n%s", want, report.Rows[0].Note)
		}
	}
}

// The pooler scenario runs the same work through a PgBouncer it starts and
// connected directly, with and without a pooler's settings: each row has
// both figures, and a missing pgbouncer is named (make bench installs it).
func TestSmokePoolerComparesThroughAndDirect(t *testing.T) {
	t.Parallel()
	sizes := bench.SmokeSizes()
	var progress bytes.Buffer
	report, err := bench.Run(context.Background(), bench.Config{ServerURL: pgtest.ServerURL(), Sizes: &sizes, Progress: &progress, Only: []string{"pooler"}})
	if errors.Is(err, pgbouncer.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip("pgbouncer is not installed (apt-get install pgbouncer); skipped outside CI")
	}
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if len(report.Rows) != 6 {
		t.Fatalf("%d rows, want 6 (consume and dispatch through PgBouncer and with its settings, latency p50 and p99)", len(report.Rows))
	}
	for _, row := range report.Rows {
		if row.Figure <= 0 || row.BaselineFigure <= 0 || row.Target == "" || row.Note == "" {
			t.Errorf("row %+v lacks a figure, a baseline, a target or a note", row)
		}
	}
	for _, want := range []string{"pooler, connected directly:", "pooler, connected directly, as behind a pooler:", "pooler, through PgBouncer:"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("no side measured %q:\n%s", want, progress.String())
		}
	}
}

// The failover scenario runs on a primary and a standby of its own: every
// side is measured, and the failover loses and doubles nothing.
func TestSmokeFailoverPromotesItsOwnStandby(t *testing.T) {
	t.Parallel()
	sizes := bench.SmokeSizes()
	var progress bytes.Buffer
	report, err := bench.Run(context.Background(), bench.Config{ServerURL: pgtest.ServerURL(), Sizes: &sizes, Progress: &progress, Only: []string{"failover"}})
	if errors.Is(err, pgcluster.ErrNotInstalled) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if len(report.Rows) != 6 {
		t.Fatalf("%d rows, want 6 (consume and dispatch for two synchronous modes, recovery, effects)", len(report.Rows))
	}
	for _, row := range report.Rows[:5] {
		if row.Figure <= 0 || row.BaselineFigure <= 0 || row.Target == "" || row.Note == "" {
			t.Errorf("row %+v lacks a figure, a baseline, a target or a note", row)
		}
	}
	if effects := report.Rows[5]; effects.Figure != 0 || !effects.Met {
		t.Errorf("the failover lost or doubled: %+v", effects)
	}
}

// The prune scenario fills both databases, runs the module's retention
// and the DROP of the partitioned copy beside the hot path, and measures
// every row against its baseline.
func TestSmokePruneMeasuresEveryRow(t *testing.T) {
	t.Parallel()
	report, progress := smokeRun(t, bench.Config{Only: []string{"prune"}})
	if len(report.Rows) != 6 {
		t.Fatalf("%d rows, want 6 (time, WAL, the hot path's rate and p99 beside each side):\n%s", len(report.Rows), progress)
	}
	for _, row := range report.Rows {
		if row.Figure <= 0 || row.BaselineFigure <= 0 || row.Ratio <= 0 || row.Target == "" || row.Unit == "" || row.Baseline == "" {
			t.Errorf("row %+v lacks a figure, a baseline, a ratio or a target", row)
		}
	}
	for _, row := range report.Rows[:4] {
		if !strings.Contains(row.Note, "hand-written copy, not the module's schema") && !strings.Contains(row.Measure, "DELETE") {
			t.Errorf("row %q does not say that the DROP side is a hand-written copy:\n%s", row.Measure, row.Note)
		}
	}
}
