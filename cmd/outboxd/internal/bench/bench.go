// Package bench measures the outbox's throughput, latency and memory, each
// figure against a baseline measured in the same run on the same database,
// and renders one table. outboxd bench runs it; `make bench` runs that.
//
// Every scenario runs in a scratch database of its own, created on the
// server at Config.ServerURL, migrated, and dropped afterwards. Providers are
// the Stripe and SendGrid test doubles, in this process, without faults
// unless the scenario says otherwise. The measures, their baselines and
// their targets are:
//
//   - consume: messages per second through intents.Client.Consume, one
//     intent each, at 1, 8 and 32 concurrent consumers, against hand-written
//     pgx writing the same rows (marker, intent, event, River job) in one
//     transaction. Targets: 85% of the baseline at 1 consumer, 80% at 8 and 32.
//   - batch: messages per second through ConsumeBatch at batches of 100,
//     against hand-written pgx writing the same rows per batch. Target:
//     85% of the baseline.
//   - record: intents per second through a real `outboxd record` process
//     on one stream of JSON lines (a Stripe payment intent each), at its
//     default --batch of 100, against --batch 1 (a transaction a message)
//     in the same run. Target: 10 times the baseline.
//   - e2e, the headline: the sustainable end-to-end rate. Consumers
//     (Consume: processed marker, one business row, one Stripe payment
//     intent) and dispatchers (Sizes.Workers) run at once on one database;
//     paced producers offer a rate (open loop) that steps up through shares
//     of the bound, and the figure is the highest step at which commit →
//     call p99 stays within 50 ms, the consumers commit at the offered
//     rate, and no backlog builds (committed but uncalled at the step's end
//     within what 50 ms at that rate would hold). A rate fails only when
//     it fails three times in a row (the machine may be shared). Baseline:
//     the commit limit, pgbench's single-row INSERT commits at 8 clients
//     (a Go loop of the same when pgbench is absent), divided by the 3
//     commits an intent needs (record, claim, settle). Target: 40% of it (the issue's). Against a 50 ms provider
//     the bound is the lower of that and Sizes.Workers / 50 ms. The peers
//     run the same workload in the same run, each in a file of its own
//     behind e2eSystem: River alone (InsertTx in the consumer's
//     transaction, a worker calling the double over HTTP and completing
//     with JobCompleteTx: the naive outbox), Watermill's SQL outbox
//     (peer_watermill.go) and DBOS Transact (peer_dbos.go). Their rows'
//     baseline is this module's figure, and the target is that this module
//     is ahead. The notes give each row's p50/p99, what failed next, and
//     the commits and round trips a message took.
//   - dispatch: intents per second performed against zero-latency doubles,
//     keyed (Stripe) and unkeyed (SendGrid), at Sizes.Workers, against
//     hand-written pgx running only the outcome transaction (lock the
//     intent, update it, insert the attempt) at the same concurrency, and
//     River working no-op jobs. Targets: 45% (keyed) and 25% (unkeyed) of
//     the outcome-transaction baseline.
//   - latency: from a consumer's commit to the provider receiving the call,
//     at half the sustainable rate measured in the same run (so that the
//     rows mean the same on any machine) and at Sizes.LatencyRate (500/s)
//     for context, against River's own insert-to-work latency for no-op
//     jobs at the same rate and settings, each side on a pool of
//     latencyConns connections. Targets: p50 10 ms, p99 50 ms.
//   - slow provider: intents per second against a provider answering in
//     50 ms at 100 workers, against River jobs sleeping 50 ms at the same
//     concurrency. Target: 80% of the concurrency bound, 100/0.05 s = 2000/s.
//   - retained: recording, dispatch, stats and every dashboard read on a
//     database holding Sizes.RetainedIntents finished intents and markers,
//     against an empty one in the same run (retained.go). Targets: 90% of
//     the empty database's rates, 20 ms for every read.
//   - memory: peak resident memory (VmHWM) of a real `outboxd run` process
//     while it dispatches, against the same process idle. Target: 80 MiB.
//   - scaleout: the e2e climb with the dispatchers in 1, 2 and 4 real
//     `outboxd run` processes sharing Sizes.Workers (scaleout.go), against
//     the commit limit (1 process) and 1 process's rate (more processes:
//     target 90% of it, no loss); then Postgres' share of the CPU at the
//     best rate and the transactions per intent (pg_stat_database), which
//     say what bounds the rate.
//   - pooler: Consume, keyed dispatch and commit → call through a
//     PgBouncer in transaction mode it starts, against the same settings
//     connected directly and those against pgx's defaults (pooler.go).
//   - prune: retention of a day of Sizes.PruneIntents finished intents,
//     their attempts, events and markers, beside a hot path at 200
//     messages/s (Consume and a dispatcher): the DROP of the day's
//     partitions of a hand-written partitioned copy of the history tables
//     against this module's DELETE in batches (dispatcher.PruneOnce), each
//     in a database of its own (prune.go). Targets: the DROP's time and
//     WAL at most 1% of the DELETE's; the hot path's rate during either at
//     90% of its own just before, its commit → call p99 within 50 ms.
//
// The machine line gives the CPU, the Postgres version, the settings that
// bound commits (shared_buffers, synchronous_commit, fsync,
// wal_sync_method, ...) and a commit time: a single-row commit's mean
// latency on one connection and, in full runs when it is installed,
// pg_test_fsync's figure for the server's wal_sync_method.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/internal/testkit/pgadmin"
	"github.com/outboxkit/outbox/migrations"
)

