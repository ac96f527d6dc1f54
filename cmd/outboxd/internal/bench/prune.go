package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
)

// The prune scenario (issue 21): what retention of a day of history costs
// as this module does it today, against what a history partitioned by time
// would cost, each beside the same hot path, in the same run.
//
// DELETE, the module as it is: a fresh database holds Sizes.PruneIntents
// intents of one day (fillPruneSQL), their attempts, events and processed
// markers, all older than the audit retention and the dedup window;
// dispatcher.PruneOnce, with the defaults users get, deletes them in
// batches of 1000 and is called again until a pass deletes nothing.
//
// DROP, a hand-written copy of the tables (not the module's schema):
// another fresh database holds the same rows in partitioned copies of the
// four history tables (partitionedTablesSQL, partitionedIndexesSQL), each
// with a partition of exactly that day; retention is DETACH PARTITION of
// the four (one transaction: CONCURRENTLY cannot run in one) and DROP
// TABLE of them (another).
//
// Beside each, the hot path runs on the module's own tables (hotPath):
// its end-to-end rate and commit → call p99 while retention runs are
// compared with the same hot path's just before, in the same database.
// Each side's WAL is the server's (pg_current_wal_lsn, as the work
// scenario reads it) less what is not the retention's: the DELETE's less
// the hot path's own WAL at its rate just before, for as long as the
// DELETE took; the DROP's is counted exactly instead, as the records of
// its two transactions (pg_walinspect), since in those milliseconds the
// hot path writes more than the DROP.

// pruneRate is the hot path's offered rate, well below the sustainable
// rate: what it loses is what retention takes from it, not a queue's.
const pruneRate = 200

// pruneCostTarget is the bound on the DROP's time and WAL, as a
// share of the DELETE's.
const pruneCostTarget = 0.01

// pruneHotTarget is the share of its baseline rate the hot path keeps
// while retention runs.
const pruneHotTarget = 0.90

// pruneHorizon is the retention of the hot path's own dispatcher, longer
// than any row is old: the pass its leader runs when elected deletes
// nothing, and the measured pass is the only one.
const pruneHorizon = 100 * 365 * 24 * time.Hour

// pruneTables are the history tables retention empties, each with the
// time the partitioned copy is partitioned by.
var pruneTables = []struct{ name, by string }{
	{"outbox_intents", "created_at"}, {"outbox_attempts", "started_at"},
	{"outbox_events", "at"}, {"outbox_processed_messages", "processed_at"},
}

// pruneTableNames names the history tables, or their partitions, with
// prefix and suffix around each.
func pruneTableNames(prefix, suffix string) []string {
	var names []string
	for _, t := range pruneTables {
		names = append(names, prefix+t.name+suffix)
	}
	return names
}

// fillPruneSQL writes $1 intents created over the day from $2
// (fillHistorySQL) as the dispatcher settles them today (migration 014):
// each intent's latest attempt in its own row.
var fillPruneSQL = fillHistorySQL(`
    SELECT $1::bigint AS n, $2::timestamptz AS t0, interval '1 day' - interval '10 seconds' AS span, 'prune' AS consumer`,
	`, attempt_started_at, attempt_finished_at, attempt_outcome, attempt_http_status, attempt_provider_ref, attempt_error`, `,
    CASE WHEN state <> 'cancelled' THEN finished - interval '50 milliseconds' END,
    CASE WHEN state <> 'cancelled' THEN finished END,
    CASE state WHEN 'succeeded' THEN 'succeeded' WHEN 'failed' THEN 'failed' END,
    CASE state WHEN 'succeeded' THEN 200 WHEN 'failed' THEN 402 END,
    CASE WHEN state = 'succeeded' THEN 'ref_' || md5(g::text) END,
    CASE WHEN state = 'failed' THEN 'provider refused: card_declined' END`)

