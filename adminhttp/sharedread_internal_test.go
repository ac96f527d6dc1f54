package adminhttp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
)

// fakeCounter counts with a cost the test sets on the cache's clock, and
// holds each count until released when asked to.
type fakeCounter struct {
	mu      sync.Mutex
	clock   time.Time
	cost    time.Duration
	hold    chan struct{} // when non-nil, each count waits for it
	started chan struct{} // told of each count's start
	counts  atomic.Int64
	err     error
}

func (f *fakeCounter) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clock
}

func (f *fakeCounter) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = f.clock.Add(d)
}

// holdCounts makes each count from now on tell started and wait for hold;
// nil, nil lets them run at once. Counts run in the cache's goroutines.
func (f *fakeCounter) holdCounts(hold, started chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold, f.started = hold, started
}

func (f *fakeCounter) count(context.Context) (audit.Stats, error) {
	n := f.counts.Add(1)
	f.mu.Lock()
	hold, started := f.hold, f.started
	f.mu.Unlock()
	if started != nil {
		started <- struct{}{}
	}
	if hold != nil {
		<-hold
	}
	f.advance(f.cost)
	return audit.Stats{Total: int(n)}, f.err
}

func newFakeCache(cost time.Duration) (*sharedRead[audit.Stats], *fakeCounter) {
	f := &fakeCounter{clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), cost: cost}
	return newSharedRead(f.count, f.now), f
}

func mustGet(t *testing.T, c *sharedRead[audit.Stats]) (int, time.Duration) {
	t.Helper()
	st, age, err := c.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Total, age
}

// A fast count is reused only for ten times as long as it took: the
// counts are as good as live.
func TestSharedReadReusesAFastCountBriefly(t *testing.T) {
	c, f := newFakeCache(2 * time.Millisecond)
	if n, _ := mustGet(t, c); n != 1 {
		t.Fatalf("first read: count %d, want 1", n)
	}
	f.advance(10 * time.Millisecond) // 12 ms after the count started
	if n, _ := mustGet(t, c); n != 1 {
		t.Fatalf("read 12 ms after a 2 ms count: count %d, want the first reused", n)
	}
	f.advance(10 * time.Millisecond)
	if n, _ := mustGet(t, c); n != 2 {
		t.Fatalf("read 22 ms after a 2 ms count: count %d, want a new one waited for", n)
	}
}

// A slow count is reused for at most sharedReuseLimit; past that a reader
// gets it at once while one new count runs for every reader, and once the
// counts are older than sharedStaleLimit a reader waits for new ones.
func TestSharedReadSharesASlowCount(t *testing.T) {
	c, f := newFakeCache(time.Second)
	if n, _ := mustGet(t, c); n != 1 {
		t.Fatalf("first read: count %d, want 1", n)
	}
	f.advance(sharedReuseLimit - 2*time.Second)
	if n, age := mustGet(t, c); n != 1 || age != sharedReuseLimit-time.Second {
		t.Fatalf("read within the reuse: count %d aged %s, want the first, aged %s", n, age, sharedReuseLimit-time.Second)
	}
	f.advance(2 * time.Second)
	hold, started := make(chan struct{}), make(chan struct{}, 10)
	f.holdCounts(hold, started)
	for range 5 {
		if n, _ := mustGet(t, c); n != 1 {
			t.Fatalf("read past the reuse while a count runs: count %d, want the first at once", n)
		}
	}
	<-started
	if got := f.counts.Load(); got != 2 {
		t.Fatalf("%d counts after five readers past the reuse, want 2 (one new count shared)", got)
	}
	f.holdCounts(nil, nil)
	close(hold)
	// The new count ends: it is the one readers get.
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := mustGet(t, c); n != 2; n, _ = mustGet(t, c) {
		if time.Now().After(deadline) {
			t.Fatalf("the shared count never replaced the first (count %d)", n)
		}
		time.Sleep(time.Millisecond)
	}
	f.advance(sharedStaleLimit)
	if n, age := mustGet(t, c); n != 3 || age != time.Second {
		t.Fatalf("read past the stale limit: count %d aged %s, want a new count waited for (3, aged its cost)", n, age)
	}
}

// After an operator's action the next reader waits for a new count.
func TestSharedReadInvalidate(t *testing.T) {
	c, _ := newFakeCache(time.Second)
	mustGet(t, c)
	c.invalidate()
	if n, _ := mustGet(t, c); n != 2 {
		t.Fatalf("read after invalidate: count %d, want a new one", n)
	}
}

// A clock that does not move (a test's Now) never reuses a count.
func TestSharedReadFrozenClockCountsEveryTime(t *testing.T) {
	c, _ := newFakeCache(0)
	for want := 1; want <= 3; want++ {
		if n, _ := mustGet(t, c); n != want {
			t.Fatalf("read %d: count %d", want, n)
		}
	}
}

// A failed count is the error of every reader waiting for it; the next
// reader counts again.
func TestSharedReadCountError(t *testing.T) {
	c, f := newFakeCache(time.Millisecond)
	f.err = errors.New("database down")
	if _, _, err := c.get(context.Background()); err == nil || err.Error() != "database down" {
		t.Fatalf("get = %v, want the count's error", err)
	}
	f.err = nil
	if n, _ := mustGet(t, c); n != 2 {
		t.Fatalf("read after a failed count: count %d, want a new one", n)
	}
}