// Sizes says how much work each scenario does. Larger is steadier and
// slower.
type Sizes struct {
	// ConsumeMessages is how many messages each side of a consume row
	// handles (per consumer count).
	ConsumeMessages int
	// Batches is how many batches of BatchSize each side of the batch row
	// handles.
	Batches   int
	BatchSize int
	// DispatchIntents is how many intents each dispatch row performs.
	DispatchIntents int
	// Workers is the dispatcher's concurrency in the dispatch and memory
	// rows, and the baselines'.
	Workers int
	// LatencyRate (intents/s) and LatencyDuration drive the latency row.
	LatencyRate     int
	LatencyDuration time.Duration
	// SlowIntents is how many intents the slow-provider row performs;
	// SlowWorkers and SlowDelay are its concurrency and provider latency.
	SlowIntents int
	SlowWorkers int
	SlowDelay   time.Duration
	// MemoryIntents is how many intents the memory row's outboxd run
	// performs.
	MemoryIntents int
	// E2EStep is how long each step of the end-to-end ladder offers its
	// rate; CommitLimitDuration how long the commit-limit baseline runs.
	E2EStep             time.Duration
	CommitLimitDuration time.Duration
	// E2EMinMessages is the fewest messages a step offers, however low
	// its rate, so that its p99 is not merely its worst call.
	E2EMinMessages int
	// FsyncTool runs pg_test_fsync, when installed, for the machine line.
	FsyncTool bool
	// RetainedIntents is how many finished intents (and processed
	// markers) the retained scenario keeps in its full database.
	RetainedIntents int
	// WorkMessages is how many messages each system handles in the work
	// scenario (Postgres's work per message).
	WorkMessages int
	// BacklogIntents is how many intents the backlog scenario records at
	// once and drains.
	BacklogIntents int
	// RecordValues is how many JSON lines each side of the record row
	// records, in each of its rounds.
	RecordValues int
	// PruneIntents is how many finished intents (and markers) the day
	// the prune scenario's retention deletes, or drops, holds.
	PruneIntents int
}

// FullSizes is what `make bench` runs: about ten minutes on two cores.
func FullSizes() Sizes {
	return Sizes{
		ConsumeMessages: 8000,
		Batches:         400,
		BatchSize:       100,
		DispatchIntents: 8000,
		Workers:         50,
		LatencyRate:     500,
		LatencyDuration: 8 * time.Second,
		SlowIntents:     6000,
		SlowWorkers:     100,
		SlowDelay:       50 * time.Millisecond,
		MemoryIntents:   6000,

		E2EStep:             4 * time.Second,
		CommitLimitDuration: 5 * time.Second,
		E2EMinMessages:      300,
		FsyncTool:           true,
		RetainedIntents:     1_000_000,
		WorkMessages:        4000,
		BacklogIntents:      200_000,
		RecordValues:        20_000,
		PruneIntents:        1_000_000,
	}
}