// fillPruneHistorySQL writes the rest of the day as the dispatcher and an
// operator leave it: the attempts before each intent's latest (a retry
// each), an event for each failure and each cancel (the transitions the
// intent's row does not say), and every message's processed marker.
var fillPruneHistorySQL = []string{`
INSERT INTO outbox_attempts (intent_id, attempt, started_at, finished_at, outcome, http_status, error)
SELECT i.id, a, i.created_at, i.created_at + interval '20 milliseconds', 'retry', 503, 'HTTP 503'
FROM outbox_intents i, generate_series(1, i.attempt_count - 1) AS a
ORDER BY i.id, a`, `
INSERT INTO outbox_events (intent_id, at, actor, from_state, to_state, reason)
SELECT id, finished_at, CASE state WHEN 'cancelled' THEN 'operator:ann' ELSE 'dispatcher' END,
    CASE state WHEN 'cancelled' THEN 'pending' ELSE 'dispatching' END, state,
    CASE state WHEN 'cancelled' THEN 'customer changed their mind' ELSE 'refused for good' END
FROM outbox_intents
WHERE state IN ('failed', 'cancelled')
ORDER BY id`, fillMarkersSQL}

// partitionedIndexesSQL creates the indexes of the partitioned copies
// (schema history) of the four history tables: the module's own (see
// migrations/), each unique one with the partition key added, since a
// partitioned table enforces uniqueness only within a partition
// (docs/scaling.md, "Partitioning the outbox tables by time"). No foreign
// keys: a partition another table's rows refer to cannot be dropped alone.
const partitionedIndexesSQL = `
ALTER TABLE history.outbox_intents ADD PRIMARY KEY (id, created_at), ADD UNIQUE (idempotency_key, created_at);
CREATE INDEX ON history.outbox_intents (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX ON history.outbox_intents (id) WHERE finished_at IS NULL AND NOT queued;
CREATE INDEX ON history.outbox_intents (consumer, message_id);
CREATE INDEX ON history.outbox_intents (ordering_key, key_seq) WHERE ordering_key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX ON history.outbox_intents (reference) WHERE reference IS NOT NULL;
CREATE INDEX ON history.outbox_intents (queued, provider, id) WHERE finished_at IS NULL;
ALTER TABLE history.outbox_attempts ADD PRIMARY KEY (id, started_at), ADD UNIQUE (intent_id, attempt, started_at);
ALTER TABLE history.outbox_events ADD PRIMARY KEY (id, at);
CREATE UNIQUE INDEX ON history.outbox_events (intent_id, action_id, at) WHERE action_id IS NOT NULL;
CREATE INDEX ON history.outbox_events (intent_id, id);
ALTER TABLE history.outbox_processed_messages ADD PRIMARY KEY (consumer, message_id, processed_at);
CREATE INDEX ON history.outbox_processed_messages (processed_at)`

// partitionedTablesSQL creates the partitioned copies themselves: the
// columns, defaults, checks and identity of the module's tables, each
// partitioned by its time, with a partition of exactly the day and a
// default one for the rest; the intents' with the fill factor of theirs.
func partitionedTablesSQL(day time.Time) string {
	var b strings.Builder
	b.WriteString("CREATE SCHEMA history;\n")
	for _, t := range pruneTables {
		storage := ""
		if t.name == "outbox_intents" {
			storage = " WITH (fillfactor = 80)"
		}
		fmt.Fprintf(&b, `CREATE TABLE history.%[1]s (LIKE public.%[1]s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
    PARTITION BY RANGE (%[2]s);
CREATE TABLE history.%[1]s_day PARTITION OF history.%[1]s FOR VALUES FROM ('%[3]s') TO ('%[4]s')%[5]s;
CREATE TABLE history.%[1]s_rest PARTITION OF history.%[1]s DEFAULT%[5]s;
`, t.name, t.by, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339), storage)
	}
	return b.String()
}

