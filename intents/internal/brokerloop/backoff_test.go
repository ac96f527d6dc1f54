package brokerloop

import (
	"math"
	"testing"
	"time"
)

func TestBackoffDoublesUpToMax(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for n, w := range want {
		if got := b.Delay(n); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %s, want %s", n, got, w*time.Millisecond)
		}
	}
	if got := b.Delay(1 << 20); got != time.Second {
		t.Errorf("Delay(1<<20) = %s, want Max", got)
	}
	huge := Backoff{Base: time.Second, Max: math.MaxInt64}
	if got := huge.Delay(100); got != math.MaxInt64 {
		t.Errorf("Delay(100) near overflow = %s, want Max", got)
	}
}

func TestBackoffJitterStaysWithinItsPercentAndTheCap(t *testing.T) {
	t.Parallel()
	b := Backoff{Base: 100 * time.Millisecond, Max: time.Second, JitterPercent: 20}
	seen := map[time.Duration]bool{}
	for range 2000 {
		d := b.Delay(1) // 200ms ± 20%
		if d < 162*time.Millisecond || d > 240*time.Millisecond {
			t.Fatalf("Delay(1) = %s, want 200ms ± 20%%", d)
		}
		seen[d] = true
		// 800ms doubled once more is past the cap whatever the jitter.
		if d := b.Delay(4); d != time.Second {
			t.Fatalf("Delay(4) = %s, want Max", d)
		}
		if d := b.Delay(3); d < 648*time.Millisecond || d > time.Second {
			t.Fatalf("Delay(3) = %s, want 800ms ± 20%% capped at 1s", d)
		}
	}
	if len(seen) < 10 {
		t.Errorf("2000 jittered delays took only %d values", len(seen))
	}
}
