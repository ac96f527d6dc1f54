package intentstore

import (
	"context"
	"fmt"
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
// than olderThan ago, with their attempts and events, and returns how many.
// The finished counts lose what it deletes in the same statement.
func (s *Store) PruneIntents(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, pruneIntentsSQL, pgx.NamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit}).Scan(&n)
	return n, err
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

// pruneIntentsSQL deletes up to @limit terminal intents that finished before
// the audit retention, oldest first; their attempts and events go with them
// (ON DELETE CASCADE). in_doubt and unfinished intents have no finished_at
// and are never touched. The finished counts lose what it deletes, in the
// same statement. It returns how many it deleted.
const pruneIntentsSQL = `
WITH doomed AS (
    SELECT id FROM outbox_intents
    WHERE finished_at < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY finished_at
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM outbox_intents i
    USING doomed d
    WHERE i.id = d.id
    RETURNING i.kind, i.state
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
