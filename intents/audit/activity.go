package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// MaxActivityBuckets bounds the number of buckets Activity reports.
const MaxActivityBuckets = 1440

// Activity is what the outbox did in a recent window, one count per bucket,
// oldest bucket first. Every slice has the same length.
type Activity struct {
	// Since is the start of the first bucket.
	Since time.Time `json:"since"`
	// Bucket is each bucket's length.
	Bucket time.Duration `json:"bucket_ns"`
	// Recorded counts the intents created in each bucket.
	Recorded []int `json:"recorded"`
	// Succeeded counts the intents that finished as succeeded in each
	// bucket.
	Succeeded []int `json:"succeeded"`
	// InDoubt counts the intents now in_doubt by the bucket they last
	// changed in (when they became in_doubt, or were last looked up).
	InDoubt []int `json:"in_doubt"`
	// Backlog estimates how many intents were waiting, pending or
	// dispatching at the end of each bucket. It is reconstructed from each
	// intent's current state and times, so an intent that went back and
	// forth (in_doubt, then resent) counts as waiting all along until it
	// finished.
	Backlog []int `json:"backlog"`
	// BacklogNow counts the intents waiting, pending or dispatching now.
	BacklogNow int `json:"backlog_now"`
}

// Activity counts, per bucket of the given length from since to since +
// buckets*bucket, the intents recorded, succeeded and now in_doubt, and
// the backlog, with one aggregate query bounded by since. Times after the
// window (clock skew between this process and the database) count in the
// last bucket. A bucket shorter than a second, or a number of buckets
// outside 1..MaxActivityBuckets, is a *FieldError wrapping
// ErrInvalidInput.
func (s *Store) Activity(ctx context.Context, since time.Time, bucket time.Duration, buckets int) (Activity, error) {
	if bucket < time.Second {
		return Activity{}, inputError("bucket", "must be at least one second, got %s", bucket)
	}
	if buckets < 1 || buckets > MaxActivityBuckets {
		return Activity{}, inputError("buckets", "must be between 1 and %d, got %d", MaxActivityBuckets, buckets)
	}
	a := Activity{Since: since, Bucket: bucket, Recorded: make([]int, buckets), Succeeded: make([]int, buckets),
		InDoubt: make([]int, buckets), Backlog: make([]int, buckets)}
	rows, err := s.pool.Query(ctx, activitySQL, since, bucket.Seconds(), waitingStates())
	if err != nil {
		return Activity{}, fmt.Errorf("audit: activity: %w", err)
	}
	clamp := func(i int) int { return min(max(i, 0), buckets-1) }
	var state intenttype.State
	var created, n int
	var ended *int
	_, err = pgx.ForEachRow(rows, []any{&state, &created, &ended, &n}, func() error {
		if created >= 0 {
			a.Recorded[clamp(created)] += n
		}
		last := buckets - 1 // the last bucket it was waiting at the end of
		if ended != nil {
			switch state {
			case intenttype.StateSucceeded:
				a.Succeeded[clamp(*ended)] += n
			case intenttype.StateInDoubt:
				a.InDoubt[clamp(*ended)] += n
			}
			last = min(*ended, buckets) - 1
		} else {
			a.BacklogNow += n
		}
		for i := max(created, 0); i <= last; i++ {
			a.Backlog[i] += n
		}
		return nil
	})
	if err != nil {
		return Activity{}, fmt.Errorf("audit: activity: %w", err)
	}
	return a, nil
}

// Kinds returns the intent kinds of the Store's registry, sorted (none
// without a registry).
func (s *Store) Kinds() []string {
	if s.registry == nil {
		return nil
	}
	return s.registry.Kinds()
}

// Providers returns the names of the Store's registered providers, sorted
// (none without a registry).
func (s *Store) Providers() []string {
	if s.registry == nil {
		return nil
	}
	var names []string
	for _, p := range s.registry.Providers() {
		names = append(names, p.Name())
	}
	return names
}