// QuickSizes is for development on a shared machine: every scenario, small
// enough to take a few minutes, large enough that the figures mean
// something (noisier than FullSizes).
func QuickSizes() Sizes {
	return Sizes{
		ConsumeMessages: 1500,
		Batches:         60,
		BatchSize:       100,
		DispatchIntents: 1500,
		Workers:         50,
		LatencyRate:     500,
		LatencyDuration: 2 * time.Second,
		SlowIntents:     1500,
		SlowWorkers:     100,
		SlowDelay:       50 * time.Millisecond,
		MemoryIntents:   1500,

		E2EStep:             1500 * time.Millisecond,
		CommitLimitDuration: 2 * time.Second,
		E2EMinMessages:      150,
		RetainedIntents:     1_000_000,
		WorkMessages:        1000,
		BacklogIntents:      20_000,
		RecordValues:        5000,
		PruneIntents:        200_000,
	}
}

// SmokeSizes runs every scenario briefly: for tests of this package, not
// for figures.
func SmokeSizes() Sizes {
	return Sizes{
		ConsumeMessages: 40,
		Batches:         3,
		BatchSize:       20,
		DispatchIntents: 60,
		Workers:         8,
		LatencyRate:     100,
		LatencyDuration: 300 * time.Millisecond,
		SlowIntents:     40,
		SlowWorkers:     10,
		SlowDelay:       10 * time.Millisecond,
		MemoryIntents:   40,

		E2EStep:             300 * time.Millisecond,
		CommitLimitDuration: time.Second,
		E2EMinMessages:      20,
		RetainedIntents:     2000,
		WorkMessages:        40,
		BacklogIntents:      500,
		RecordValues:        60,
		PruneIntents:        3000,
	}
}

// Config configures Run.
type Config struct {
	// ServerURL is the PostgreSQL server; scratch databases are created
	// on it. Required.
	ServerURL string
	// Sizes says how much work to do. Defaults to FullSizes().
	Sizes *Sizes
	// Only, when not empty, runs only the scenarios named (see Scenarios).
	Only []string
	// Peers, when not empty, limits the e2e scenario's peers to those
	// named (see Peers); this module always runs.
	Peers []string
	// FetchCooldown is the dispatchers' and River baselines'
	// FetchCooldown. Defaults to dispatcher.DefaultFetchCooldown.
	FetchCooldown time.Duration
	// Outboxd is the outboxd executable the memory and scaleout rows run
	// as `outboxd run`, and the record row as `outboxd record`. Empty
	// skips those rows.
	Outboxd string
	// Progress receives a line per step. Defaults to discarding.
	Progress io.Writer
	// Logger receives the components' logs. Defaults to discarding.
	Logger *slog.Logger
}

// Scenarios lists the scenario names, in the order they run.
func Scenarios() []string {
	return []string{"consume", "batch", "record", "e2e", "work", "dispatch", "ordered", "latency", "slow", "memory", "retained", "backlog", "scaleout", "pooler", "failover", "prune"}
}