// execer runs a statement: a pool, or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// fillPrune writes n intents of the day and their history into the tables
// q's search path finds.
func fillPrune(ctx context.Context, q execer, n int, day time.Time) error {
	if _, err := q.Exec(ctx, fillPruneSQL, n, day); err != nil {
		return err
	}
	for _, s := range fillPruneHistorySQL {
		if _, err := q.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// pruneCost is what one retention of the day cost.
type pruneCost struct {
	took time.Duration
	wal  int64 // bytes, the retention's own
	// how and walHow say, for the notes, what was done and how the WAL
	// was counted.
	how, walHow string
}

// pruneSide is one way of retention, measured in a database of its own.
type pruneSide struct {
	name string // DELETE or DROP
	// fill writes the day into db.
	fill func(ctx context.Context, db *database, n int, day time.Time) error
	// retain deletes the day, beside the hot path h.
	retain func(ctx context.Context, db *database, h *hotPath) (pruneCost, error)
	// after, when not nil, runs once the hot path stopped, and says what
	// it found for the notes.
	after func(ctx context.Context, db *database) (string, error)
}

// pruneResult is what one side measured.
type pruneResult struct {
	cost             pruneCost
	baseline, during hotWindow
	after            string
}

func (r *runner) pruneRows(ctx context.Context) ([]Row, error) {
	n := r.sizes.PruneIntents
	// A whole day (UTC) that ended more than the audit retention ago.
	day := time.Now().UTC().Add(-dispatcher.DefaultAuditRetention).AddDate(0, 0, -1).Truncate(24 * time.Hour)
	del, err := r.measurePrune(ctx, n, day, pruneSide{name: "DELETE", fill: fillForDelete, retain: r.pruneByDelete, after: vacuumAfterDelete})
	if err != nil {
		return nil, err
	}
	drop, err := r.measurePrune(ctx, n, day, pruneSide{name: "DROP", fill: fillPartitioned, retain: pruneByDrop})
	if err != nil {
		return nil, err
	}
	return pruneReport(n, del, drop), nil
}

// fillForDelete fills the module's own tables.
func fillForDelete(ctx context.Context, db *database, n int, day time.Time) error {
	if err := fillPrune(ctx, db.pool, n, day); err != nil {
		return err
	}
	return recount(ctx, db.pool)
}

// fillPartitioned creates the partitioned copies and fills them, through
// a search path that finds them before the module's tables.
func fillPartitioned(ctx context.Context, db *database, n int, day time.Time) error {
	// pg_walinspect, which counts the DROP's WAL, is created now, not
	// beside the hot path; its absence is said in the WAL row's note.
	_, _ = db.pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	if _, err := db.pool.Exec(ctx, partitionedTablesSQL(day)+partitionedIndexesSQL); err != nil {
		return fmt.Errorf("create the partitioned copies: %w", err)
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL search_path = history`); err != nil {
			return err
		}
		return fillPrune(ctx, tx, n, day)
	})
	if err != nil {
		return err
	}
	// A row routed to the default partition would make the DROP cheaper
	// than it is.
	var intents, markers int
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM history.outbox_intents_day),
		(SELECT count(*) FROM history.outbox_processed_messages_day)`).Scan(&intents, &markers); err != nil {
		return err
	}
	if intents != n || markers != n {
		return fmt.Errorf("the day's partitions hold %d intents and %d markers, want %d of each", intents, markers, n)
	}
	return nil
}

// measurePrune fills a fresh database with the day, starts the hot path,
// and measures it without retention, then during it.
func (r *runner) measurePrune(ctx context.Context, n int, day time.Time, side pruneSide) (pruneResult, error) {
	var res pruneResult
	db, err := r.newDatabase(ctx, "prune_"+strings.ToLower(side.name), r.sizes.Workers+10)
	if err != nil {
		return res, err
	}
	defer r.closeDatabase(ctx, db)
	r.progress("prune, %s: filling a day (%s) of %d finished intents, their attempts, events and markers", side.name, day.Format(time.DateOnly), n)
	started := time.Now()
	if err := side.fill(ctx, db, n, day); err != nil {
		return res, fmt.Errorf("%s: fill: %w", side.name, err)
	}
	// Month-old rows are vacuumed, and untouched since the last
	// checkpoint: the retention's first change to each page writes it
	// whole into the WAL, as it would in a deployment.
	for _, q := range []string{`VACUUM ANALYZE`, `CHECKPOINT`} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			return res, fmt.Errorf("%s: %s: %w", side.name, q, err)
		}
	}
	r.progress("  filled in %s", time.Since(started).Round(time.Second))
	h, err := r.startHotPath(ctx, db)
	if err != nil {
		return res, err
	}
	defer h.close(ctx)
	if res, err = r.pruneWindows(ctx, side, db, h); err != nil {
		return res, fmt.Errorf("%s: %w", side.name, err)
	}
	if err := h.close(ctx); err != nil {
		return res, fmt.Errorf("%s: the hot path: %w", side.name, err)
	}
	if side.after != nil {
		if res.after, err = side.after(ctx, db); err != nil {
			return res, fmt.Errorf("%s: %w", side.name, err)
		}
	}
	return res, nil
}

