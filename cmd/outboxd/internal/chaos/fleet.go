package chaos

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fleet runs the dispatcher processes ('outboxd run'), one per slot, and
// kills and restarts them on demand. A process that exits on its own is
// counted and restarted, unless the fleet is stopping.
type fleet struct {
	bin    string
	args   []string
	env    []string
	logDir string
	logger *slog.Logger

	mu         sync.Mutex
	slots      []*child
	stopping   bool
	starts     int
	kills      []time.Time // when each SIGKILLed process was reaped
	unexpected []string    // one line per process that exited on its own
	exits      []time.Time // when each of those was reaped
	watchers   sync.WaitGroup
}

// child is one process of the fleet.
type child struct {
	slot int
	cmd  *exec.Cmd
	out  *tail
	file *os.File
	done chan struct{} // closed once the process is reaped
	err  error         // cmd.Wait's result, set before done closes
	byUs bool          // killed or stopped by the fleet; guarded by fleet.mu
}

func newFleet(bin string, args, env []string, size int, logDir string, logger *slog.Logger) *fleet {
	return &fleet{bin: bin, args: args, env: env, logDir: logDir, logger: logger, slots: make([]*child, size)}
}

// startAll starts a process in every slot.
func (f *fleet) startAll() error {
	for i := range f.slots {
		if err := f.start(i); err != nil {
			return err
		}
	}
	return nil
}

// start starts a process in slot i.
func (f *fleet) start(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping || f.slots[i] != nil {
		return nil // stopping, or already restarted by someone else
	}
	return f.startLocked(i)
}

func (f *fleet) startLocked(i int) error {
	c := &child{slot: i, out: newTail(64 << 10), done: make(chan struct{})}
	var w io.Writer = c.out
	if f.logDir != "" {
		file, err := os.OpenFile(filepath.Join(f.logDir, fmt.Sprintf("dispatcher-%d.log", i+1)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("chaos: dispatcher log: %w", err)
		}
		c.file = file
		w = io.MultiWriter(c.out, file)
	}
	c.cmd = exec.Command(f.bin, f.args...)
	c.cmd.Env = f.env
	c.cmd.Stdout, c.cmd.Stderr = w, w
	dieWithParent(c.cmd)
	if err := c.cmd.Start(); err != nil {
		if c.file != nil {
			c.file.Close()
		}
		return fmt.Errorf("chaos: start dispatcher %d: %w", i+1, err)
	}
	f.starts++
	f.slots[i] = c
	f.watchers.Add(1)
	go f.watch(c)
	return nil
}

// watch reaps c, and restarts its slot when the process exited on its own.
func (f *fleet) watch(c *child) {
	defer f.watchers.Done()
	c.err = c.cmd.Wait()
	if c.file != nil {
		c.file.Close()
	}
	close(c.done)
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.byUs || f.stopping {
		return
	}
	f.exits = append(f.exits, time.Now())
	f.unexpected = append(f.unexpected, fmt.Sprintf("dispatcher %d (pid %d) exited on its own: %v; last output: %s",
		c.slot+1, c.cmd.Process.Pid, c.err, lastLines(c.out.String(), 5)))
	f.logger.Warn("dispatcher exited on its own; restarting it", "slot", c.slot+1, "error", c.err)
	if f.slots[c.slot] == c {
		f.slots[c.slot] = nil
		go func() {
			time.Sleep(100 * time.Millisecond) // do not spin on a process that cannot start
			if err := f.start(c.slot); err != nil {
				f.logger.Error("restart dispatcher", "slot", c.slot+1, "error", err)
			}
		}()
	}
}

// killRandom SIGKILLs the process of a random slot, waits until it is
// reaped, records the time and starts a new process in its place. It
// returns false when no slot had a running process.
func (f *fleet) killRandom(rnd *rand.Rand) (bool, error) {
	f.mu.Lock()
	var live []*child
	for _, c := range f.slots {
		if c != nil {
			live = append(live, c)
		}
	}
	if len(live) == 0 || f.stopping {
		f.mu.Unlock()
		return false, nil
	}
	c := live[rnd.IntN(len(live))]
	c.byUs = true
	f.slots[c.slot] = nil
	f.mu.Unlock()

	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	f.mu.Lock()
	f.kills = append(f.kills, time.Now())
	f.mu.Unlock()
	return true, f.start(c.slot)
}

// restartAll stops every process gracefully (SIGTERM, then SIGKILL after
// grace) and starts a new one in its slot, one slot at a time.
func (f *fleet) restartAll(grace time.Duration) error {
	for i := range f.slots {
		f.mu.Lock()
		c := f.slots[i]
		if c != nil {
			c.byUs = true
			f.slots[i] = nil
		}
		f.mu.Unlock()
		if c != nil {
			terminate(c, grace)
		}
		if err := f.start(i); err != nil {
			return err
		}
	}
	return nil
}

// stop stops every process gracefully, then waits for the watchers.
func (f *fleet) stop(grace time.Duration) {
	f.mu.Lock()
	f.stopping = true
	live := make([]*child, 0, len(f.slots))
	for i, c := range f.slots {
		if c != nil {
			c.byUs = true
			live = append(live, c)
			f.slots[i] = nil
		}
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			terminate(c, grace)
		}()
	}
	wg.Wait()
	f.watchers.Wait()
}

// terminate sends SIGTERM and waits up to grace for the process to end,
// then kills it.
func terminate(c *child, grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
}

// running is how many slots have a process.
func (f *fleet) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.slots {
		if c != nil {
			n++
		}
	}
	return n
}

type fleetStats struct {
	starts     int
	kills      []time.Time
	unexpected []string
	exits      []time.Time
}

func (f *fleet) stats() fleetStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fleetStats{starts: f.starts, kills: append([]time.Time(nil), f.kills...),
		unexpected: append([]string(nil), f.unexpected...), exits: append([]time.Time(nil), f.exits...)}
}

// outputs returns the last output of every slot's current process.
func (f *fleet) outputs() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for i, c := range f.slots {
		if c != nil {
			fmt.Fprintf(&b, "--- dispatcher %d (pid %d), last output:\n%s\n", i+1, c.cmd.Process.Pid, lastLines(c.out.String(), 30))
		}
	}
	return b.String()
}

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
