package intentstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// How intents are counted (migration 007): finished intents by kind and
// state in outbox_intent_counts, added to in the transaction that finishes
// them and taken from in the statement that prunes them; unfinished ones
// counted live, through the index on unfinished intents. So reading every
// count costs the number of unfinished intents plus kinds × states, however
// many finished intents are retained.

// queueCountFinished adds to b the statement that counts intent id as
// finished if the transaction b runs in moved it to a terminal state; to is
// the state the transaction means to move it to, and nothing is queued
// unless it is terminal. Queue it once per intent and transaction, after
// the statements that move the intent.
func queueCountFinished(b *pgx.Batch, to intenttype.State, ids ...int64) {
	if to.Terminal() {
		b.Queue(countFinishedSQL, pgx.NamedArgs{"ids": ids})
	}
}

// Recount rebuilds the finished counts from the intents themselves. The
// counts are kept exact by every write of this package; Recount is for a
// database whose intents were written another way (a restore of part of
// the table, a bulk load). It locks outbox_intents against writes while it
// scans the whole table.
func (s *Store) Recount(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, q := range recountSQL {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("intentstore: recount finished intents: %w", err)
	}
	return nil
}
