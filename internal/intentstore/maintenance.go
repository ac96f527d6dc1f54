package intentstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnqueueTx inserts dispatch jobs for existing intents in tx, as River's
// InsertManyTx would (the same rows, see TestDispatchJobsMatchRiver),
// skipping any intent that has a live job, and wakes the dispatchers when
// tx commits.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, ids []int64) error {
	b := &pgx.Batch{}
	enqueueQ.queue(b, s.jobArgs(pgx.NamedArgs{"ids": ids}))
	notifyQ.queue(b, pgx.NamedArgs{"notice": s.job.notice})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("intentstore: enqueue dispatch jobs: %w", err)
	}
	return nil
}

// Stranded returns up to limit unfinished intents (pending or dispatching)
// that are not queued, untouched for longer than grace, and have no live
// dispatch job: River holds them, and they lost their job.
func (s *Store) Stranded(ctx context.Context, grace time.Duration, limit int) ([]int64, error) {
	rows, err := s.pool.Query(ctx, strandedSQL, pgx.NamedArgs{"grace_us": grace.Microseconds(), "job_kind": s.job.kind, "limit": limit})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// Enqueue is EnqueueTx in a transaction of its own.
func (s *Store) Enqueue(ctx context.Context, ids []int64) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.EnqueueTx(ctx, tx, ids) })
}

// DueRechecks returns up to limit in_doubt intents of the named providers
// whose next look-up at the provider is due at now.
func (s *Store) DueRechecks(ctx context.Context, now time.Time, providers []string, limit int) ([]Row, error) {
	rows, err := s.pool.Query(ctx, dueRechecksSQL, pgx.NamedArgs{"now": now, "providers": providers, "limit": limit})
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanRow)
}

// PruneMarkers deletes up to limit processed markers older than olderThan
// and returns how many it deleted.
func (s *Store) PruneMarkers(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, pruneMarkersSQL, pgx.NamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit})
	return tag.RowsAffected(), err
}

// PruneIntents deletes up to limit terminal intents that finished longer
// than olderThan ago, with their attempts, events and keys, and returns
// how many. The finished counts lose what it deletes in the same
// statement. It deletes row by row only where a range cannot be dropped
// whole (DropRanges): in the default partition, and in a range that still
// holds an unfinished intent. A range whose intents have all finished
// keeps them until the last of them is older than olderThan, and is then
// dropped.
func (s *Store) PruneIntents(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	partitions, err := s.rowPruned(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, p := range partitions {
		var n int64
		err := s.pool.QueryRow(ctx, strings.Replace(pruneIntentsSQL, "{partition}", pgx.Identifier{p}.Sanitize(), 1),
			pgx.NamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit - int(total)}).Scan(&n)
		if err = goneIsNone(err); err != nil { // a range dropped meanwhile has nothing left
			return total, err
		}
		if total += n; total >= int64(limit) {
			break
		}
	}
	return total, nil
}

// rowPrunedSQL says, of a range's partition, whether it holds an
// unfinished intent (outbox_intents_held_idx and the unfinished index).
const rowPrunedSQL = `SELECT EXISTS (SELECT 1 FROM %s WHERE finished_at IS NULL)`

// rowPruned names the partitions of outbox_intents that retention prunes
// row by row: the default partition, the ranges ids are still given out
// in (or will be: a quiet outbox may take longer than the retention to
// fill one), and the full ranges that hold an unfinished intent. A full
// range whose intents have all finished waits to be dropped whole.
func (s *Store) rowPruned(ctx context.Context) ([]string, error) {
	ranges, last, err := s.rangesAndLastID(ctx)
	if err != nil {
		return nil, err
	}
	out := []string{"outbox_intents_default"}
	for _, r := range ranges {
		open := r.To > last
		if !open {
			err := s.pool.QueryRow(ctx, fmt.Sprintf(rowPrunedSQL, pgx.Identifier{r.partition("outbox_intents")}.Sanitize())).Scan(&open)
			if err = goneIsNone(err); err != nil {
				return nil, fmt.Errorf("intentstore: read the range [%d, %d): %w", r.From, r.To, err)
			}
		}
		if open {
			out = append(out, r.partition("outbox_intents"))
		}
	}
	return out, nil
}

