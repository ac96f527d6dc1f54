package brokerloop

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Work hands every delivery to a handler, never more than n at once, and
// returns only once the last handler in flight has finished.
func TestWorkDrainsWithNWorkers(t *testing.T) {
	t.Parallel()
	const n, total = 3, 30
	deliveries := make(chan int, total)
	for i := range total {
		deliveries <- i
	}
	close(deliveries)
	// The first n handlers block until all n are in, which only happens if
	// n workers run at once.
	var arrived sync.WaitGroup
	arrived.Add(n)
	var inFlight, most, handled atomic.Int64
	seen := make([]atomic.Bool, total)
	Work(n, func() (int, bool) {
		d, ok := <-deliveries
		return d, ok
	}, func(d int) {
		cur := inFlight.Add(1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		if d < n {
			arrived.Done()
			arrived.Wait()
		}
		seen[d].Store(true)
		handled.Add(1)
		inFlight.Add(-1)
	})
	if h := handled.Load(); h != total {
		t.Fatalf("Work returned with %d of %d deliveries handled", h, total)
	}
	if m := most.Load(); m != n {
		t.Errorf("%d handlers ran at once, want %d", m, n)
	}
	for i := range seen {
		if !seen[i].Load() {
			t.Errorf("delivery %d was not handled", i)
		}
	}
}
