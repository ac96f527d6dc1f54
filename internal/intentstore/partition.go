package intentstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The history is partitioned by intent id (migration 017): outbox_intents
// by id, outbox_attempts and outbox_events by intent_id, over the same
// ranges, so that an intent's rows live in one range's three partitions.
// Ids grow with time, so a range is a span of recording time. Retention
// drops a range whose intents have all finished before the audit
// retention (DropRange), instead of deleting its rows one by one; a range
// that still holds an unfinished intent (in_doubt, waiting for an
// operator) is pruned row by row (PruneIntents), as is the default
// partition, which catches an id no range was made for in time. The
// dispatchers' leader makes ranges ahead of the sequence (MakeRanges),
// each about a day of recent recording.

// Range is one range of intent ids, [From, To), with its partitions.
type Range struct {
	// Suffix names its partitions: outbox_intents_<Suffix>,
	// outbox_attempts_<Suffix> and outbox_events_<Suffix>.
	Suffix string
	// From is the first id of the range (math.MinInt64 for the first
	// range, which begins at MINVALUE); To is the first id after it.
	From, To int64
}

func (r Range) partition(table string) string { return table + "_" + r.Suffix }

// partitionedTables are the tables partitioned by intent id, the intents'
// last: their partitions are detached and dropped in this order, after
// those that refer to them.
var partitionedTables = []string{"outbox_events", "outbox_attempts", "outbox_intents"}