// Row is one line of the table.
type Row struct {
	// Measure names what was measured.
	Measure string `json:"measure"`
	// Figure is the measured value, in Unit.
	Figure float64 `json:"figure"`
	Unit   string  `json:"unit"`
	// Baseline describes the baseline and BaselineFigure is its value, in
	// Unit.
	Baseline       string  `json:"baseline"`
	BaselineFigure float64 `json:"baseline_figure"`
	// Ratio is Figure / BaselineFigure.
	Ratio float64 `json:"ratio"`
	// Target says what the figure must reach, and Met whether it did.
	Target string `json:"target"`
	Met    bool   `json:"met"`
	// Note explains a detail, when there is one.
	Note string `json:"note,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model"`
	Postgres string `json:"postgres"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	// Settings are the server settings that bound commits.
	Settings string `json:"settings,omitempty"`
	// Fsync says how long a durable commit takes on this machine.
	Fsync string `json:"fsync,omitempty"`
}

// Report is the result of Run.
type Report struct {
	Machine Machine       `json:"machine"`
	Rows    []Row         `json:"rows"`
	Took    time.Duration `json:"took_ns"`
}

// AllMet reports whether every row met its target.
func (r *Report) AllMet() bool {
	for _, row := range r.Rows {
		if !row.Met {
			return false
		}
	}
	return true
}

// Run runs the scenarios and returns their rows. It stops at the first
// scenario that fails to run (a database error, a timeout): a target that
// is missed is not an error, it is a row with Met false.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.ServerURL == "" {
		return nil, errors.New("bench: Config.ServerURL is required")
	}
	sizes := FullSizes()
	if cfg.Sizes != nil {
		sizes = *cfg.Sizes
	}
	if err := sizes.validate(); err != nil {
		return nil, err
	}
	for _, name := range cfg.Only {
		if !contains(Scenarios(), name) {
			return nil, fmt.Errorf("bench: unknown scenario %q (want one of %s)", name, strings.Join(Scenarios(), ", "))
		}
	}
	for _, name := range cfg.Peers {
		if contains(UnlinkedPeers(), name) {
			return nil, fmt.Errorf("bench: peer %q is not in this binary: build it with -tags benchpeers (make bench does)", name)
		}
		if !contains(Peers(), name) {
			return nil, fmt.Errorf("bench: unknown peer %q (want one of %s)", name, strings.Join(Peers(), ", "))
		}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.FetchCooldown == 0 {
		cfg.FetchCooldown = dispatcher.DefaultFetchCooldown
	}
	if cfg.FetchCooldown < time.Millisecond {
		return nil, fmt.Errorf("bench: Config.FetchCooldown must be at least 1ms, got %s", cfg.FetchCooldown)
	}
	r := &runner{cfg: cfg, sizes: sizes}
	started := time.Now()
	template, err := r.buildTemplate(ctx)
	if err != nil {
		return nil, err
	}
	defer r.drop(ctx, template)
	r.template = template
	report := &Report{}
	report.Machine, err = r.machine(ctx)
	if err != nil {
		return nil, err
	}
	steps := []struct {
		name string
		run  func(context.Context) ([]Row, error)
	}{
		{"consume", r.consumeRows},
		{"batch", r.batchRows},
		{"record", r.recordRows},
		{"e2e", r.e2eRows},
		{"work", r.workRows},
		{"dispatch", r.dispatchRows},
		{"ordered", r.orderedRows},
		{"latency", r.latencyRows},
		{"slow", r.slowRows},
		{"memory", r.memoryRows},
		{"retained", r.retainedRows},
		{"backlog", r.backlogRows},
		{"scaleout", r.scaleoutRows},
		{"pooler", r.poolerRows},
		{"failover", r.failoverRows},
		{"prune", r.pruneRows},
	}
	for _, s := range steps {
		if len(cfg.Only) > 0 && !contains(cfg.Only, s.name) {
			continue
		}
		rows, err := s.run(ctx)
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", s.name, err)
		}
		report.Rows = append(report.Rows, rows...)
	}
	report.Took = time.Since(started)
	return report, nil
}

func (s Sizes) validate() error {
	for name, v := range map[string]int{
		"ConsumeMessages": s.ConsumeMessages, "Batches": s.Batches, "BatchSize": s.BatchSize,
		"DispatchIntents": s.DispatchIntents, "Workers": s.Workers, "LatencyRate": s.LatencyRate,
		"SlowIntents": s.SlowIntents, "SlowWorkers": s.SlowWorkers, "MemoryIntents": s.MemoryIntents,
		"E2EStep (ms)": int(s.E2EStep.Milliseconds()), "RetainedIntents": s.RetainedIntents, "E2EMinMessages": s.E2EMinMessages, "CommitLimitDuration (ms)": int(s.CommitLimitDuration.Milliseconds()),
		"WorkMessages": s.WorkMessages, "RecordValues": s.RecordValues, "PruneIntents": s.PruneIntents,
	} {
		if v < 1 {
			return fmt.Errorf("bench: Sizes.%s must be positive, got %d", name, v)
		}
	}
	if s.LatencyDuration <= 0 || s.SlowDelay <= 0 {
		return errors.New("bench: Sizes.LatencyDuration and Sizes.SlowDelay must be positive")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// runner holds what the scenarios share.
type runner struct {
	cfg      Config
	sizes    Sizes
	template string // a migrated database each scenario clones
	// sustainable is this module's sustainable end-to-end rate against a
	// zero-latency provider, once measured; the latency rows run at half
	// of it.
	sustainable int
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
}

func scratchName(what string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("outboxd_bench_%s_%s", what, hex.EncodeToString(b))
}

// buildTemplate creates and migrates the database every scenario clones.
func (r *runner) buildTemplate(ctx context.Context) (string, error) {
	name := scratchName("template")
	if err := pgadmin.CreateDatabase(ctx, r.cfg.ServerURL, name, ""); err != nil {
		return "", err
	}
	url, err := pgadmin.WithDatabase(r.cfg.ServerURL, name)
	if err != nil {
		r.drop(ctx, name)
		return "", err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		r.drop(ctx, name)
		return "", err
	}
	_, err = migrations.New(pool, r.cfg.Logger).Up(ctx)
	if err == nil {
		_, err = pool.Exec(ctx, benchTablesSQL)
	}
	pool.Close()
	if err != nil {
		r.drop(ctx, name)
		return "", fmt.Errorf("migrate: %w", err)
	}
	return name, nil
}

func (r *runner) drop(ctx context.Context, name string) {
	if err := pgadmin.DropDatabase(context.WithoutCancel(ctx), r.cfg.ServerURL, name); err != nil {
		r.progress("could not drop %s: %v", name, err)
	}
}

// database is one scenario's scratch database.
type database struct {
	name string
	url  string
	pool *pgxpool.Pool
}

// newDatabase clones the template into a fresh database with a pool of
// maxConns connections. close drops it.
func (r *runner) newDatabase(ctx context.Context, what string, maxConns int) (*database, error) {
	return r.newTracedDatabase(ctx, what, maxConns, nil)
}

// newTracedDatabase is newDatabase with a tracer on the pool's
// connections, when not nil.
func (r *runner) newTracedDatabase(ctx context.Context, what string, maxConns int, tracer pgx.QueryTracer) (*database, error) {
	name := scratchName(what)
	if err := pgadmin.CreateDatabase(ctx, r.cfg.ServerURL, name, r.template); err != nil {
		return nil, err
	}
	url, err := pgadmin.WithDatabase(r.cfg.ServerURL, name)
	if err != nil {
		r.drop(ctx, name)
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		r.drop(ctx, name)
		return nil, err
	}
	pcfg.MaxConns = int32(maxConns)
	if tracer != nil {
		pcfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		r.drop(ctx, name)
		return nil, err
	}
	return &database{name: name, url: url, pool: pool}, nil
}

func (r *runner) closeDatabase(ctx context.Context, db *database) {
	db.pool.Close()
	r.drop(ctx, db.name)
}

func (r *runner) machine(ctx context.Context) (Machine, error) {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUModel: cpuModel()}
	url, err := pgadmin.WithDatabase(r.cfg.ServerURL, r.template)
	if err != nil {
		return m, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return m, err
	}
	defer pool.Close()
	var version string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&version); err != nil {
		return m, err
	}
	m.Postgres = "PostgreSQL " + version
	if m.Settings, err = settings(ctx, pool); err != nil {
		return m, err
	}
	r.progress("machine: %s; measuring a commit's latency", m.Settings)
	m.Fsync = r.fsyncTime(ctx, pool, r.sizes.FsyncTool)
	return m, nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
