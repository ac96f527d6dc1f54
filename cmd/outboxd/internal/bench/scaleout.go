package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/intents"
)

// The scale-out scenario runs the end-to-end workload of the e2e scenario
// (consumers in this process recording a marker, a business row and one
// Stripe payment intent; paced producers stepping the offered rate up)
// with the dispatchers moved out of this process: 1, 2 and then 4 real
// `outboxd run` processes on the one database, pointed at the doubles in
// this process as `outboxd run` is pointed at any provider (--providers,
// --stripe-api-base, the API key in the environment). The climb is the e2e
// scenario's (climb, step, ladderRates), so a rate here means what it
// means there.
//
// The processes share Sizes.Workers between them (rounded up), so that the
// rows compare the same concurrency spread over more processes, and so
// that n processes' pools (workers + 10 connections each) fit a default
// max_connections of 100 beside the consumers.

// scaleoutProcesses are the process counts, in the order they climb.
func scaleoutProcesses() []int { return []int{1, 2, 4} }

// scaleoutLossTarget is the share of one process's rate that more
// processes must keep: they may not help on a small machine, but they
// must not cost much more than a ladder step (a tenth of the bound).
const scaleoutLossTarget = 0.90

// scaleoutRows climbs with 1, 2 and 4 outboxd run processes and reports
// each sustainable rate, its ratio to one process's, and what bounded it:
// the CPU Postgres took and the commits each intent cost.
func (r *runner) scaleoutRows(ctx context.Context) ([]Row, error) {
	if r.cfg.Outboxd == "" {
		r.progress("scaleout: skipped (no outboxd executable given)")
		return nil, nil
	}
	tps, how, err := r.commitLimit(ctx)
	if err != nil {
		return nil, fmt.Errorf("commit limit: %w", err)
	}
	r.progress("  %.0f commits/s", tps)
	bound := tps / commitsPerIntent
	rates := ladderRates(bound)
	var results []scaleoutResult
	for _, n := range scaleoutProcesses() {
		peer := r.outboxdPeer(n)
		r.progress("scale-out: %s, offered %v intents/s, %s a step", peer.name, rates, r.sizes.E2EStep)
		var res scaleoutResult
		res.processes, res.workers = n, scaleoutWorkers(r.sizes.Workers, n)
		res.ladder, err = r.climb(ctx, peer.withReport(&res), 0, rates)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	return scaleoutTable(results, tps, how, bound), nil
}

// scaleoutWorkers is each of n processes' share of workers, rounded up.
func scaleoutWorkers(workers, n int) int { return (workers + n - 1) / n }

// scaleoutResult is one process count's climb, and what the system saw
// while it ran.
type scaleoutResult struct {
	processes, workers int
	ladder             ladderResult
	// idleCommits is how many transactions per second the processes
	// committed, idle, before the climb (River's polling and leader
	// election): part of every row's commits per intent.
	idleCommits float64
	// outboxdCPU is the share of the machine's CPU the outboxd processes
	// used over the climb.
	outboxdCPU float64
}

// scaleoutTable turns the climbs into rows: one per process count, then
// where Postgres became the limit.
func scaleoutTable(results []scaleoutResult, tps float64, how string, bound float64) []Row {
	var rows []Row
	one := results[0].ladder.figure()
	for _, res := range results {
		measure := fmt.Sprintf("Scale-out, sustainable end to end, zero-latency provider: %d outboxd run process%s × %d workers",
			res.processes, plurales(res.processes), res.workers)
		var row Row
		if res.processes == 1 {
			row = ratioRow(measure, "intents/s", res.ladder.figure(),
				fmt.Sprintf("commit limit ÷ %d commits/intent (%.0f commits/s: %s)", commitsPerIntent, tps, how), bound, e2eTarget)
		} else {
			row = ratioRow(measure, "intents/s", res.ladder.figure(), "1 outboxd run process, same run", one, scaleoutLossTarget)
		}
		row.Note = res.note()
		rows = append(rows, row)
	}
	// Where Postgres is the limit: its share of the machine at the
	// highest rate any process count sustained, against the machine's
	// busy share then.
	best := results[0]
	for _, res := range results[1:] {
		if res.ladder.figure() > best.ladder.figure() {
			best = res
		}
	}
	cpu := best.ladder.sustainable.cpu
	var shares []string
	for _, res := range results {
		s := res.ladder.sustainable
		shares = append(shares, fmt.Sprintf("%d process%s: %d/s with Postgres at %.0f%% of the machine (%.0f%% busy), the outboxd processes %.0f%% over the climb, %.1f commits per intent",
			res.processes, plurales(res.processes), s.rate, 100*s.cpu.postgres, 100*s.cpu.machine, 100*res.outboxdCPU, res.ladder.commits))
	}
	pgRow := Row{
		Measure: fmt.Sprintf("Scale-out: Postgres' share of the machine's CPU at the best sustainable rate (%d/s, %d process%s)",
			best.ladder.sustainable.rate, best.processes, plurales(best.processes)),
		Figure: 100 * cpu.postgres, Unit: "% CPU",
		Baseline: "the machine's busy share then", BaselineFigure: 100 * cpu.machine,
		Target: "context: what bounds the rate", Met: true,
		Note: strings.Join(shares, "; ") + ". When Postgres takes most of the busy CPU, more dispatcher processes cannot raise the rate; " +
			"on a machine whose cores all go to one Postgres and its clients, neither can anything but fewer commits per intent (docs/scaling.md).",
	}
	if cpu.machine > 0 {
		pgRow.Ratio = cpu.postgres / cpu.machine
	}
	commits := results[0]
	commitRow := Row{
		Measure: "Scale-out: transactions per intent end to end, 1 process (pg_stat_database xact_commit ÷ intents over the climb)",
		Figure:  commits.ladder.commits, Unit: "commits",
		Baseline: "the commits an intent needs (record, claim, settle)", BaselineFigure: commitsPerIntent,
		Target: "context: the commit limit's divisor", Met: true,
		Note: fmt.Sprintf("Read-only transactions count too (they do not wait for a WAL flush): idle, 1 process committed %.1f transactions/s, 2 processes %.1f/s, 4 processes %.1f/s (River's fetch polls and leader election). "+
			"One primary sustains about its commit limit ÷ the durable commits per intent: %.0f ÷ %d = %.0f intents/s here.",
			results[0].idleCommits, idleOf(results, 2), idleOf(results, 4), tps, commitsPerIntent, bound),
	}
	if commitRow.BaselineFigure > 0 {
		commitRow.Ratio = commitRow.Figure / commitRow.BaselineFigure
	}
	return append(rows, pgRow, commitRow)
}

func idleOf(results []scaleoutResult, processes int) float64 {
	for _, res := range results {
		if res.processes == processes {
			return res.idleCommits
		}
	}
	return 0
}

// note says at what latency the rate held, what failed next and why, and
// how the machine's CPU was shared.
func (res scaleoutResult) note() string {
	l := res.ladder
	var b strings.Builder
	writeClimb(&b, l)
	fmt.Fprintf(&b, " The outboxd processes (counted in \"others\") used %.0f%% of the machine over the climb; %.1f transactions per message (pg_stat_database, read-only ones included), %.1f round trips per message from the consumers.",
		100*res.outboxdCPU, l.commits, l.consumerTrips)
	return b.String()
}

// outboxdPeer is the e2e workload with n outboxd run processes as the
// dispatchers and intents.Client.Consume in this process as the consumer.
func (r *runner) outboxdPeer(n int) scaleoutPeer {
	workers := scaleoutWorkers(r.sizes.Workers, n)
	return scaleoutPeer{e2ePeer{
		key:   fmt.Sprintf("outboxd-%d", n),
		name:  fmt.Sprintf("%d outboxd run process%s × %d workers", n, plurales(n), workers),
		setup: fmt.Sprintf("intents.Client.Consume in the bench process; %d `outboxd run --workers %d` processes", n, workers),
	}, n, workers}
}

// scaleoutPeer starts the processes; withReport binds the result its
// system reports into.
type scaleoutPeer struct {
	e2ePeer
	processes, workers int
}

func (p scaleoutPeer) withReport(res *scaleoutResult) e2ePeer {
	peer := p.e2ePeer
	peer.start = func(ctx context.Context, env *e2eEnv) (e2eSystem, error) {
		return startScaleout(ctx, env, p.processes, p.workers, res)
	}
	return peer
}

// scaleoutSystem is intents.Client.Consume in this process, recording into
// the database that outboxd run processes dispatch from.
type scaleoutSystem struct {
	outboxSystem // consume; its dispatcher is nil, the processes dispatch
	procs        []*outboxdProcess
	res          *scaleoutResult
	cpuStart     cpuSnapshot
	procStart    []uint64
}

func startScaleout(ctx context.Context, env *e2eEnv, n, workers int, res *scaleoutResult) (_ e2eSystem, err error) {
	client, err := intents.NewClient(env.consumers, &intents.Config{Providers: env.dbl.Registry(), Logger: env.r.cfg.Logger})
	if err != nil {
		return nil, err
	}
	s := &scaleoutSystem{outboxSystem: outboxSystem{client: client}, res: res}
	defer func() {
		if err != nil {
			s.stopProcesses()
		}
	}()
	for range n {
		p, err := startOutboxd(ctx, env.r.cfg.Outboxd, env.db.url, env.dbl, workers)
		if err != nil {
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	// Idle, the processes still commit: River's fetch polls, its leader
	// election. Counted here, those commits are not mistaken for the
	// intents' own.
	const idleFor = 2 * time.Second
	before, err := xactCommits(ctx, env.db.pool)
	if err != nil {
		return nil, err
	}
	idleStart := time.Now()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(idleFor + 500*time.Millisecond): // statistics lag up to 500 ms
	}
	after, err := xactCommits(ctx, env.db.pool)
	if err != nil {
		return nil, err
	}
	// xact_commit includes this query's own transactions: one per read.
	res.idleCommits = float64(after-before-1) / time.Since(idleStart).Seconds()
	s.cpuStart = takeCPUSnapshot()
	for _, p := range s.procs {
		s.procStart = append(s.procStart, processTicks(p.cmd.Process.Pid))
	}
	return s, nil
}

func (s *scaleoutSystem) consume(ctx context.Context, seq int64) (int64, error) {
	for _, p := range s.procs {
		if err := p.alive(); err != nil {
			return 0, err
		}
	}
	return s.outboxSystem.consume(ctx, seq)
}

// stop reads the processes' CPU over the climb, then stops them.
func (s *scaleoutSystem) stop(context.Context) error {
	end := takeCPUSnapshot()
	var ticks uint64
	for i, p := range s.procs {
		t := processTicks(p.cmd.Process.Pid)
		ticks += t - min(s.procStart[i], t)
	}
	if total := end.total - s.cpuStart.total; total > 0 {
		s.res.outboxdCPU = float64(ticks) / float64(total)
	}
	var errs []error
	for _, p := range s.procs {
		if err := p.alive(); err != nil {
			errs = append(errs, err)
		}
	}
	s.stopProcesses()
	return errors.Join(errs...)
}

func (s *scaleoutSystem) stopProcesses() {
	for _, p := range s.procs {
		p.stop()
	}
}

// processTicks is the CPU time a process has used, in clock ticks (the
// unit of /proc/stat, which cpuSnapshot reads); 0 when unknown.
func processTicks(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}

func plurales(n int) string {
	if n == 1 {
		return ""
	}
	return "es"
}
