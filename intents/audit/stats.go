package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Stats counts intents by state and by kind and state, and measures the
// age of the oldest intent waiting for an attempt, in one snapshot. Its
// cost does not grow with the finished intents retained (see
// countByKindStateSQL).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	st := Stats{ByState: map[intenttype.State]int{}, ByKindState: map[string]map[intenttype.State]int{}}
	for _, state := range intenttype.States {
		st.ByState[state] = 0
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, countByKindStateSQL)
		if err != nil {
			return err
		}
		var kind string
		var state intenttype.State
		var n int
		_, err = pgx.ForEachRow(rows, []any{&kind, &state, &n}, func() error {
			st.Total += n
			st.ByState[state] += n
			if st.ByKindState[kind] == nil {
				st.ByKindState[kind] = map[intenttype.State]int{}
			}
			st.ByKindState[kind][state] += n
			return nil
		})
		if err != nil {
			return err
		}
		var micros *int64
		if err := tx.QueryRow(ctx, oldestPendingAgeSQL, []string{string(intenttype.StatePending), string(intenttype.StateDispatching)}).Scan(&micros, &st.CountedAt); err != nil {
			return err
		}
		if micros != nil {
			st.OldestPendingAge = max(0, time.Duration(*micros)*time.Microsecond)
			st.OldestPendingAgeSeconds = st.OldestPendingAge.Seconds()
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("audit: stats: %w", err)
	}
	st.InDoubt = st.ByState[intenttype.StateInDoubt]
	return st, nil
}

// countByKindStateSQL counts intents by kind and state: the finished ones
// from the counts internal/intentstore keeps (migration 007), the others
// live through the index on unfinished intents. Its cost grows with the
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