// pruneWindows measures the hot path over a window without retention, then
// runs the retention and measures the hot path from its start for as long
// as it ran, or as long as the first window if that is longer.
func (r *runner) pruneWindows(ctx context.Context, side pruneSide, db *database, h *hotPath) (pruneResult, error) {
	var res pruneResult
	window := 2 * r.sizes.LatencyDuration
	// The consumers' connections, prepared statements and the workers'
	// first fetches are not the baseline's.
	if err := sleepCtx(ctx, r.sizes.LatencyDuration/2); err != nil {
		return res, err
	}
	r.progress("  the hot path, %d msg/s, for %s without retention", pruneRate, window)
	from := time.Now()
	walFrom, err := readWALPos(ctx, db.pool)
	if err != nil {
		return res, err
	}
	if err := sleepCtx(ctx, window); err != nil {
		return res, err
	}
	to := time.Now()
	walTo, err := readWALPos(ctx, db.pool)
	if err != nil {
		return res, err
	}
	h.walRate = float64(walTo.bytes-walFrom.bytes) / to.Sub(from).Seconds()
	r.progress("  %s of the day beside it", side.name)
	start := time.Now()
	if res.cost, err = side.retain(ctx, db, h); err != nil {
		return res, err
	}
	end := start.Add(max(time.Since(start), window))
	if err := sleepCtx(ctx, time.Until(end)); err != nil {
		return res, err
	}
	if res.baseline, err = h.measure(ctx, from, to); err != nil {
		return res, err
	}
	if res.during, err = h.measure(ctx, start, end); err != nil {
		return res, err
	}
	r.progress("  %s took %s and wrote %s of WAL; the hot path: %s without, %s during", side.name,
		res.cost.took.Round(time.Millisecond), bytesText(res.cost.wal), res.baseline, res.during)
	return res, nil
}

// walPos is a position in the WAL.
type walPos struct {
	lsn   string
	bytes int64 // from the WAL's start
}

// readWALPos reads the server's WAL position.
func readWALPos(ctx context.Context, pool *pgxpool.Pool) (walPos, error) {
	var p walPos
	err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&p.lsn, &p.bytes)
	return p, err
}

// sleepCtx sleeps for d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bytesText writes a size in KiB or MiB.
func bytesText(b int64) string {
	if b >= 10<<20 {
		return fmt.Sprintf("%.0f MiB", mib(b))
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/1024)
}

