package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/bench"
	"github.com/outboxkit/outbox/dispatcher"
)

func runBench(ctx context.Context, args []string, env Env) error {
	fs, f := newBenchFlags(env)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	logger, err := f.logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	cfg, err := f.config(logger, env)
	if err != nil {
		return err
	}
	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	report, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return f.writeReport(report, args, env)
}

// benchFlags are the flags of outboxd bench.
type benchFlags struct {
	dbURL         databaseURL
	out           string
	only          string
	peers         string
	smoke         bool
	quick         bool
	strict        bool
	fetchCooldown time.Duration
	asJSON        bool
	cpuProfile    string
	logs          logFlags
}

// newBenchFlags declares outboxd bench's flags and its help.
func newBenchFlags(env Env) (*flag.FlagSet, *benchFlags) {
	f := &benchFlags{}
	fs := newFlagSet("bench", "bench [flags]", `
Measures throughput, latency and memory, each figure against a baseline
measured in the same run on the same database, and prints one table (also
written to --out):

  consume    messages/s through Consume at 1, 8 and 32 consumers, against
             hand-written pgx writing the same rows in one transaction
  batch      messages/s through ConsumeBatch at batches of 100, against
             hand-written pgx writing the same rows per batch
  record     intents/s through a real 'outboxd record' process reading
             one stream of JSON lines (a Stripe payment intent each), at
             --batch 100 (the default), against --batch 1 (a transaction
             a message)
  e2e        the sustainable end-to-end rate: consumers recording and
             dispatchers calling a zero-latency (then a 50 ms) provider at
             once, the offered rate stepped up until commit → call p99
             exceeds 50 ms or a backlog builds; against the commit limit
             (pgbench, 8 clients, ÷ 3 commits an intent), River alone,
             Watermill's SQL outbox and DBOS Transact, same workload
  work       what Postgres does for one message of that workload, for
             every system: heap tuples and index entries written (business
             row and maintenance tables apart, a table of what each is
             for), WAL bytes, commits and the server's CPU
  dispatch   intents/s performed against zero-latency Stripe (keyed) and
             SendGrid (unkeyed) doubles, against hand-written pgx running
             only the outcome transaction, and River working no-op jobs
  ordered    intents/s recorded and dispatched with ordering keys (50
             keys, one intent of a key at a time), against the same
             intents without ordering keys
  latency    consumer commit to provider call (p50, p99) at half the
             sustainable rate (measured first if e2e did not run) and at
             500 intents/s, against River's own insert-to-work latency
  slow       intents/s against a provider answering in 50 ms at 100 workers
  memory     peak resident memory of a real 'outboxd run' process while it
             dispatches (it runs this executable as 'outboxd run')
  retained   Consume and dispatch rates, stats and every dashboard and API
             read on a database holding 1,000,000 finished intents and
             markers, against an empty database; the share of HOT updates
  backlog    200,000 intents recorded at once and drained by one
             dispatcher: the drain rate's last tenth against its first, and
             stats, the dashboard and the API read during the drain (p90)
  scaleout   the e2e climb with 1, 2 and 4 real 'outboxd run' processes
             sharing the workers on one database: each sustainable rate,
             its ratio to 1 process, Postgres' share of the CPU and the
             transactions per intent (pg_stat_database)
  pooler     Consume, keyed dispatch and commit → call through a PgBouncer
             in transaction mode that it starts (--poll-only, pgx's
             default_query_exec_mode=exec), against the same settings
             connected directly (the hop) and those against pgx's defaults
             with a LISTEN (the settings); needs Debian's pgbouncer
  failover   on a primary and a streaming standby of its own (initdb,
             pg_basebackup; never the server at --database-url): Consume
             and unkeyed dispatch with the standby synchronous, every
             commit or only claims waiting, against it asynchronous; then
             the primary stopped immediately mid-drain and the standby
             promoted: the time to the first settlement on it, and the
             emails sent twice or never at the double
  prune      retention of a day of 1,000,000 finished intents, their
             attempts, events and markers, beside Consume and dispatch at
             200 messages/s: the DROP of the day's partitions of a
             hand-written partitioned copy of the history tables, against
             this module's DELETE in batches (its retention pass); the
             time and WAL of each, and the hot path's rate and commit →
             call p99 during each against the same hot path just before

Every scenario works in a scratch database of its own on the server at
--database-url, dropped afterwards (failover runs servers of its own). The full run takes about twenty-five
minutes on two cores; --quick runs every scenario with smaller sizes (a few
minutes, noisier figures); --smoke runs every scenario briefly (the figures
then mean nothing). A missed target is reported in the table; with --strict it also
makes the command exit 1.`, env)
	registerDatabaseFlag(fs, env, &f.dbURL)
	fs.StringVar(&f.out, "out", "", "also write the table to this file")
	fs.StringVar(&f.only, "only", "", "comma-separated scenarios to run (default all): "+strings.Join(bench.Scenarios(), ", "))
	fs.StringVar(&f.peers, "peers", "", "comma-separated peers the e2e scenario compares with (default all): "+strings.Join(bench.Peers(), ", ")+peersNotLinked())
	fs.BoolVar(&f.smoke, "smoke", false, "run every scenario with tiny sizes, to check that it works")
	fs.BoolVar(&f.quick, "quick", false, "run every scenario with smaller sizes, for development (noisier figures)")
	fs.BoolVar(&f.strict, "strict", false, "exit 1 when a target is missed")
	fs.DurationVar(&f.fetchCooldown, "fetch-cooldown", dispatcher.DefaultFetchCooldown, "FetchCooldown of the dispatchers and of the River baselines (see 'outboxd run --help')")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON instead of the table")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (consumers, dispatcher and doubles; not outboxd run, not Postgres) to this file; read it with 'go tool pprof'")
	f.logs.register(fs)
	f.logs.level = "error"
	return fs, f
}

