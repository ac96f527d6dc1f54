package audit

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
)

// Stats counts intents by state and by kind and state, and measures the
// age of the oldest intent waiting for an attempt, in one snapshot. Its
// cost does not grow with the finished intents retained, but it does with
// the unfinished ones: while counting is slow (a backlog), Stats returns
// the running dispatchers' last count instead, a few seconds old
// (Stats.Reused, Stats.CountedAt). LiveStats always counts.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	c, age, ok, err := s.store.SavedCounts(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("audit: stats: %w", err)
	}
	if ok && c.Reusable(age) {
		// The oldest waiting intent has aged with the count (if it has
		// not been attempted since: the count says "as of CountedAt").
		c.OldestPendingAge += age
		st := statsOf(c)
		st.Reused, st.ReusedAge = true, age
		return st, nil
	}
	return s.LiveStats(ctx)
}

// LiveStats counts intents as Stats does, now, whatever the cost.
func (s *Store) LiveStats(ctx context.Context) (Stats, error) {
	c, err := s.store.CountIntents(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("audit: stats: %w", err)
	}
	return statsOf(c), nil
}

func statsOf(c intentstore.Counts) Stats {
	st := Stats{ByState: map[intenttype.State]int{}, ByKindState: c.ByKindState, CountedAt: c.At}
	for _, state := range intenttype.States {
		st.ByState[state] = 0
	}
	for _, byState := range c.ByKindState {
		for state, n := range byState {
			st.Total += n
			st.ByState[state] += n
		}
	}
	if st.ByState[intenttype.StatePending]+st.ByState[intenttype.StateDispatching] > 0 {
		st.OldestPendingAge = c.OldestPendingAge
		st.OldestPendingAgeSeconds = c.OldestPendingAge.Seconds()
	}
	st.InDoubt = st.ByState[intenttype.StateInDoubt]
	return st
}
