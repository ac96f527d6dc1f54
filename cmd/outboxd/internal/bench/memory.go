package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// memoryRows runs `outboxd run` as a real process against the doubles in
// this process, lets it settle idle, then has it dispatch MemoryIntents
// intents (half keyed, half unkeyed) and reads its peak resident memory.
func (r *runner) memoryRows(ctx context.Context) ([]Row, error) {
	if r.cfg.Outboxd == "" {
		r.progress("memory: skipped (no outboxd executable given)")
		return nil, nil
	}
	workers, n := r.sizes.Workers, r.sizes.MemoryIntents
	db, err := r.newDatabase(ctx, "memory", 8)
	if err != nil {
		return nil, err
	}
	defer r.closeDatabase(ctx, db)
	dbl, err := startDoubles(nil, false)
	if err != nil {
		return nil, err
	}
	defer dbl.Close()

	proc, err := startOutboxd(ctx, r.cfg.Outboxd, db.url, dbl, workers)
	if err != nil {
		return nil, err
	}
	defer proc.stop()
	// Idle: the process has started its dispatcher; its resident memory
	// over the next second is the baseline.
	idle, err := proc.peakRSSOver(ctx, time.Second)
	if err != nil {
		return nil, err
	}

	client, err := intents.NewClient(db.pool, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		return nil, err
	}
	r.progress("memory: outboxd run (pid %d, %d workers) dispatching %d intents", proc.cmd.Process.Pid, workers, n)
	start := time.Now()
	if _, err := recordIntents(ctx, client, "mk-", stripeprovider.KindPaymentIntent, n/2); err != nil {
		return nil, err
	}
	if _, err := recordIntents(ctx, client, "mu-", sendgridprovider.KindEmail, n-n/2); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(waitLimit)
	for {
		var left int
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_intents WHERE state <> 'succeeded'`).Scan(&left); err != nil {
			return nil, err
		}
		if left == 0 {
			break
		}
		if err := proc.alive(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("outboxd run left %d of %d intents unsettled", left, n)
		}
		if _, err := proc.peakRSSOver(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	took := time.Since(start)
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return nil, fmt.Errorf("%d intents were performed twice", dup)
	}
	status, err := readStatus(proc.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	peak := status["VmHWM"]
	const limit = 80 << 20
	return []Row{{
		Measure: fmt.Sprintf("outboxd run peak resident memory (VmHWM), %d workers, dispatching", workers), Unit: "MiB",
		Figure: mib(peak), Baseline: "the same process idle (VmRSS)", BaselineFigure: mib(idle), Ratio: float64(peak) / float64(max(idle, 1)),
		Target: "≤ 80 MiB", Met: peak <= limit,
		Note: fmt.Sprintf("%d intents, half keyed and half unkeyed, recorded and performed in %s (%.0f intents/s); VmRSS at the end %.1f MiB",
			n, took.Round(time.Millisecond), float64(n)/took.Seconds(), mib(status["VmRSS"])),
	}}, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// outboxdProcess is a running `outboxd run`.
type outboxdProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	errMu  sync.Mutex
	stderr strings.Builder
	err    error
}

// startOutboxd starts `outboxd run` on dbURL with the doubles as its
// providers, and returns once it logs that its dispatcher started.
func startOutboxd(ctx context.Context, path, dbURL string, dbl *doubles, workers int) (*outboxdProcess, error) {
	cmd := exec.Command(path, "run",
		"--database-url", dbURL,
		"--providers", "stripe,sendgrid",
		"--stripe-api-base", dbl.StripeURL(),
		"--sendgrid-api-base", dbl.SendGrid().URL(),
		"--workers", strconv.Itoa(workers),
		"--admin-addr", "",
		"--log-format", "json",
		"--log-level", "info",
	)
	cmd.Env = append(outboxdEnv(), "STRIPE_API_KEY="+stripedouble.DefaultAPIKey, "SENDGRID_API_KEY="+sendgriddouble.DefaultAPIKey)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s run: %w", path, err)
	}
	p := &outboxdProcess{cmd: cmd, exited: make(chan struct{})}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			p.errMu.Lock()
			if p.stderr.Len() < 16<<10 {
				p.stderr.WriteString(line + "\n")
			}
			p.errMu.Unlock()
			if strings.Contains(line, `"dispatcher started"`) {
				once.Do(func() { close(started) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		err := cmd.Wait()
		p.errMu.Lock()
		p.err = err
		p.errMu.Unlock()
		close(p.exited)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-started:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("outboxd run exited at start: %v\n%s", p.exitErr(), p.log())
	case <-waitCtx.Done():
		p.stop()
		return nil, fmt.Errorf("outboxd run did not start within 30s\n%s", p.log())
	}
}

func (p *outboxdProcess) log() string {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.stderr.String()
}

func (p *outboxdProcess) exitErr() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.err
}

func (p *outboxdProcess) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("outboxd run exited: %v\n%s", p.exitErr(), p.log())
	default:
		return nil
	}
}

// stop asks the process to stop (SIGTERM) and kills it if it has not
// within 30 seconds.
func (p *outboxdProcess) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// peakRSSOver samples the process's VmRSS every 20ms for d and returns the
// largest, in bytes.
func (p *outboxdProcess) peakRSSOver(ctx context.Context, d time.Duration) (int64, error) {
	var peak int64
	end := time.Now().Add(d)
	for {
		if err := p.alive(); err != nil {
			return 0, err
		}
		st, err := readStatus(p.cmd.Process.Pid)
		if err != nil {
			return 0, err
		}
		peak = max(peak, st["VmRSS"])
		if time.Now().After(end) {
			return peak, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readStatus reads the kB fields of /proc/<pid>/status, in bytes.
func readStatus(pid int) (map[string]int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("read the process's memory: %w", err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 2 && fields[1] == "kB" {
			if n, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
				out[k] = n << 10
			}
		}
	}
	if _, ok := out["VmHWM"]; !ok {
		return nil, errors.New("no VmHWM in /proc/<pid>/status")
	}
	return out, nil
}
