package adminhttp_test

import (
	"bytes"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// No input can make a door use unbounded memory: sixteen clients posting
// 1 MiB of '[' at once (before, one cost the process about 115 MB and
// sixteen took it to 2 GB) are refused, and the server's heap stays within
// what MaxConcurrentBodies bodies of MaxBodyBytes cost. Not parallel: the
// heap is the whole process's.
func TestDeepBodiesInParallelKeepTheHeapBounded(t *testing.T) {
	b := setup(t, setupOpts{})
	body := bytes.Repeat([]byte("["), 1<<20)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var peak atomic.Uint64
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	statuses := make([]int, 16)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := b.http.Post(b.url+"/api/v1/messages", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			var msg bytes.Buffer
			_, _ = msg.ReadFrom(resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
			if resp.StatusCode == http.StatusBadRequest && !strings.Contains(msg.String(), "nested deeper than 64 levels") {
				t.Errorf("400 saying %s, want the nesting named", msg.String())
			}
		}()
	}
	wg.Wait()
	close(stop)
	sampled.Wait()
	for i, st := range statuses {
		if st != http.StatusBadRequest && st != http.StatusServiceUnavailable {
			t.Errorf("request %d: %d, want 400 (too deep) or 503 (too many bodies at once)", i, st)
		}
	}
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	const bound = 64 << 20
	t.Logf("heap in use grew by %.1f MiB at its peak", float64(grew)/(1<<20))
	if grew > bound {
		t.Fatalf("heap in use grew by %.1f MiB under 16 deep bodies, want at most %d MiB", float64(grew)/(1<<20), bound>>20)
	}
}
