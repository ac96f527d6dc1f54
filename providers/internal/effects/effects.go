// Package effects tallies the effects a provider test double performed, per
// intent id, so that exactly-once tests and the demo can ask how many times
// each intent took effect.
package effects

import (
	"maps"
	"strconv"
	"sync"
)

// Tally counts effects by the intent id the adapter sent in metadata. The
// zero value is ready to use and safe for concurrent use.
type Tally struct {
	mu       sync.Mutex
	byIntent map[string]int
}

// Add counts one effect for intentID; effects without an intent id (requests
// that did not come from the dispatcher) are not tallied.
func (t *Tally) Add(intentID string) {
	if intentID == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byIntent == nil {
		t.byIntent = map[string]int{}
	}
	t.byIntent[intentID]++
}

// For returns the effects counted for intentID.
func (t *Tally) For(intentID int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byIntent[strconv.FormatInt(intentID, 10)]
}

// Duplicates returns how many intent ids have more than one effect. An
// exactly-once run ends with zero.
func (t *Tally) Duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.byIntent {
		if c > 1 {
			n++
		}
	}
	return n
}

// Snapshot returns a copy of the counts by intent id.
func (t *Tally) Snapshot() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.byIntent)
}
