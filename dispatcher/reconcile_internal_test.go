package dispatcher

import (
	"testing"
	"time"
)

// A re-check delay doubles up to maxRecheckWait and never wraps: base << 40
// overflows Go's duration range into the past.
func TestRecheckBackoffDoublesWithoutWrapping(t *testing.T) {
	for n, want := range map[int]time.Duration{0: time.Minute, 1: 2 * time.Minute, 3: 8 * time.Minute, 10: 1024 * time.Minute, 11: maxRecheckWait, 40: maxRecheckWait, 1000: maxRecheckWait} {
		if got := recheckBackoff(time.Minute, n); got != want {
			t.Errorf("recheckBackoff(1m, %d) = %s, want %s", n, got, want)
		}
	}
	if got := recheckBackoff(time.Duration(1<<62), 3); got != maxRecheckWait {
		t.Errorf("a huge base doubled = %s, want the cap", got)
	}
}
