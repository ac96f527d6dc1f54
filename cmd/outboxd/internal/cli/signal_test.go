package cli_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit"
)

// signalChild is set in the process TestASecondSignalExitsAtOnce starts: a
// command whose graceful stop never ends.
const signalChild = "OUTBOXD_TEST_SIGNAL_CHILD"

// TestASecondSignalExitsAtOnce: the first Ctrl-C (or SIGTERM) starts a
// graceful stop and says that a second one exits at once; the second exits
// at once with 128+signal, however long the graceful stop would take.
func TestASecondSignalExitsAtOnce(t *testing.T) {
	if os.Getenv(signalChild) != "" {
		ctx, stop := cli.StopOnSignal(context.Background(), cli.OSEnv())
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("stopping")
		time.Sleep(time.Minute) // a graceful stop that waits and waits
		os.Exit(0)
	}
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestASecondSignalExitsAtOnce$")
		cmd.Env = append(os.Environ(), signalChild+"=1")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		expect := func(want string) {
			t.Helper()
			if !lines.Scan() || lines.Text() != want {
				_ = cmd.Process.Kill()
				t.Fatalf("the child printed %q, want %q; stderr:\n%s", lines.Text(), want, stderr.String())
			}
		}
		expect("ready")
		_ = cmd.Process.Signal(sig)
		expect("stopping")
		testkit.Eventually(t, 10*time.Second, "the first signal's message", func() bool {
			return strings.Contains(stderr.String(), "stopping gracefully")
		})
		started := time.Now()
		_ = cmd.Process.Signal(sig)
		err = cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) || time.Since(started) > 10*time.Second {
			t.Errorf("after a second %s the child ended with %v after %s; want exit %d at once", sig, err, time.Since(started), 128+int(sig))
		}
		name := map[syscall.Signal]string{syscall.SIGINT: "Ctrl-C", syscall.SIGTERM: "SIGTERM"}[sig]
		wantContains(t, "stderr", stderr.String(),
			"outboxd: stopping gracefully ("+name+" again to exit at once)",
			"outboxd: "+name+" again: exiting at once, without waiting for the graceful stop")
	}
}

// TestEveryCommandStopsThroughStopOnSignal: no command installs a signal
// handler of its own, which would let a second Ctrl-C wait for its
// graceful stop.
func TestEveryCommandStopsThroughStopOnSignal(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "signal.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "signal.Notify") {
			t.Errorf("%s handles signals itself; use stopOnSignal", f)
		}
	}
}
