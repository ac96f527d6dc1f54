package testkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pollInterval is how often Eventually re-checks its condition.
const pollInterval = 20 * time.Millisecond

// Eventually polls cond until it holds, failing the test with
// "timed out after <timeout> waiting for <what>" once timeout has passed.
// cond may be called many times and from the test goroutine only.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// Count runs query, which must return a single integer (typically
// SELECT count(*) ...), on pool and returns it; any error fails the test.
func Count(t testing.TB, pool *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Suffix returns 12 random lowercase hex characters, for names that must
// not collide between tests or runs.
func Suffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// SyncBuffer is an io.Writer safe for concurrent use, for collecting the
// output (typically logs) of goroutines a test starts. The zero value is
// ready to use.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Count returns the number of non-overlapping occurrences of sub in
// everything written so far.
func (s *SyncBuffer) Count(sub string) int { return strings.Count(s.String(), sub) }

// Logger returns a debug-level text logger writing into a new SyncBuffer,
// and that buffer, so a test can assert on what was logged.
func Logger() (*slog.Logger, *SyncBuffer) {
	buf := &SyncBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// WaitWithin waits for wg, failing the test with every goroutine's stack
// if it has not finished within d: a concurrent test that deadlocks fails
// with a trace instead of hanging until go test's global timeout.
func WaitWithin(t testing.TB, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines still running after %s:\n%s", d, buf[:runtime.Stack(buf, true)])
	}
}
