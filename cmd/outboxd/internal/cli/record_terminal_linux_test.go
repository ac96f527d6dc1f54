package cli_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// openPTY opens a pseudo-terminal: the controller end, which the test
// types into, and the terminal end, which the command reads as its stdin.
func openPTY(t *testing.T) (controller, terminal *os.File) {
	t.Helper()
	controller, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { controller.Close() })
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, controller.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlock the pseudo-terminal: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, controller.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("number the pseudo-terminal: %v", errno)
	}
	terminal, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { terminal.Close() })
	return controller, terminal
}

// TestRecordSaysWhatItWaitsForOnATerminal: read from a terminal, record
// says on stderr what it waits for and how to end, instead of waiting
// silently; read from a pipe, a file or /dev/null, it says nothing.
func TestRecordSaysWhatItWaitsForOnATerminal(t *testing.T) {
	t.Parallel()
	_, dbURL := pgtest.NewDB(t)
	controller, terminal := openPTY(t)
	env, stdout, stderr := environment(map[string]string{"DATABASE_URL": dbURL}, "")
	env.Stdin = terminal
	done := make(chan int, 1)
	go func() { done <- cli.Main(context.Background(), []string{"record"}, env) }()
	testkit.Eventually(t, 10*time.Second, "record to say what it waits for", func() bool {
		return strings.Contains(stderr.String(), "Reading messages from the terminal") || len(done) > 0
	})
	wantContains(t, "stderr", stderr.String(), "Ctrl-D to end", "outboxd record messages.json")
	// A value, then Ctrl-D at the start of a line: the end of the input.
	if _, err := controller.WriteString(line("tty-1", "billing", intent("sendgrid.email", "", emailPayload)) + "\n\x04"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stdout.String(), "1 message recorded") {
			t.Errorf("record from a terminal: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("record did not end at Ctrl-D\nstderr:\n%s", stderr)
	}

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	reader, writer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	writer.Close()
	defer reader.Close()
	for _, stdin := range []*os.File{devNull, reader} {
		env, _, stderr := environment(map[string]string{"DATABASE_URL": dbURL}, "")
		env.Stdin = stdin
		if code := cli.Main(context.Background(), []string{"record"}, env); code != 0 || strings.Contains(stderr.String(), "terminal") {
			t.Errorf("record from %s: exit %d, stderr:\n%s", stdin.Name(), code, stderr)
		}
	}
}
