package intentstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Counting every intent reads every unfinished one (finished ones are
// counted as they finish): a millisecond on a quiet outbox, most of a
// second during a backlog of 200,000 on a busy machine, which is when
// operators run outboxd stats, dashboards refresh and monitors poll. So
// while counting is slow, the dispatchers count for every reader: their
// leader counts every CountsRefreshInterval, or less often where a count
// takes long (RefreshCounts), and saves the count (migration 016); a
// reader takes the saved count while it is fresh (Counts.Reusable)
// instead of counting again. A quiet outbox is counted live by each
// reader, exact to the moment.

// CountsRefreshInterval is how often the dispatchers' leader may count
// the intents for the readers (RefreshCounts).
const CountsRefreshInterval = 5 * time.Second

const (
	// slowCount is the count that readers stop waiting for: the
	// dashboard's and the API's reads are to answer within 50 ms.
	slowCount = 25 * time.Millisecond
	// fewUnfinished is as many unfinished intents as are always counted
	// live, however long the count took: their index entries are read in
	// milliseconds, so a slow count of so few is a busy machine's moment
	// (a test run under -race), not a backlog, and a reader right after
	// an operator's action would otherwise be shown the count from before.
	fewUnfinished = 10_000
	// countShare bounds the database's time spent counting for the
	// readers: a count that took d is not taken again for countShare × d.
	countShare = 10
)

// Counts are the intents counted by kind and state, in one snapshot.
type Counts struct {
	// ByKindState counts intents per kind, then state.
	ByKindState map[string]map[intenttype.State]int
	// OldestPendingAge is the age, when counted, of the oldest pending or
	// dispatching intent; 0 when there is none.
	OldestPendingAge time.Duration
	// At is when the snapshot was taken, by the database's clock.
	At time.Time
	// Took is how long counting took, by the machine's clock.
	Took time.Duration
}

// refreshAfter is how long a count that took took is kept before the next:
// CountsRefreshInterval, longer for a slow count (countShare).
func refreshAfter(took time.Duration) time.Duration {
	return max(CountsRefreshInterval, countShare*took)
}

// Reusable reports whether a reader should take c, saved age ago, rather
// than count: counting is slow (c took slowCount or more, for more than
// fewUnfinished unfinished intents), and c is younger than three
// refreshes (a leader that stopped counting, or a dispatcher that is not
// running, leaves readers to count live again).
func (c Counts) Reusable(age time.Duration) bool {
	return c.Took >= slowCount && c.Unfinished() > fewUnfinished && age < 3*refreshAfter(c.Took)
}

// Unfinished is how many of the intents counted were not finished: those a
// count reads one by one.
func (c Counts) Unfinished() int {
	n := 0
	for _, byState := range c.ByKindState {
		for state, k := range byState {
			if !state.Terminal() {
				n += k
			}
		}
	}
	return n
}

// CountIntents counts the intents now, in one read-only snapshot.
func (s *Store) CountIntents(ctx context.Context) (Counts, error) {
	start := time.Now()
	c := Counts{ByKindState: map[string]map[intenttype.State]int{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, countByKindStateSQL)
		if err != nil {
			return err
		}
		var kind string
		var state intenttype.State
		var n int
		_, err = pgx.ForEachRow(rows, []any{&kind, &state, &n}, func() error {
			if c.ByKindState[kind] == nil {
				c.ByKindState[kind] = map[intenttype.State]int{}
			}
			c.ByKindState[kind][state] += n
			return nil
		})
		if err != nil {
			return err
		}
		var micros *int64
		if err := tx.QueryRow(ctx, oldestPendingAgeSQL, []string{string(intenttype.StatePending), string(intenttype.StateDispatching)}).Scan(&micros, &c.At); err != nil {
			return err
		}
		if micros != nil {
			c.OldestPendingAge = max(0, time.Duration(*micros)*time.Microsecond)
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("intentstore: count intents: %w", err)
	}
	c.Took = time.Since(start)
	return c, nil
}

// SavedCounts returns the count the dispatchers last saved, and how old it
// is by the database's clock; ok is false when none was saved.
func (s *Store) SavedCounts(ctx context.Context) (c Counts, age time.Duration, ok bool, err error) {
	var (
		byKindState map[string]map[intenttype.State]int
		oldest      int64
		took        int64
		ageMicros   int64
	)
	err = s.pool.QueryRow(ctx, savedCountsSQL).Scan(&byKindState, &oldest, &c.At, &took, &ageMicros)
	if errors.Is(err, pgx.ErrNoRows) {
		return Counts{}, 0, false, nil
	}
	if err != nil {
		return Counts{}, 0, false, fmt.Errorf("intentstore: read the saved counts: %w", err)
	}
	c.ByKindState = byKindState
	c.OldestPendingAge = time.Duration(oldest) * time.Microsecond
	c.Took = time.Duration(took) * time.Microsecond
	return c, time.Duration(ageMicros) * time.Microsecond, true, nil
}

// RefreshCounts counts the intents and saves the count for the readers,
// unless the saved one is younger than the time it took allows
// (refreshAfter). It reports whether it counted. The dispatchers' leader
// runs it every CountsRefreshInterval.
func (s *Store) RefreshCounts(ctx context.Context) (bool, error) {
	saved, age, ok, err := s.SavedCounts(ctx)
	if err != nil {
		return false, err
	}
	if ok && age < refreshAfter(saved.Took) {
		return false, nil
	}
	c, err := s.CountIntents(ctx)
	if err != nil {
		return false, err
	}
	_, err = s.pool.Exec(ctx, saveCountsSQL, pgx.NamedArgs{
		"by_kind_state": c.ByKindState, "oldest_pending_micros": c.OldestPendingAge.Microseconds(),
		"counted_at": c.At, "took_micros": c.Took.Microseconds(),
	})
	if err != nil {
		return false, fmt.Errorf("intentstore: save the counts: %w", err)
	}
	return true, nil
}

// countByKindStateSQL counts intents by kind and state: the finished ones
// from the counts this package keeps (migration 007), the others live
// through the index on unfinished intents. Its cost grows with the
// unfinished intents and the kinds, not with the retained history.
const countByKindStateSQL = `
SELECT kind, state, sum(n)::bigint
FROM outbox_intent_counts
GROUP BY kind, state
HAVING sum(n) <> 0
UNION ALL
SELECT kind, state, count(*)
FROM outbox_intents
WHERE finished_at IS NULL
GROUP BY kind, state`

// oldestPendingAgeSQL measures by the database's clock, in microseconds,
// the age of the oldest intent in one of the states $1 (pending or
// dispatching: a waiting intent waits for others, not for the dispatcher);
// NULL when there is none; and the start of the counts' snapshot.
const oldestPendingAgeSQL = `
SELECT (extract(epoch FROM now() - min(created_at)) * 1000000)::bigint, now()
FROM outbox_intents
WHERE finished_at IS NULL AND state = ANY($1)`

// savedCountsSQL reads the saved count, with its age by the database's
// clock in microseconds.
const savedCountsSQL = `
SELECT by_kind_state, oldest_pending_micros, counted_at, took_micros,
    (extract(epoch FROM now() - counted_at) * 1000000)::bigint
FROM outbox_counts_saved`

// saveCountsSQL saves a count, unless a newer one was saved meanwhile (two
// leaders overlapping for a moment after a change of leader).
const saveCountsSQL = `
INSERT INTO outbox_counts_saved AS s (one, by_kind_state, oldest_pending_micros, counted_at, took_micros)
VALUES (true, @by_kind_state, @oldest_pending_micros, @counted_at, @took_micros)
ON CONFLICT (one) DO UPDATE
SET by_kind_state = excluded.by_kind_state, oldest_pending_micros = excluded.oldest_pending_micros,
    counted_at = excluded.counted_at, took_micros = excluded.took_micros
WHERE s.counted_at < excluded.counted_at`