// PruneOrderingKeys deletes up to limit ordering keys that no unfinished
// intent holds (their row in outbox_ordering_keys numbers the key's
// intents) and returns how many. A key used again later starts afresh. It
// skips keys that are being recorded or released right now.
func (s *Store) PruneOrderingKeys(ctx context.Context, limit int) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lockIdleOrderingKeysSQL, pgx.NamedArgs{"limit": limit})
		if err != nil {
			return err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(keys) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, deleteIdleOrderingKeysSQL, pgx.NamedArgs{"keys": keys})
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// jobArgs adds the dispatch job's constants to args.
func (s *Store) jobArgs(args pgx.NamedArgs) pgx.NamedArgs {
	args["job_kind"] = s.job.kind
	args["job_queue"] = s.job.queue
	args["job_priority"] = s.job.priority
	args["job_max_attempts"] = s.job.maxAttempts
	args["job_unique_states"] = s.job.uniqueStates
	return args
}

// strandedSQL finds unfinished intents River holds (not queued) with no
// live dispatch job, in the back of the unfinished index. River's GIN
// index on river_job.args serves the containment test.
const strandedSQL = `
SELECT i.id
FROM outbox_intents i
WHERE i.finished_at IS NULL AND NOT i.queued AND i.state IN ('pending', 'dispatching')
  AND i.updated_at < now() - (@grace_us::bigint * interval '1 microsecond')
  AND NOT EXISTS (
      SELECT 1 FROM river_job j
      WHERE j.kind = @job_kind
        AND j.args @> jsonb_build_object('intent_id', i.id)
        AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
  )
ORDER BY i.id
LIMIT @limit`

// dueRechecksSQL finds in_doubt intents of the given providers whose next
// look-up at the provider is due, among the unfinished ones
// (outbox_intents_unfinished_idx). Only the providers the caller serves:
// the due look-ups of another's would fill every batch and starve the rest.
const dueRechecksSQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE finished_at IS NULL AND recheck_at <= @now AND state = 'in_doubt'
  AND provider = ANY(@providers::text[])
ORDER BY recheck_at
LIMIT @limit`

// pruneMarkersSQL deletes up to @limit processed markers older than the
// dedup window, oldest first, skipping rows another transaction holds.
const pruneMarkersSQL = `
WITH doomed AS (
    SELECT consumer, message_id FROM outbox_processed_messages
    WHERE processed_at < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY processed_at
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM outbox_processed_messages p
USING doomed d
WHERE p.consumer = d.consumer AND p.message_id = d.message_id`

// pruneIntentsSQL deletes up to @limit terminal intents of one partition
// ({partition}) that finished before the audit retention, oldest first; their
// attempts and events go with them (ON DELETE CASCADE), their keys in the
// statement. in_doubt and unfinished intents have no finished_at
// and are never touched. The finished counts lose what it deletes, in the
// same statement. It returns how many it deleted.
const pruneIntentsSQL = `
WITH doomed AS (
    SELECT id FROM {partition}
    WHERE finished_at < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY finished_at
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM outbox_intents i
    WHERE i.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING i.kind, i.state, i.idempotency_key
),
keys AS (
    DELETE FROM outbox_intent_keys k
    WHERE k.idempotency_key = ANY(ARRAY(SELECT idempotency_key FROM deleted))
),
counted AS (
    INSERT INTO outbox_intent_counts AS c (kind, state, slot, n)
    SELECT kind, state, ` + countSlot + `, -count(*)
    FROM deleted
    GROUP BY kind, state
    ORDER BY kind, state
    ON CONFLICT (kind, state, slot) DO UPDATE SET n = c.n + excluded.n
)
SELECT count(*) FROM deleted`

// lockIdleOrderingKeysSQL locks up to @limit ordering keys that no
// unfinished intent holds, skipping keys a recorder or a release holds
// now. deleteIdleOrderingKeysSQL then deletes those still idle, in the
// same transaction but under a new snapshot: a recorder that took a key
// after this statement's snapshot and committed before its lock is seen
// there, and one that comes after the lock waits for the delete and
// starts the key afresh. Numbering a key afresh is safe: key_seq is only
// ever compared between unfinished intents of a key, and an idle key has
// none.
const lockIdleOrderingKeysSQL = `
SELECT o.ordering_key
FROM outbox_ordering_keys o
WHERE NOT EXISTS (
    SELECT 1 FROM outbox_intents i
    WHERE i.ordering_key = o.ordering_key AND i.finished_at IS NULL)
ORDER BY o.ordering_key
LIMIT @limit
FOR UPDATE SKIP LOCKED`

// deleteIdleOrderingKeysSQL: see lockIdleOrderingKeysSQL.
const deleteIdleOrderingKeysSQL = `
DELETE FROM outbox_ordering_keys o
WHERE o.ordering_key = ANY(@keys::text[])
  AND NOT EXISTS (
    SELECT 1 FROM outbox_intents i
    WHERE i.ordering_key = o.ordering_key AND i.finished_at IS NULL)`
