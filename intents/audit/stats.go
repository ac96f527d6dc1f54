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
		if err := tx.QueryRow(ctx, oldestPendingAgeSQL, []string{string(intenttype.StatePending), string(intenttype.StateDispatching)}).Scan(&micros); err != nil {
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