// rangeBound reads pg_get_expr of a range partition's bound.
var rangeBound = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'?(-?\d+)'?)\) TO \('?(-?\d+)'?\)$`)

// listRangesSQL lists the partitions of outbox_intents in the current
// schema with their bounds; the default partition's bound is DEFAULT.
const listRangesSQL = `
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits h
JOIN pg_class c ON c.oid = h.inhrelid
WHERE h.inhparent = to_regclass(quote_ident(current_schema()) || '.outbox_intents')`

// Ranges returns the id ranges of the history, oldest first; the default
// partition is not one.
func (s *Store) Ranges(ctx context.Context) ([]Range, error) {
	rows, err := s.pool.Query(ctx, listRangesSQL)
	if err != nil {
		return nil, fmt.Errorf("intentstore: list the history's ranges: %w", err)
	}
	type part struct {
		Name  string
		Bound *string // NULL: being detached by another transaction
	}
	parts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[part])
	if err != nil {
		return nil, fmt.Errorf("intentstore: list the history's ranges: %w", err)
	}
	var out []Range
	for _, p := range parts {
		if p.Bound == nil || *p.Bound == "DEFAULT" {
			continue
		}
		m := rangeBound.FindStringSubmatch(*p.Bound)
		if m == nil || len(p.Name) <= len("outbox_intents_") {
			return nil, fmt.Errorf("intentstore: partition %s of outbox_intents has a bound this version does not know: %s", p.Name, *p.Bound)
		}
		r := Range{Suffix: p.Name[len("outbox_intents_"):], From: math.MinInt64}
		if m[1] != "MINVALUE" {
			r.From, _ = strconv.ParseInt(m[2], 10, 64)
		}
		r.To, _ = strconv.ParseInt(m[3], 10, 64)
		out = append(out, r)
	}
	sortRanges(out)
	return out, nil
}

func sortRanges(rs []Range) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].From < rs[j-1].From; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// RangeRules say how MakeRanges sizes the ranges it makes.
type RangeRules struct {
	// Span is how much recording time a range should hold: the next
	// range's size is the ids recorded over that long at the recent rate.
	Span time.Duration
	// MinIDs and MaxIDs bound a range's size, so that a quiet outbox does
	// not make a partition a day and a burst does not make one huge.
	MinIDs, MaxIDs int64
}

// DefaultRangeRules make ranges of about a day, of 10,000 to 50,000,000
// ids.
var DefaultRangeRules = RangeRules{Span: 24 * time.Hour, MinIDs: 10_000, MaxIDs: 50_000_000}

// rangeStateSQL reads what MakeRanges sizes ranges from: when the first
// intent at or after @from was recorded (NULL: none yet), and the
// default partition's last id (0: none).
const rangeStateSQL = `
SELECT (SELECT created_at FROM outbox_intents WHERE id >= @from ORDER BY id LIMIT 1),
    (SELECT coalesce(max(id), 0) FROM outbox_intents_default)`

// MakeRanges makes id ranges ahead of the sequence until they reach a
// whole range's size past the last id given out, and returns how many it
// made. The size is what the range being filled (the one the last id is
// in, or the newest before it) used since its first intent, scaled to
// rules.Span; before a minute of it, that range's own size. Each is made
// in a transaction of its own: three tables created bare and attached,
// which takes a SHARE UPDATE EXCLUSIVE lock of each partitioned table
// (recording and dispatching go on) and an ACCESS EXCLUSIVE one of its
// default partition, which the attach scans (empty, unless ids outran the
// ranges); lock_timeout keeps a blocked attach from holding up the hot
// path behind it. A range starts after any id already in the default
// partition.
func (s *Store) MakeRanges(ctx context.Context, rules RangeRules, now time.Time) (int, error) {
	ranges, last, err := s.rangesAndLastID(ctx)
	if err != nil || len(ranges) == 0 {
		return 0, err
	}
	cur := ranges[0]
	for _, r := range ranges {
		if r.From <= last {
			cur = r
		}
	}
	from := max(cur.From, 0)
	var (
		firstAt    *time.Time
		defaultMax int64
	)
	if err := s.pool.QueryRow(ctx, rangeStateSQL, pgx.NamedArgs{"from": from}).Scan(&firstAt, &defaultMax); err != nil {
		return 0, fmt.Errorf("intentstore: read the range being filled: %w", err)
	}
	size := rules.size(last-from+1, cur.To-from, firstAt, now)
	made := 0
	for next := max(ranges[len(ranges)-1].To, defaultMax+1); next-last <= size; next += size {
		if err := s.attachRange(ctx, Range{Suffix: "from_" + strconv.FormatInt(next, 10), From: next, To: next + size}); err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

// size is the size of the next range: the ids the range being filled used
// since its first intent, scaled to the span; before a minute of it (or
// any intent), that range's own size, which was sized so.
func (r RangeRules) size(used, own int64, firstAt *time.Time, now time.Time) int64 {
	n := own
	if firstAt != nil && used > 0 {
		if elapsed := now.Sub(*firstAt); elapsed >= time.Minute {
			n = int64(float64(used) * float64(r.Span) / float64(elapsed))
		}
	}
	return min(max(n, r.MinIDs), r.MaxIDs)
}

// lockTimeout bounds how long the statements that change the partitions
// wait for a lock: while one waits, the hot path's statements queue behind
// it.
const lockTimeout = "200ms"

func (s *Store) attachRange(ctx context.Context, r Range) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'"); err != nil {
			return err
		}
		for i := len(partitionedTables) - 1; i >= 0; i-- {
			t := partitionedTables[i]
			p := pgx.Identifier{r.partition(t)}.Sanitize()
			storage := ""
			if t == "outbox_intents" {
				storage = " WITH (fillfactor = 80)"
			}
			sql := fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)%s;
ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%d) TO (%d)`, p, t, storage, t, p, r.From, r.To)
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("intentstore: make the range [%d, %d) of %s: %w", r.From, r.To, t, err)
			}
		}
		return nil
	})
}

// Dropped is what DropRanges dropped.
type Dropped struct {
	// Ranges and Intents count the ranges dropped and the intents they
	// held.
	Ranges, Intents int64
}

// rangeDoneSQL says whether every intent of a range's partition has
// finished, the last before @horizon (the partition's own indexes answer:
// outbox_intents_held_idx and the unfinished one for the first,
// outbox_intents_finished_at_idx for the second).
const rangeDoneSQL = `
SELECT NOT EXISTS (SELECT 1 FROM %[1]s WHERE finished_at IS NULL)
   AND coalesce((SELECT max(finished_at) FROM %[1]s), '-infinity') < @horizon`

// rangeCountsSQL counts a range's intents by kind and state, for the
// finished counts to lose them with the range.
const rangeCountsSQL = `SELECT kind, state, count(*) FROM %s GROUP BY kind, state ORDER BY kind, state`