// config is the bench's configuration from the flags, refusing unknown
// scenarios and peers.
func (f *benchFlags) config(logger *slog.Logger, env Env) (bench.Config, error) {
	scenarios, err := f.scenarios()
	if err != nil {
		return bench.Config{}, err
	}
	peerList, err := f.peerList()
	if err != nil {
		return bench.Config{}, err
	}
	if f.fetchCooldown < time.Millisecond {
		return bench.Config{}, usageErrorf("--fetch-cooldown must be at least 1ms, got %s", f.fetchCooldown)
	}
	if err := f.dbURL.check(); err != nil {
		return bench.Config{}, err
	}
	cfg := bench.Config{ServerURL: f.dbURL.url, Only: scenarios, Peers: peerList, FetchCooldown: f.fetchCooldown, Progress: env.Stderr, Logger: logger}
	if f.smoke && f.quick {
		return bench.Config{}, usageErrorf("--smoke and --quick exclude each other")
	}
	if f.smoke {
		sizes := bench.SmokeSizes()
		cfg.Sizes = &sizes
	}
	if f.quick {
		sizes := bench.QuickSizes()
		cfg.Sizes = &sizes
	}
	// The memory scenario runs this very executable as 'outboxd run'.
	if self, err := os.Executable(); err == nil {
		cfg.Outboxd = self
	}
	return cfg, nil
}

func (f *benchFlags) scenarios() ([]string, error) {
	if f.only == "" {
		return nil, nil
	}
	var scenarios []string
	for _, s := range strings.Split(f.only, ",") {
		s = strings.TrimSpace(s)
		if !slices.Contains(bench.Scenarios(), s) {
			return nil, usageErrorf("--only: unknown scenario %q (want %s)", s, strings.Join(bench.Scenarios(), ", "))
		}
		scenarios = append(scenarios, s)
	}
	return scenarios, nil
}

func (f *benchFlags) peerList() ([]string, error) {
	if f.peers == "" {
		return nil, nil
	}
	var peerList []string
	for _, p := range strings.Split(f.peers, ",") {
		p = strings.TrimSpace(p)
		if slices.Contains(bench.UnlinkedPeers(), p) {
			return nil, usageErrorf("--peers: %s is not in this binary: build outboxd with -tags benchpeers (make bench does)", p)
		}
		if !slices.Contains(bench.Peers(), p) {
			return nil, usageErrorf("--peers: unknown peer %q (want %s)", p, strings.Join(bench.Peers(), ", "))
		}
		peerList = append(peerList, p)
	}
	return peerList, nil
}

// startCPUProfile profiles this process into the file named path, if any,
// until the function it returns is called.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeReport prints the report as the table (or JSON), writes the table to
// --out, and with --strict fails when a target was missed.
func (f *benchFlags) writeReport(report *bench.Report, args []string, env Env) error {
	command := "outboxd bench " + strings.Join(args, " ")
	var text strings.Builder
	if err := report.WriteTable(&text, strings.TrimSpace(command)); err != nil {
		return err
	}
	if f.asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		fmt.Fprint(env.Stdout, text.String())
	}
	if f.out != "" {
		if err := os.WriteFile(f.out, []byte(text.String()), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if f.strict && !report.AllMet() {
		return errors.New("some targets were missed (see the table)")
	}
	return nil
}

// peersNotLinked tells --help which peers need a build with -tags benchpeers.
func peersNotLinked() string {
	if missing := bench.UnlinkedPeers(); len(missing) > 0 {
		return "; " + strings.Join(missing, ", ") + " only in a build with -tags benchpeers (make bench)"
	}
	return ""
}
