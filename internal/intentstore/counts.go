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

// queueCountFinished adds to b the statement that counts, among ids, the
// intents that the transaction b runs in moved to a terminal state (see
// countFinishedSQL); to is the state the transaction means to move them to,
// and nothing is queued unless it is terminal. Queue it after the
// statements that move the intents, and count an intent once per
// transaction. A transaction that settles many intents queues it once with
// all their ids: ids that did not finish, or were not moved by this
// transaction, count nothing, so one aggregated write serves the group.
func queueCountFinished(b *pgx.Batch, to intenttype.State, ids ...int64) {
	if to.Terminal() {
		queueCount(b, ids)
	}
}

// queueCount adds to b the statement that counts, among ids, the intents
// the transaction finished, whatever each was meant to move to: a group of
// settlements counts its intents with one statement.
func queueCount(b *pgx.Batch, ids []int64) {
	countFinishedQ.queue(b, pgx.NamedArgs{"ids": ids})
}

// Recount rebuilds the finished counts from the intents themselves. The
// counts are kept exact by every write of this package; Recount is for a
// database whose intents were written another way (a restore of part of
// the table, a bulk load). It also starts the activity roll-up afresh
// (RollUpActivity), so the activity chart reads those intents live. It
// locks outbox_intents against writes while it scans the whole table.
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