// uncountRangeSQL subtracts what rangeCountsSQL counted from the finished
// counts.
const uncountRangeSQL = `
INSERT INTO outbox_intent_counts AS c (kind, state, slot, n)
SELECT kind, state, ` + countSlot + `, -n
FROM unnest(@kinds::text[], @states::text[], @ns::bigint[]) AS t(kind, state, n)
ON CONFLICT (kind, state, slot) DO UPDATE SET n = c.n + excluded.n`

// dropRangeDependenciesSQL deletes the ordering dependencies of a range's
// intents, and on them: all settled, since every intent of it finished.
const dropRangeDependenciesSQL = `
DELETE FROM outbox_intent_dependencies
WHERE (intent_id >= @from AND intent_id < @to) OR (after_id >= @from AND after_id < @to)`

// pruneRangeKeysSQL deletes up to @limit keys of intents of [@from, @to),
// ids of no range, but those of intents in the default partition.
const pruneRangeKeysSQL = `
DELETE FROM outbox_intent_keys
WHERE ctid = ANY(ARRAY(
    SELECT k.ctid FROM outbox_intent_keys k
    WHERE k.intent_id >= @from AND k.intent_id < @to
      AND NOT EXISTS (SELECT 1 FROM outbox_intents_default d WHERE d.id = k.intent_id)
    LIMIT @limit))`

