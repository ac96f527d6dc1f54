package intentstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// How intents are counted (migration 007): finished intents by kind and
// state in outbox_intent_counts, added to in the transaction that finishes
// them and taken from in the statement that prunes them (or the resend
// that takes a failed one back); unfinished ones
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

// countSlot is the row of outbox_intent_counts a transaction adds to: its
// backend's, so that concurrent transactions rarely share one and never
// queue on a single hot row (migration 007).
const countSlot = `(pg_backend_pid() % 64)::smallint`

// finishedSQL is the terminal states, as an SQL list: an intent is in one
// exactly when its finished_at is set (outbox_intents_finished_check).
const finishedSQL = `('succeeded', 'failed', 'cancelled')`

// countFinishedSQL adds the intents of @ids that this transaction moved to
// a terminal state to the finished counts, one aggregated write per (kind,
// state), together with the intents cancelled with them because they came
// after one of them (releaseTx cancels them in the same transaction,
// and so on down the dependencies). A row whose newest version
// this transaction wrote (xmin) and that is finished now was finished by
// this transaction: no statement of this package writes an intent that is
// already terminal, but an operator's resend of a failed one, which leaves
// the terminal state (and the counts: uncountFinishedSQL) in a transaction
// that counts nothing. So a settlement whose guard failed adds nothing. It must run once per transaction for a
// given intent, after the statements that move it and release what comes
// after it.
//
// Finished is tested as a terminal state (finishedSQL), not as
// finished_at IS NOT NULL: that predicate matches the partial index on
// finished_at, and with statistics taken while few intents had finished
// (a new database, a burst) the planner walks that whole index for a
// handful of ids, milliseconds a settlement instead of microseconds.
var countFinishedSQL = addToCountsSQL(`RECURSIVE finished (id, kind, state) AS (
    SELECT i.id, i.kind, i.state FROM outbox_intents i
    WHERE i.id = ANY(@ids::bigint[]) AND i.state IN `+finishedSQL+` AND i.xmin = pg_current_xact_id()::xid
  UNION
    SELECT i.id, i.kind, i.state
    FROM finished f
    JOIN outbox_intent_dependencies d ON d.after_id = f.id
    JOIN outbox_intents i ON i.id = d.intent_id
    WHERE i.state IN `+finishedSQL+` AND i.xmin = pg_current_xact_id()::xid
)`, `SELECT kind, state, count(*) FROM finished GROUP BY kind, state`)

// uncountFinishedSQL takes intent @id out of the finished counts, before an
// operator's resend moves it from failed back to pending: the one way a
// terminal state is left.
var uncountFinishedSQL = addToCountsSQL("", `
    SELECT kind, state, -1 FROM outbox_intents
    WHERE id = @id AND state IN `+finishedSQL)

// countRecordedFinishedSQL adds to the finished counts the intents of
// @keys this transaction recorded already finished: cancelled at once
// because an intent they come after had failed or been cancelled
// (recordPlan).
var countRecordedFinishedSQL = addToCountsSQL("", `
    SELECT kind, state, count(*) FROM outbox_intents
    WHERE idempotency_key = ANY(@keys::text[]) AND state IN `+finishedSQL+` AND xmin = pg_current_xact_id()::xid
    GROUP BY kind, state`)

// addToCountsSQL adds the rows of counted, (kind, state, n) with one row a
// (kind, state), to this backend's slot of outbox_intent_counts; with
// holds CTEs counted reads, written after WITH (RECURSIVE included). An
// existing row is updated in place: a plain UPDATE writes one WAL record,
// where INSERT ... ON CONFLICT DO UPDATE first locks the row it conflicts
// with, a second record (Heap/LOCK, about 55 bytes a settlement, measured
// with pg_walinspect). Only a (kind, state) the slot has never counted is
// inserted, and the insert keeps ON CONFLICT for a concurrent transaction
// of the same slot that inserted it first, after this statement's
// snapshot. The UPDATE takes its rows in the order the join reaches them,
// not sorted: two transactions sharing a slot and adding to the same two
// rows in opposite orders could deadlock, which Postgres detects and the
// writers retry as transient (IsTransient); a settlement adds to one row
// unless its group finished several kinds or states.
func addToCountsSQL(with, counted string) string {
	if with != "" {
		with += ",\n"
	}
	return `
WITH ` + with + `counted (kind, state, n) AS (` + counted + `
),
added AS (
    UPDATE outbox_intent_counts c SET n = c.n + counted.n
    FROM counted
    WHERE c.kind = counted.kind AND c.state = counted.state AND c.slot = ` + countSlot + `
    RETURNING c.kind, c.state
)
INSERT INTO outbox_intent_counts AS c (kind, state, slot, n)
SELECT kind, state, ` + countSlot + `, n
FROM counted
WHERE (kind, state) NOT IN (SELECT kind, state FROM added)
ORDER BY kind, state
ON CONFLICT (kind, state, slot) DO UPDATE SET n = c.n + excluded.n`
}

// recountSQL rebuilds the finished counts from the intents themselves, and
// empties the activity roll-up; the caller holds a lock that keeps intents
// from finishing meanwhile.
var recountSQL = []string{
	`LOCK TABLE outbox_intents IN SHARE MODE`,
	`DELETE FROM outbox_intent_counts`,
	`INSERT INTO outbox_intent_counts (kind, state, slot, n)
SELECT kind, state, 0, count(*)
FROM outbox_intents
WHERE finished_at IS NOT NULL
GROUP BY kind, state`,
	// The activity roll-up starts afresh: the intents written another way
	// may have finished inside its range, and are read live from now on.
	`DELETE FROM outbox_activity_minutes`,
	`UPDATE outbox_activity_rollup SET rolled_from = now(), rolled_until = now()`,
}