// pruneByDelete runs the module's retention as its leader runs it, with
// the defaults users get, until a pass deletes nothing (a pass ends at a
// short batch, and a row another transaction held is skipped).
func (r *runner) pruneByDelete(ctx context.Context, db *database, h *hotPath) (pruneCost, error) {
	var attempts, events int64
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_attempts), (SELECT count(*) FROM outbox_events)`).Scan(&attempts, &events); err != nil {
		return pruneCost{}, err
	}
	size, err := filesSize(ctx, db.pool, pruneTableNames("", ""))
	if err != nil {
		return pruneCost{}, err
	}
	cfg := r.dispatcherConfig(h.dbl.Registry(), r.sizes.Workers, nil)
	pruner, err := dispatcher.New(db.pool, cfg)
	if err != nil {
		return pruneCost{}, err
	}
	from, err := readWALPos(ctx, db.pool)
	if err != nil {
		return pruneCost{}, err
	}
	var total dispatcher.Pruned
	passes := 0
	start := time.Now()
	for {
		p, err := pruner.PruneOnce(ctx)
		if err != nil {
			return pruneCost{}, err
		}
		passes++
		total.Markers, total.Intents = total.Markers+p.Markers, total.Intents+p.Intents
		if p.Markers == 0 && p.Intents == 0 {
			break
		}
	}
	took := time.Since(start)
	to, err := readWALPos(ctx, db.pool)
	if err != nil {
		return pruneCost{}, err
	}
	n := int64(r.sizes.PruneIntents)
	if total.Intents != n || total.Markers != n {
		return pruneCost{}, fmt.Errorf("retention deleted %d intents and %d markers, want %d of each", total.Intents, total.Markers, n)
	}
	hot := int64(h.walRate * took.Seconds())
	return pruneCost{took: took, wal: to.bytes - from.bytes - hot,
		how: fmt.Sprintf("DELETE: dispatcher.PruneOnce with the defaults (batches of %d rows, dedup window %s, audit retention %s) in %d passes, the last deleting nothing: %d markers, then %d intents with their %d attempts and %d events (ON DELETE CASCADE), %.0f intents and markers a second, from tables of %s (heaps, TOAST and indexes).",
			dispatcher.DefaultRetentionBatch, days(dispatcher.DefaultDedupWindow), days(dispatcher.DefaultAuditRetention), passes,
			total.Markers, total.Intents, attempts, events, float64(2*n)/took.Seconds(), bytesText(size)),
		walHow: fmt.Sprintf("DELETE: the server's WAL advanced %s, less the hot path's %s a second (measured just before) for those %.1f s, %s.",
			bytesText(to.bytes-from.bytes), bytesText(int64(h.walRate)), took.Seconds(), bytesText(hot)),
	}, nil
}

// pruneByDrop detaches the day's partition from each partitioned copy in
// one transaction, as a partition maintenance job would, and drops them
// in another.
func pruneByDrop(ctx context.Context, db *database, h *hotPath) (pruneCost, error) {
	var detach []string
	for _, t := range pruneTables {
		detach = append(detach, fmt.Sprintf("ALTER TABLE history.%[1]s DETACH PARTITION history.%[1]s_day", t.name))
	}
	drop := pruneTableNames("history.", "_day")
	size, err := filesSize(ctx, db.pool, drop)
	if err != nil {
		return pruneCost{}, err
	}
	from, err := readWALPos(ctx, db.pool)
	if err != nil {
		return pruneCost{}, err
	}
	detachXID, detachTook, err := timedXact(ctx, db.pool, strings.Join(detach, ";\n"))
	if err != nil {
		return pruneCost{}, fmt.Errorf("detach: %w", err)
	}
	dropXID, dropTook, err := timedXact(ctx, db.pool, "DROP TABLE "+strings.Join(drop, ", "))
	if err != nil {
		return pruneCost{}, fmt.Errorf("drop: %w", err)
	}
	to, err := readWALPos(ctx, db.pool)
	if err != nil {
		return pruneCost{}, err
	}
	c := pruneCost{took: detachTook + dropTook,
		how: fmt.Sprintf("DROP: DETACH PARTITION of the day's partition of the four copies in one transaction (%.1f ms), DROP TABLE of the four in another (%.1f ms), whose commit truncates and unlinks their %s of files (heaps, TOAST and indexes): how long that holds up the other commits' WAL flushes beside it is the filesystem's (its journal, and online discard where it is mounted so).",
			ms(detachTook), ms(dropTook), bytesText(size))}
	wal, records, err := xactWAL(ctx, db.pool, from.lsn, to.lsn, detachXID, dropXID)
	if err != nil {
		// Without pg_walinspect, the server's WAL less the hot path's
		// share: an estimate, rougher than the DROP itself.
		c.wal = to.bytes - from.bytes - int64(h.walRate*c.took.Seconds())
		c.walHow = fmt.Sprintf("DROP: the server's WAL advanced %s, less the hot path's share (the records of its transactions could not be read: %v).", bytesText(to.bytes-from.bytes), err)
		return c, nil
	}
	c.wal = wal
	c.walHow = fmt.Sprintf("DROP: the %d WAL records of its two transactions, full-page images included (pg_walinspect); the server's WAL advanced %s meanwhile, the hot path's included.",
		records, bytesText(to.bytes-from.bytes))
	return c, nil
}

// filesSize is the size on disk of the tables named, with their TOAST and
// indexes.
func filesSize(ctx context.Context, pool *pgxpool.Pool, tables []string) (int64, error) {
	var size int64
	err := pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest($1::text[]) AS t`, tables).Scan(&size)
	return size, err
}