// DropRanges drops, oldest first, every full range (the sequence has
// given out its last id) whose intents have all finished before now -
// olderThan: its three partitions
// detached and dropped, its intents' keys and ordering dependencies
// deleted, the finished counts brought down by what it held. The drop
// takes an ACCESS EXCLUSIVE lock of the partitioned tables for a moment (a
// DETACH does, unless CONCURRENTLY, which a default partition rules out);
// a range whose lock is not had within lockTimeout is left for the next
// pass. The keys of dropped ranges' intents are deleted afterwards, in
// batches of keyBatch (pruneGapKeys); a pass cut short leaves them to the
// next.
func (s *Store) DropRanges(ctx context.Context, olderThan time.Duration, keyBatch int) (Dropped, error) {
	var out Dropped
	ranges, last, err := s.rangesAndLastID(ctx)
	if err != nil {
		return out, err
	}
	var horizon time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now() - @older_than_us::bigint * interval '1 microsecond'`,
		pgx.NamedArgs{"older_than_us": olderThan.Microseconds()}).Scan(&horizon); err != nil {
		return out, err
	}
	for _, r := range ranges {
		if r.To > last { // ids are still given out in it
			break
		}
		n, err := s.dropRange(ctx, r, horizon)
		if err != nil {
			return out, err
		}
		if n < 0 {
			continue
		}
		out.Ranges++
		out.Intents += n
	}
	if out.Ranges > 0 {
		ranges, err = s.Ranges(ctx)
		if err != nil {
			return out, err
		}
	}
	return out, s.pruneGapKeys(ctx, ranges, keyBatch)
}

// pruneGapKeys deletes the keys of intents whose range is gone: in the
// gaps between the ranges that are left, and before the first, the ids of
// no partition but the default, whose intents keep theirs. Never above the
// last range: a range made there meanwhile (MakeRanges) is not in ranges,
// and its intents' keys must stay. A pass cut short after a drop leaves a
// gap's keys to the next.
func (s *Store) pruneGapKeys(ctx context.Context, ranges []Range, batch int) error {
	from := int64(math.MinInt64)
	for _, r := range ranges {
		if r.From > from {
			if _, err := s.pruneGoneKeys(ctx, Range{From: from, To: r.From}, batch); err != nil {
				return err
			}
		}
		from = r.To
	}
	return nil
}

// dropRange drops r if its intents have all finished before horizon, and
// returns how many it held, or -1 when it did not drop it. The range is
// read and counted first without a lock; under the lock (every
// partitioned table's, so that nothing can resend one of its intents
// meanwhile) it is read again, and an intent that changed since (an
// operator resent a failed one) would have finished after horizon.
func (s *Store) dropRange(ctx context.Context, r Range, horizon time.Time) (int64, error) {
	intents := pgx.Identifier{r.partition("outbox_intents")}.Sanitize()
	done := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (bool, error) {
		var ok bool
		err := q.QueryRow(ctx, fmt.Sprintf(rangeDoneSQL, intents), pgx.NamedArgs{"horizon": horizon}).Scan(&ok)
		return ok, err
	}
	if ok, err := done(s.pool); err != nil || !ok {
		return -1, wrapRange(r, "read", goneIsNone(err))
	}
	counts, err := s.rangeCounts(ctx, intents)
	if err != nil {
		return -1, wrapRange(r, "count", goneIsNone(err))
	}
	dropped := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+lockTimeout+"'; LOCK TABLE outbox_intents, outbox_attempts, outbox_events IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		if ok, err := done(tx); err != nil || !ok {
			return err
		}
		if _, err := tx.Exec(ctx, uncountRangeSQL, counts.args()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, dropRangeDependenciesSQL, pgx.NamedArgs{"from": r.From, "to": r.To}); err != nil {
			return err
		}
		for _, t := range partitionedTables {
			p := pgx.Identifier{r.partition(t)}.Sanitize()
			if _, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s; DROP TABLE %s", t, p, p)); err != nil {
				return err
			}
		}
		dropped = true
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: the next pass
		return -1, nil
	}
	if err != nil || !dropped {
		return -1, wrapRange(r, "drop", goneIsNone(err))
	}
	return counts.total(), nil
}

// goneIsNone is nil for an error saying that a partition does not exist:
// another retention pass (PruneOnce called beside the leader's) dropped
// the range first.
func goneIsNone(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return nil
	}
	return err
}

func wrapRange(r Range, what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("intentstore: %s the range [%d, %d): %w", what, r.From, r.To, err)
}

// kindStateCounts are intents counted by kind and state.
type kindStateCounts struct {
	kinds, states []string
	ns            []int64
}

func (c kindStateCounts) args() pgx.NamedArgs {
	return pgx.NamedArgs{"kinds": c.kinds, "states": c.states, "ns": c.ns}
}

func (c kindStateCounts) total() int64 {
	var t int64
	for _, n := range c.ns {
		t += n
	}
	return t
}

func (s *Store) rangeCounts(ctx context.Context, partition string) (kindStateCounts, error) {
	var c kindStateCounts
	rows, err := s.pool.Query(ctx, fmt.Sprintf(rangeCountsSQL, partition))
	if err != nil {
		return c, err
	}
	var kind, state string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&kind, &state, &n}, func() error {
		c.kinds, c.states, c.ns = append(c.kinds, kind), append(c.states, state), append(c.ns, n)
		return nil
	})
	return c, err
}

// pruneGoneKeys deletes the keys of intents of r that are gone, batch
// rows at a time, and returns how many.
func (s *Store) pruneGoneKeys(ctx context.Context, r Range, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, pruneRangeKeysSQL, pgx.NamedArgs{"from": r.From, "to": r.To, "limit": batch})
		if err != nil {
			return total, fmt.Errorf("intentstore: delete the keys of the range [%d, %d): %w", r.From, r.To, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// lastIDSQL is the last intent id the sequence gave out: 0 before the
// first, or to a role that may not read the sequence (every range then
// counts as still being filled, and is pruned row by row).
const lastIDSQL = `SELECT coalesce(last_value, 0) FROM pg_sequences
WHERE schemaname = current_schema()
  AND sequencename = (parse_ident(pg_get_serial_sequence('outbox_intents', 'id')))[2]`

// rangesAndLastID returns Ranges and the last id given out.
func (s *Store) rangesAndLastID(ctx context.Context) ([]Range, int64, error) {
	ranges, err := s.Ranges(ctx)
	if err != nil {
		return nil, 0, err
	}
	var last int64
	if err := s.pool.QueryRow(ctx, lastIDSQL).Scan(&last); err != nil {
		return nil, 0, fmt.Errorf("intentstore: read the intents' sequence: %w", err)
	}
	return ranges, last, nil
}
