package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// commitClients is the commit-limit baseline's concurrency.
const commitClients = 8

// commitsPerIntent is how many commits an intent needs end to end: the
// consumer's (marker, business row, intent), the claim before the provider
// call and the settlement after it.
const commitsPerIntent = 3

// commitLimit measures how many single-row INSERT commits per second the
// server takes at commitClients clients, with pgbench when it is installed,
// else with an equivalent loop in Go. It returns the rate and how it was
// measured.
func (r *runner) commitLimit(ctx context.Context) (float64, string, error) {
	db, err := r.newDatabase(ctx, "commit", commitClients)
	if err != nil {
		return 0, "", err
	}
	defer r.closeDatabase(ctx, db)
	secs := max(int(r.sizes.CommitLimitDuration.Round(time.Second)/time.Second), 1)
	if pgbench, err := exec.LookPath("pgbench"); err == nil {
		r.progress("commit limit: pgbench, single-row INSERT commits, %d clients, %d s", commitClients, secs)
		tps, err := runPgbench(ctx, pgbench, db.url, commitClients, secs)
		if err == nil {
			return tps, fmt.Sprintf("pgbench -c %d -T %d, one single-row INSERT per transaction", commitClients, secs), nil
		}
		r.progress("  pgbench failed (%v); measuring with a Go loop instead", err)
	}
	r.progress("commit limit: single-row INSERT commits from Go, %d connections, %d s", commitClients, secs)
	n, took, err := insertLoop(ctx, db.pool, commitClients, time.Duration(secs)*time.Second)
	if err != nil {
		return 0, "", err
	}
	return float64(n) / took.Seconds(), fmt.Sprintf("Go loop of single-row INSERT commits, %d connections, %d s (pgbench not installed)", commitClients, secs), nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

func runPgbench(ctx context.Context, pgbench, url string, clients, secs int) (float64, error) {
	dir, err := os.MkdirTemp("", "outboxd-bench-pgbench")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "insert.sql")
	if err := os.WriteFile(script, []byte("INSERT INTO bench_commit (v) VALUES (1);\n"), 0o600); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)), "-T", strconv.Itoa(secs), "-f", script, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no tps in its output: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// insertLoop commits single-row INSERTs on the given number of connections
// for d and returns how many it committed.
func insertLoop(ctx context.Context, pool *pgxpool.Pool, conns int, d time.Duration) (int64, time.Duration, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	start := time.Now()
	deadline := start.Add(d)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if _, err := pool.Exec(ctx, `INSERT INTO bench_commit (v) VALUES (1)`); err != nil {
					errs <- err
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		return 0, 0, err
	}
	return n.Load(), took, nil
}

// settings reads the server settings that bound commits.
func settings(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var parts []string
	for _, name := range []string{"shared_buffers", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay", "max_connections"} {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return "", err
		}
		parts = append(parts, name+"="+v)
	}
	return strings.Join(parts, ", "), nil
}

// fsyncTime says how long a durable commit takes here: the mean latency of
// single-row INSERT commits on one connection, and, when pg_test_fsync is
// installed and withTool, its figure for the server's wal_sync_method.
func (r *runner) fsyncTime(ctx context.Context, pool *pgxpool.Pool, withTool bool) string {
	var parts []string
	n, took, err := insertLoop(ctx, pool, 1, time.Second)
	if err == nil && n > 0 {
		parts = append(parts, fmt.Sprintf("single-row INSERT commit on one connection: %.2f ms mean (%d commits in 1 s)", ms(took)/float64(n), n))
	}
	if !withTool {
		return strings.Join(parts, "; ")
	}
	tool := findPgTestFsync()
	if tool == "" {
		return strings.Join(append(parts, "pg_test_fsync not installed"), "; ")
	}
	var method string
	_ = pool.QueryRow(ctx, "SELECT current_setting('wal_sync_method')").Scan(&method)
	r.progress("machine: pg_test_fsync -s 1 in %s", os.TempDir())
	dir, err := os.MkdirTemp("", "outboxd-bench-fsync")
	if err != nil {
		return strings.Join(parts, "; ")
	}
	defer os.RemoveAll(dir)
	out, err := exec.CommandContext(ctx, tool, "-s", "1", "-f", filepath.Join(dir, "fsync.out")).CombinedOutput()
	if err != nil {
		return strings.Join(append(parts, "pg_test_fsync failed: "+err.Error()), "; ")
	}
	// The first section compares the sync methods with one 8 kB write.
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == method && strings.Contains(line, "usecs/op") {
			parts = append(parts, fmt.Sprintf("pg_test_fsync (%s, one 8 kB write, in %s, not necessarily the server's disk): %s µs/op", method, os.TempDir(), f[len(f)-2]))
			break
		}
	}
	return strings.Join(parts, "; ")
}

func findPgTestFsync() string {
	if p, err := exec.LookPath("pg_test_fsync"); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_test_fsync")
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return ""
}

// cpuSnapshot is the CPU time spent so far, in clock ticks: by the whole
// machine (busy and total), and by the processes named postgres (the
// server, when it runs on this machine); and this process's own.
type cpuSnapshot struct {
	busy, total uint64
	postgres    map[string]uint64 // by pid
	self        time.Duration
	at          time.Time
}

func takeCPUSnapshot() cpuSnapshot {
	s := cpuSnapshot{self: processCPU(), at: time.Now(), postgres: map[string]uint64{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		if len(f) > 5 && f[0] == "cpu" {
			for i, v := range f[1:] {
				n, _ := strconv.ParseUint(v, 10, 64)
				s.total += n
				if i != 3 && i != 4 { // idle, iowait
					s.busy += n
				}
			}
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime are fields 14 and 15.
		open, close := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || close < open || string(b[open+1:close]) != "postgres" {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseUint(f[11], 10, 64)
			st, _ := strconv.ParseUint(f[12], 10, 64)
			s.postgres[e.Name()] = u + st
		}
	}
	return s
}

// cpuUse is how busy the machine was between two snapshots, as shares of
// all its CPUs.
type cpuUse struct {
	machine, postgres, self float64
}

func (s cpuSnapshot) since(start cpuSnapshot) cpuUse {
	var u cpuUse
	if total := float64(s.total - start.total); total > 0 {
		u.machine = float64(s.busy-start.busy) / total
		// A backend that started meanwhile counts whole; one that ended
		// meanwhile is lost.
		var pg uint64
		for pid, ticks := range s.postgres {
			pg += ticks - min(start.postgres[pid], ticks)
		}
		u.postgres = float64(pg) / total
	}
	if wall := s.at.Sub(start.at); wall > 0 {
		u.self = float64(s.self-start.self) / float64(wall) / float64(runtime.NumCPU())
	}
	return u
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times: 100 on every Linux this runs on.
const clockTicks = 100

// postgresSince is the CPU time the processes named postgres spent since
// start: whole for a process that started meanwhile, nothing for one that
// ended (take it before the connections close).
func (s cpuSnapshot) postgresSince(start cpuSnapshot) time.Duration {
	var ticks uint64
	for pid, t := range s.postgres {
		ticks += t - min(start.postgres[pid], t)
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

func (u cpuUse) String() string {
	if u.machine == 0 {
		return "CPU use unknown"
	}
	return fmt.Sprintf("CPU %.0f%% busy: Postgres %.0f%%, this process %.0f%%, others %.0f%%",
		100*u.machine, 100*u.postgres, 100*u.self, 100*max(u.machine-u.postgres-u.self, 0))
}