// timedXact runs sql in a transaction of its own and returns the
// transaction's id and how long it took, its commit included.
func timedXact(ctx context.Context, pool *pgxpool.Pool, sql string) (xid string, took time.Duration, err error) {
	start := time.Now()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_current_xact_id()::xid::text`).Scan(&xid)
	})
	return xid, time.Since(start), err
}

// xactWALSQL sums the WAL records between two positions that the given
// transactions wrote, full-page images included.
const xactWALSQL = `
SELECT coalesce(sum(record_length), 0)::bigint, count(*)
FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
WHERE xid::text = ANY($3::text[])`

// xactWAL is the WAL that the transactions xids wrote between from and
// to, and in how many records. It needs pg_walinspect in the database.
func xactWAL(ctx context.Context, pool *pgxpool.Pool, from, to string, xids ...string) (bytes, records int64, err error) {
	err = pool.QueryRow(ctx, xactWALSQL, from, to, xids).Scan(&bytes, &records)
	return bytes, records, err
}

// vacuumAfterDelete vacuums the four tables once the hot path has
// stopped: the work the DELETE leaves behind (its rows dead in the heaps
// and in every index), which autovacuum does later when it is on and a
// DROP leaves none of. It says so, with the settings that decide the
// WAL's full-page images, for the notes.
func vacuumAfterDelete(ctx context.Context, db *database) (string, error) {
	from, err := readWALPos(ctx, db.pool)
	if err != nil {
		return "", err
	}
	start := time.Now()
	if _, err := db.pool.Exec(ctx, "VACUUM "+strings.Join(pruneTableNames("", ""), ", ")); err != nil {
		return "", fmt.Errorf("vacuum after the delete: %w", err)
	}
	took := time.Since(start)
	to, err := readWALPos(ctx, db.pool)
	if err != nil {
		return "", err
	}
	var settings string
	if err := db.pool.QueryRow(ctx, `SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)
		FROM unnest(ARRAY['autovacuum', 'checkpoint_timeout', 'full_page_writes', 'max_wal_size', 'wal_compression']) AS name`).Scan(&settings); err != nil {
		return "", err
	}
	return fmt.Sprintf("Left for later by the DELETE, not counted here: VACUUM of the four tables afterwards, the hot path stopped, took %s and wrote %s of WAL. Server: %s; a CHECKPOINT before each side, so that the first change to each month-old page writes it whole, as it would in a deployment.",
		took.Round(time.Millisecond), bytesText(to.bytes-from.bytes), settings), nil
}

// days writes a whole number of days.
func days(d time.Duration) string { return fmt.Sprintf("%d days", int(d.Hours()/24)) }

// hotPath is the traffic beside retention: paced consumers recording
// through Consume at pruneRate (a processed marker, a business row and a
// keyed Stripe payment intent in one transaction, the e2e workload) and a
// dispatcher of Sizes.Workers calling the Stripe double, which timestamps
// each intent's call.
type hotPath struct {
	sys       *outboxSystem
	consumers *pgxpool.Pool
	dbl       *doubles
	stop      chan struct{}
	done      chan error
	closed    bool
	closeErr  error
	// walRate is the server's WAL, bytes a second, while the hot path
	// ran alone (pruneWindows measures it).
	walRate float64
	mu      sync.Mutex
	sent    []hotSend
}

// hotSend is a message of the hot path.
type hotSend struct {
	at  time.Time // when its Consume committed
	key int64     // its intent, as the double's arrivals know it
}

// hotGrace bounds the wait for the calls of a window's messages; one not
// called by then counts as called at the grace.
const hotGrace = 30 * time.Second

// startHotPath starts the dispatcher, then the consumers, on db. Its
// dispatcher keeps everything (pruneHorizon): the scenario runs the one
// retention measured itself.
func (r *runner) startHotPath(ctx context.Context, db *database) (*hotPath, error) {
	dbl, err := startDoubles(nil, true)
	if err != nil {
		return nil, err
	}
	h := &hotPath{dbl: dbl, stop: make(chan struct{}), done: make(chan error, 1)}
	if h.consumers, err = openConsumers(ctx, db, nil); err != nil {
		h.close(ctx)
		return nil, err
	}
	client, err := intents.NewClient(h.consumers, &intents.Config{Providers: dbl.Registry(), Logger: r.cfg.Logger})
	if err != nil {
		h.close(ctx)
		return nil, err
	}
	cfg := r.dispatcherConfig(dbl.Registry(), r.sizes.Workers, nil)
	cfg.AuditRetention, cfg.DedupWindow = pruneHorizon, pruneHorizon
	d, err := dispatcher.New(db.pool, cfg)
	if err == nil {
		err = d.Start(ctx)
	}
	if err != nil {
		h.close(ctx)
		return nil, err
	}
	h.sys = &outboxSystem{client: client, d: d}
	go func() {
		var seq atomic.Int64
		h.done <- pacedUntil(ctx, pruneRate, -1, h.stop, func(ctx context.Context, _ int) error {
			key, err := h.sys.consume(ctx, seq.Add(1))
			if err != nil {
				return err
			}
			at := time.Now()
			h.mu.Lock()
			h.sent = append(h.sent, hotSend{at: at, key: key})
			h.mu.Unlock()
			return nil
		})
	}()
	return h, nil
}

// close stops the consumers, then the dispatcher and the doubles, and
// returns the first failure of any Consume or a duplicate call; only the
// first call does anything.
func (h *hotPath) close(ctx context.Context) error {
	if h.closed {
		return h.closeErr
	}
	h.closed = true
	if h.sys != nil {
		close(h.stop)
		h.closeErr = <-h.done
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := h.sys.stop(stopCtx); h.closeErr == nil {
			h.closeErr = err
		}
	}
	if h.consumers != nil {
		h.consumers.Close()
	}
	if dup := h.dbl.DuplicateEffects(); dup != 0 && h.closeErr == nil {
		h.closeErr = fmt.Errorf("%d intents were performed twice", dup)
	}
	h.dbl.Close()
	return h.closeErr
}

// sentSoFar is every message committed until now.
func (h *hotPath) sentSoFar() []hotSend {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sent)
}

// hotWindow is what the hot path did over a window of time.
type hotWindow struct {
	took      time.Duration
	committed int // messages whose Consume committed in the window
	called    int // calls that reached the double in the window
	missing   int // of those committed, not called within hotGrace
	p50, p99  time.Duration
	// worst is the slowest message's commit → call, committed worstAt
	// into the window: whether a stall is the retention's.
	worst, worstAt time.Duration
	// over counts the messages slower than e2eLatencyLimit.
	over int
}

// rate is the end-to-end rate: calls a second.
func (w hotWindow) rate() float64 { return float64(w.called) / w.took.Seconds() }

func (w hotWindow) String() string {
	s := fmt.Sprintf("%.0f calls/s and %.0f commits/s over %.1f s, commit → call p50 %.1f ms, p99 %.1f ms, %d over %.0f ms, the slowest %.0f ms (committed %.1f s in)",
		w.rate(), float64(w.committed)/w.took.Seconds(), w.took.Seconds(), ms(w.p50), ms(w.p99),
		w.over, ms(e2eLatencyLimit), ms(w.worst), w.worstAt.Seconds())
	if w.missing > 0 {
		s += fmt.Sprintf(", %d never called", w.missing)
	}
	return s
}

// measure reads what the hot path did in [from, to): the calls that
// arrived in it, and the latency of the messages committed in it (waiting
// for their calls up to hotGrace).
func (h *hotPath) measure(ctx context.Context, from, to time.Time) (hotWindow, error) {
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	w := hotWindow{took: to.Sub(from)}
	var window []hotSend
	for _, s := range h.sentSoFar() {
		if in(s.at) {
			window = append(window, s)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, hotGrace)
	for _, s := range window {
		if h.dbl.arrivals.waitFor(waitCtx, s.key) != nil {
			break
		}
	}
	cancel()
	if err := ctx.Err(); err != nil {
		return w, err
	}
	lat := make([]time.Duration, 0, len(window))
	for _, s := range window {
		at, ok := h.dbl.arrivals.get(s.key)
		if !ok {
			w.missing++
			at = s.at.Add(hotGrace)
		}
		d := max(at.Sub(s.at), 0)
		if d > w.worst {
			w.worst, w.worstAt = d, s.at.Sub(from)
		}
		w.over += boolInt(d > e2eLatencyLimit)
		lat = append(lat, d)
	}
	slices.Sort(lat)
	w.committed, w.p50, w.p99 = len(window), percentile(lat, 0.50), percentile(lat, 0.99)
	for _, s := range h.sentSoFar() {
		if at, ok := h.dbl.arrivals.get(s.key); ok && in(at) {
			w.called++
		}
	}
	return w, nil
}

// pruneReport makes the scenario's rows: the DROP's time and WAL against
// the DELETE's, then the hot path's rate and p99 during each against its
// own baseline.
func pruneReport(n int, del, drop pruneResult) []Row {
	const (
		deleteBase = "DELETE in batches (dispatcher.PruneOnce, this module), same run"
		hotBase    = "the same hot path just before, without retention, same database"
	)
	const copyRef = "The DROP side is a hand-written copy, not the module's schema (the DROP's wall-time row says how)."
	copyNote := "The DROP side is a hand-written copy, not the module's schema: partitioned copies of outbox_intents (by created_at, as docs/scaling.md sketches), outbox_attempts (started_at), outbox_events (at) and outbox_processed_messages (processed_at), in a schema of their own, with a partition of exactly the day, the module's indexes and no foreign keys; their unique keys carry the partition key, so the idempotency key and the processed marker are unique only within a day (docs/scaling.md keeps them in unpartitioned tables, which retention would still DELETE from). Plain DETACH takes an ACCESS EXCLUSIVE lock on each parent; the hot path writes the module's own tables beside the copy, so it never waited on that lock, as it would on a partitioned outbox."
	what := fmt.Sprintf("Retention of a day of %s finished intents, their attempts, events and markers", count(n))
	timeRow := atMostRow(what+": wall time, DROP of the day's partitions (hand-written copy)", "ms", ms(drop.cost.took), deleteBase, ms(del.cost.took), pruneCostTarget)
	timeRow.Note = strings.Join([]string{drop.cost.how, del.cost.how, del.after, copyNote}, " ")
	walRow := atMostRow(what+": WAL written, DROP of the day's partitions (hand-written copy)", "KiB", float64(drop.cost.wal)/1024, deleteBase, float64(del.cost.wal)/1024, pruneCostTarget)
	walRow.Note = strings.Join([]string{drop.cost.walHow, del.cost.walHow, copyRef}, " ")
	rows := []Row{timeRow, walRow}
	sides := []struct {
		label string
		res   pruneResult
		note  string
	}{{"DELETE (this module)", del, ""}, {"DROP (hand-written copy)", drop, " " + copyRef}}
	for _, s := range sides {
		note := fmt.Sprintf("During (from the retention's start, for its time or the baseline's window if longer): %s. Baseline: %s. Consume (marker, business row, keyed Stripe intent) at %d msg/s, %d consumer connections, and a dispatcher calling the Stripe double.%s",
			s.res.during, s.res.baseline, pruneRate, e2eConsumerConns, s.note)
		rate := ratioRow(fmt.Sprintf("Hot path at %d msg/s during the %s of the day: end-to-end rate", pruneRate, s.label), "intents/s",
			s.res.during.rate(), hotBase, s.res.baseline.rate(), pruneHotTarget)
		rate.Note = note
		rows = append(rows, rate)
	}
	for _, s := range sides {
		during, base := s.res.during.p99, s.res.baseline.p99
		rows = append(rows, Row{Measure: fmt.Sprintf("Hot path at %d msg/s during the %s of the day: commit → call p99", pruneRate, s.label), Unit: "ms",
			Figure: ms(during), Baseline: hotBase, BaselineFigure: ms(base), Ratio: ms(during) / max(ms(base), 0.001),
			Target: fmt.Sprintf("≤ %.0f ms", ms(e2eLatencyLimit)), Met: during <= e2eLatencyLimit})
	}
	return rows
}

// atMostRow is a row whose target is at most a share of its baseline: a
// cost.
func atMostRow(measure, unit string, figure float64, baseline string, baselineFigure, share float64) Row {
	row := Row{Measure: measure, Unit: unit, Figure: figure, Baseline: baseline, BaselineFigure: baselineFigure,
		Target: fmt.Sprintf("≤ %g%% of baseline", 100*share)}
	if baselineFigure > 0 {
		row.Ratio = figure / baselineFigure
	}
	row.Met = baselineFigure > 0 && row.Ratio <= share
	return row
}
