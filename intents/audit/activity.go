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
// the backlog. Times after the window (clock skew between this process and
// the database) count in the last bucket. A bucket shorter than a second,
// or a number of buckets outside 1..MaxActivityBuckets, is a *FieldError
// wrapping ErrInvalidInput.
//
// Its cost does not grow with what finished in the window when since falls
// on a minute and bucket is whole minutes, as the dashboard's chart does:
// it first rolls up what finished since the last roll-up (at most
// intentstore.DefaultActivityRollUpLimit intents; the dispatcher's leader
// does it every minute too), then reads one row a minute for the intents
// finished in the rolled-up range, and the rest live. Any other window
// reads every intent finished in it.
func (s *Store) Activity(ctx context.Context, since time.Time, bucket time.Duration, buckets int) (Activity, error) {
	if bucket < time.Second {
		return Activity{}, inputError("bucket", "must be at least one second, got %s", bucket)
	}
	if buckets < 1 || buckets > MaxActivityBuckets {
		return Activity{}, inputError("buckets", "must be between 1 and %d, got %d", MaxActivityBuckets, buckets)
	}
	byMinute := bucket%time.Minute == 0 && since.Equal(since.Truncate(time.Minute))
	if byMinute {
		if _, err := s.store.RollUpActivity(ctx, 0); err != nil {
			return Activity{}, fmt.Errorf("audit: activity: %w", err)
		}
	}
	return s.activity(ctx, since, bucket, buckets, byMinute)
}

// activity is Activity's read, from the roll-up or, without byMinute, from
// the intents alone. Each row counts intents created in one bucket (or
// before the window, or unknown) and ended in one (finished, or last
// changed for an in_doubt one; none while waiting, or unknown). The backlog
// at the end of bucket i is what waits now, plus what ended after i, less
// what was created after i, "after" including past the window's end.
func (s *Store) activity(ctx context.Context, since time.Time, bucket time.Duration, buckets int, byMinute bool) (Activity, error) {
	a := Activity{Since: since, Bucket: bucket, Recorded: make([]int, buckets), Succeeded: make([]int, buckets),
		InDoubt: make([]int, buckets), Backlog: make([]int, buckets)}
	rows, err := s.pool.Query(ctx, activitySQL, since, bucket.Seconds(), waitingStates(), byMinute)
	if err != nil {
		return Activity{}, fmt.Errorf("audit: activity: %w", err)
	}
	// Index buckets is past the window's end.
	created, ended := make([]int, buckets+1), make([]int, buckets+1)
	past := func(i int) int { return min(max(i, 0), buckets) }
	last := func(i int) int { return min(max(i, 0), buckets-1) }
	var rolledUp bool
	var state intenttype.State
	var createdIn, endedIn *int
	var n int
	_, err = pgx.ForEachRow(rows, []any{&rolledUp, &state, &createdIn, &endedIn, &n}, func() error {
		if createdIn != nil && *createdIn >= 0 {
			created[past(*createdIn)] += n
			a.Recorded[last(*createdIn)] += n
		}
		switch {
		case endedIn != nil:
			ended[past(*endedIn)] += n
			switch state {
			case intenttype.StateSucceeded:
				a.Succeeded[last(*endedIn)] += n
			case intenttype.StateInDoubt:
				a.InDoubt[last(*endedIn)] += n
			}
		case !rolledUp:
			a.BacklogNow += n
		}
		return nil
	})
	if err != nil {
		return Activity{}, fmt.Errorf("audit: activity: %w", err)
	}
	backlog := a.BacklogNow
	for i := buckets - 1; i >= 0; i-- {
		backlog += ended[i+1] - created[i+1]
		a.Backlog[i] = max(backlog, 0)
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

// activitySQL is Activity's one read, one snapshot: rows of (rolled up,
// state, creation bucket, end bucket, count), buckets counted from $1, the
// window's start, $2 seconds long, -1 for a creation before the window.
//
// Live rows, rolled up false: the intents waiting for an attempt (in one of
// the states $3: no end), the ones now in_doubt that last changed in the
// window (their end: that change), and those that finished in the window
// outside the rolled-up range of finished_at (migration 009). Each branch
// is served by an index: the one on unfinished intents, the one on
// finished_at.
//
// Rolled-up rows, when $4 (the window starts on a minute and its buckets
// are whole minutes), from the window's minutes: intents created in a
// minute and finished in the rolled-up range (a creation, no end), and the
// ones that succeeded or otherwise finished in a minute (an end, no
// creation). Without $4 the rolled-up range counts as empty and every
// finished intent is read live.
const activitySQL = `
WITH rolled AS MATERIALIZED (
    SELECT rolled_from, rolled_until FROM outbox_activity_rollup WHERE $4
  UNION ALL
    SELECT 'infinity', 'infinity' WHERE NOT $4
),
touched AS (
    SELECT state, created_at, NULL::timestamptz AS ended_at
    FROM outbox_intents
    WHERE finished_at IS NULL AND state = ANY($3)
  UNION ALL
    SELECT state, created_at, updated_at
    FROM outbox_intents
    WHERE finished_at IS NULL AND state = 'in_doubt' AND updated_at >= $1
  UNION ALL
    SELECT state, created_at, finished_at
    FROM outbox_intents
    WHERE finished_at >= $1 AND finished_at < (SELECT rolled_from FROM rolled)
  UNION ALL
    SELECT state, created_at, finished_at
    FROM outbox_intents
    WHERE finished_at >= greatest($1, (SELECT rolled_until FROM rolled))
)
SELECT false, state,
    greatest(-1, floor(extract(epoch FROM created_at - $1::timestamptz) / $2::float8))::int,
    floor(extract(epoch FROM ended_at - $1::timestamptz) / $2::float8)::int,
    count(*)
FROM touched
GROUP BY 2, 3, 4
UNION ALL
SELECT true, r.state, r.created, r.ended, r.n
FROM outbox_activity_minutes m
CROSS JOIN LATERAL (SELECT floor(extract(epoch FROM m.minute - $1::timestamptz) / $2::float8)::int) AS mb (b)
CROSS JOIN LATERAL (VALUES ('', mb.b, NULL::int, m.recorded),
                           ('succeeded', NULL, mb.b, m.succeeded),
                           ('finished', NULL, mb.b, m.finished - m.succeeded)) AS r (state, created, ended, n)
WHERE $4 AND m.minute >= $1 AND r.n <> 0`

// waitingStates are the states of an intent waiting for an attempt: every
// state it can be in before it finishes but in_doubt, which waits for an
// operator or a look-up instead. From intenttype, so a state added there
// is counted without a change here.
func waitingStates() []string {
	var out []string
	for _, s := range intenttype.States {
		if !s.Terminal() && s != intenttype.StateInDoubt {
			out = append(out, string(s))
		}
	}
	return out
}
