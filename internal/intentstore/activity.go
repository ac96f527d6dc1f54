package intentstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// How the activity chart is counted (migration 009): the intents finished
// in a range of finished_at, [rolled_from, rolled_until), are rolled up
// into one row a minute of outbox_activity_minutes; the chart reads those
// rows and, live, the intents finished outside the range and the
// unfinished ones. Nothing on the hot path writes the roll-up: RollUpActivity
// moves the range's end forward afterwards, up to a horizon before which
// every finishing transaction has ended, so an intent is rolled up once,
// after it finished for good, and never missed.

// DefaultActivityRollUpLimit is the most intents one RollUpActivity step
// reads when its caller passes no limit.
const DefaultActivityRollUpLimit = 50_000

// RolledUp is what one RollUpActivity did.
type RolledUp struct {
	// Intents is how many finished intents it added to the roll-up.
	Intents int64
	// Until is the end of the rolled-up range after it: every intent
	// finished before it is counted in outbox_activity_minutes or before
	// the range's start.
	Until time.Time
	// Behind reports that it stopped at its limit with more finished
	// intents before the horizon: call it again.
	Behind bool
	// Skipped reports that another roll-up held the range: it did nothing.
	Skipped bool
}

// RollUpActivity adds to the activity roll-up the intents finished since
// its range's end, in order of finished_at, at most about limit of them
// (DefaultActivityRollUpLimit when limit ≤ 0; an intent is never split
// from others finished at the same instant), up to the horizon: the start
// of the oldest transaction still running in the database, so that no
// intent finished before the new end can commit after it. It returns at
// once, Skipped, when another roll-up is running. The dispatcher's leader
// calls it every minute, and audit's Activity before each read, so a read
// counts live only what finished since.
func (s *Store) RollUpActivity(ctx context.Context, limit int) (RolledUp, error) {
	if limit <= 0 {
		limit = DefaultActivityRollUpLimit
	}
	var out RolledUp
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var from, horizon time.Time
		err := tx.QueryRow(ctx, activityHorizonSQL).Scan(&from, &horizon)
		if errors.Is(err, pgx.ErrNoRows) {
			out.Skipped = true
			return nil
		}
		if err != nil {
			return err
		}
		out.Until = from
		if !horizon.After(from) {
			return nil
		}
		// A statement after the horizon's: its snapshot sees every
		// transaction the horizon's statement found ended.
		var step *time.Time
		if err := tx.QueryRow(ctx, activityStepSQL, pgx.NamedArgs{"from": from, "limit": limit}).Scan(&step); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		until := horizon
		if step != nil && step.Before(horizon) {
			until, out.Behind = *step, true
		}
		if err := tx.QueryRow(ctx, rollUpActivitySQL, pgx.NamedArgs{"from": from, "until": until}).Scan(&out.Intents); err != nil {
			return err
		}
		out.Until = until
		return nil
	})
	if err != nil {
		return RolledUp{}, fmt.Errorf("intentstore: roll up activity: %w", err)
	}
	return out, nil
}

// PruneActivity deletes up to limit minutes of the activity roll-up older
// than olderThan and returns how many. A chart reaching back past the
// audit retention counts only part of that time, as the intents it
// counted are gone too.
func (s *Store) PruneActivity(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, pruneActivitySQL, pgx.NamedArgs{"older_than_us": olderThan.Microseconds(), "limit": limit})
	return tag.RowsAffected(), err
}

// activityHorizonSQL reads where the activity roll-up may go on from and
// up to, and locks the roll-up's row (another roll-up running: no row).
// The horizon is a time before which no transaction still running can
// commit a finished intent: finished_at is its transaction's now(), so the
// oldest transaction running in this database bounds it. A session of
// another role whose start this one may not see (pg_stat_activity shows
// it without a start unless this role has pg_read_all_stats) is assumed to
// have started no more than a minute ago, and a prepared transaction a
// minute before it was prepared. The rows finished before the horizon must
// then be read by a later statement, whose snapshot is taken after this one
// saw those transactions gone.
const activityHorizonSQL = `
SELECT r.rolled_until, least(
    now(),
    (SELECT min(a.xact_start) FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'),
    (SELECT now() - interval '1 minute' FROM pg_stat_activity a
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type IS NULL
     LIMIT 1),
    (SELECT min(p.prepared) - interval '1 minute' FROM pg_prepared_xacts p
     WHERE p.database = current_database()))
FROM outbox_activity_rollup r
FOR UPDATE OF r SKIP LOCKED`

// activityStepSQL returns where a roll-up of at most @limit intents from
// @from may stop: the finished_at of the intent @limit places on, or,
// when every one of those shares @from, the next finished_at after it (the
// intents one transaction finished share its now(), and a range must end
// between two times). NULL when fewer than @limit intents remain.
const activityStepSQL = `
WITH nth AS (
    SELECT finished_at FROM outbox_intents
    WHERE finished_at >= @from
    ORDER BY finished_at
    OFFSET @limit LIMIT 1
)
SELECT CASE WHEN n.finished_at > @from THEN n.finished_at
    ELSE (SELECT min(finished_at) FROM outbox_intents WHERE finished_at > @from) END
FROM nth n`

// rollUpActivitySQL adds the intents finished in [@from, @until) to the
// minutes of their creation (recorded) and of their end (succeeded,
// finished), moves the rolled-up range's end to @until, and returns how
// many intents it added. The caller holds the roll-up's row lock, and
// @from is its rolled_until.
var rollUpActivitySQL = `
WITH finished AS (
    SELECT created_at, finished_at, state FROM outbox_intents
    WHERE finished_at >= @from AND finished_at < @until
),
counts (minute, recorded, succeeded, finished) AS (
    SELECT ` + activityMinute("finished_at") + `, 0, count(*) FILTER (WHERE state = 'succeeded'), count(*)
    FROM finished GROUP BY 1
  UNION ALL
    SELECT ` + activityMinute("created_at") + `, count(*), 0, 0
    FROM finished GROUP BY 1
),
added AS (
    INSERT INTO outbox_activity_minutes AS m (minute, recorded, succeeded, finished)
    SELECT minute, sum(recorded), sum(succeeded), sum(finished)
    FROM counts
    GROUP BY minute
    ORDER BY minute
    ON CONFLICT (minute) DO UPDATE
    SET recorded = m.recorded + excluded.recorded,
        succeeded = m.succeeded + excluded.succeeded,
        finished = m.finished + excluded.finished
)
UPDATE outbox_activity_rollup SET rolled_until = @until
RETURNING (SELECT count(*) FROM finished)`

// pruneActivitySQL deletes up to @limit minutes of the activity roll-up
// older than the audit retention, oldest first.
const pruneActivitySQL = `
DELETE FROM outbox_activity_minutes
WHERE minute IN (
    SELECT minute FROM outbox_activity_minutes
    WHERE minute < now() - (@older_than_us::bigint * interval '1 microsecond')
    ORDER BY minute
    LIMIT @limit
    FOR UPDATE SKIP LOCKED)`

// activityMinute is the minute the time column falls in, the same in every
// session's time zone.
func activityMinute(column string) string {
	return `date_bin('1 minute', ` + column + `, timestamptz '2000-01-01 00:00:00+00')`
}
