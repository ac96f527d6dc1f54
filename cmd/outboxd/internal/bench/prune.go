package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
)

// The prune scenario (issue 21): what retention of a day of history costs
// when the day is a range of the partitioned history (migration 017),
// dropped whole, against the same day deleted row by row, each beside the
// same hot path, in the same run. Both sides run this module's retention,
// dispatcher.PruneOnce with the defaults users get, until a pass deletes
// nothing; a fresh database holds Sizes.PruneIntents intents of one day
// (fillPruneSQL), their attempts, events, keys and processed markers, all
// older than the audit retention and the dedup window.
//
// DELETE: the day's ids are past every range, in the default partitions,
// which retention prunes row by row, as it pruned every intent before the
// history was partitioned.
//
// DROP: the day's ids are a range of their own, which retention drops
// whole: DETACH and DROP of its three partitions, then its keys.
//
// The processed markers are deleted row by row on both sides: they are the
// dedup, never partitioned. Beside each side, the hot path runs on the
// same database (hotPath): its end-to-end rate and commit → call p99 while
// retention runs are compared with the same hot path's just before. Each
// side's WAL is the server's (pg_current_wal_lsn, as the work scenario
// reads it) less the hot path's own WAL at its rate just before, for as
// long as the retention took.

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

// pruneTables names the tables that hold the day on a side: the
// partitions of the history tables named by suffix (the default
// partitions, or the day's range), the processed markers (never
// partitioned: they are the dedup) and the intents' keys.
func pruneTables(suffix string) []string {
	return []string{"outbox_intents_" + suffix, "outbox_attempts_" + suffix, "outbox_events_" + suffix,
		"outbox_processed_messages", "outbox_intent_keys"}
}

// pruneRangeFrom is where the DROP side's range of the day begins: after
// the first range a new database has, [1, 100001) (migration 017).
const pruneRangeFrom = 100_001

// pruneDefaultFrom is an id past every range a new database has: the
// DELETE side's day goes to the default partitions.
const pruneDefaultFrom = 1_000_000_000

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
	name   string // DELETE or DROP
	suffix string // of the partitions that hold the day
	// fill writes the day into db.
	fill func(ctx context.Context, db *database, n int, day time.Time) error
	// retain deletes the day, beside the hot path h.
	retain func(ctx context.Context, side pruneSide, db *database, h *hotPath) (pruneCost, error)
	// after, when not nil, runs once the hot path stopped, and says what
	// it found for the notes.
	after func(ctx context.Context, side pruneSide, db *database) (string, error)
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
	del, err := r.measurePrune(ctx, n, day, pruneSide{name: "DELETE", suffix: "default", fill: fillForDelete, retain: r.pruneByRetention, after: vacuumAfterDelete})
	if err != nil {
		return nil, err
	}
	drop, err := r.measurePrune(ctx, n, day, pruneSide{name: "DROP", suffix: fmt.Sprint("from_", pruneRangeFrom), fill: fillRange, retain: r.pruneByRetention})
	if err != nil {
		return nil, err
	}
	return pruneReport(n, del, drop), nil
}

// fillForDelete fills the day with ids past every range: into the
// default partitions, which retention prunes row by row, as it pruned
// every intent before the history was partitioned (migration 017).
func fillForDelete(ctx context.Context, db *database, n int, day time.Time) error {
	if _, err := db.pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('outbox_intents', 'id'), $1)`, pruneDefaultFrom-1); err != nil {
		return err
	}
	return fillAndCheck(ctx, db, n, day, "default")
}

// fillRange fills the day into a range of its own, [pruneRangeFrom,
// pruneRangeFrom + n): the day's ids, as the dispatchers' leader would
// have made it for a day's recording at this rate.
func fillRange(ctx context.Context, db *database, n int, day time.Time) error {
	suffix := fmt.Sprint("from_", pruneRangeFrom)
	for _, t := range []string{"outbox_intents", "outbox_attempts", "outbox_events"} {
		if _, err := db.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s_%s PARTITION OF %s FOR VALUES FROM (%d) TO (%d)`,
			t, suffix, t, pruneRangeFrom, pruneRangeFrom+n)); err != nil {
			return err
		}
	}
	if _, err := db.pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('outbox_intents', 'id'), $1)`, pruneRangeFrom-1); err != nil {
		return err
	}
	return fillAndCheck(ctx, db, n, day, suffix)
}

// fillAndCheck fills the day and checks that every intent of it went to
// the partition named by suffix.
func fillAndCheck(ctx context.Context, db *database, n int, day time.Time, suffix string) error {
	if err := fillPrune(ctx, db.pool, n, day); err != nil {
		return err
	}
	var there int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM outbox_intents_"+suffix).Scan(&there); err != nil {
		return err
	}
	if there != n {
		return fmt.Errorf("outbox_intents_%s holds %d of the day's %d intents", suffix, there, n)
	}
	return recount(ctx, db.pool)
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
		if res.after, err = side.after(ctx, side, db); err != nil {
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
	if res.cost, err = side.retain(ctx, side, db, h); err != nil {
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

// pruneByRetention runs the module's retention as its leader runs it,
// with the defaults users get, until a pass deletes nothing (a pass ends
// at a short batch, and a row another transaction held is skipped): on
// the DELETE side it deletes the day row by row, on the DROP side it drops
// the day's range whole.
func (r *runner) pruneByRetention(ctx context.Context, side pruneSide, db *database, h *hotPath) (pruneCost, error) {
	var attempts, events int64
	if err := db.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_attempts), (SELECT count(*) FROM outbox_events)`).Scan(&attempts, &events); err != nil {
		return pruneCost{}, err
	}
	size, err := filesSize(ctx, db.pool, pruneTables(side.suffix))
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
		total.Markers, total.Intents, total.Ranges = total.Markers+p.Markers, total.Intents+p.Intents, total.Ranges+p.Ranges
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
	var kept bool
	if err := db.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "outbox_intents_"+side.suffix).Scan(&kept); err != nil {
		return pruneCost{}, err
	}
	if dropped := !kept; dropped != (side.suffix != "default") {
		return pruneCost{}, fmt.Errorf("%s: the day's partition outbox_intents_%s dropped: %t", side.name, side.suffix, dropped)
	}
	hot := int64(h.walRate * took.Seconds())
	return pruneCost{took: took, wal: to.bytes - from.bytes - hot,
		how: fmt.Sprintf("%s: dispatcher.PruneOnce with the defaults (batches of %d rows, dedup window %s, audit retention %s) in %d passes, the last deleting nothing: %d markers (row by row, on both sides: they are the dedup), then %d intents with their %d attempts and %d events, %d ranges dropped whole, and the intents' keys, %.0f intents and markers a second, from tables of %s (heaps, TOAST and indexes).",
			side.name, dispatcher.DefaultRetentionBatch, days(dispatcher.DefaultDedupWindow), days(dispatcher.DefaultAuditRetention), passes,
			total.Markers, total.Intents, attempts, events, total.Ranges, float64(2*n)/took.Seconds(), bytesText(size)),
		walHow: fmt.Sprintf("%s: the server's WAL advanced %s, less the hot path's %s a second (measured just before) for those %.1f s, %s.",
			side.name, bytesText(to.bytes-from.bytes), bytesText(int64(h.walRate)), took.Seconds(), bytesText(hot)),
	}, nil
}

// filesSize is the size on disk of the tables named, with their TOAST and
// indexes.
func filesSize(ctx context.Context, pool *pgxpool.Pool, tables []string) (int64, error) {
	var size int64
	err := pool.QueryRow(ctx, `SELECT sum(pg_total_relation_size(t::regclass))::bigint FROM unnest($1::text[]) AS t`, tables).Scan(&size)
	return size, err
}

// vacuumAfterDelete vacuums the four tables once the hot path has
// stopped: the work the DELETE leaves behind (its rows dead in the heaps
// and in every index), which autovacuum does later when it is on and a
// DROP leaves none of. It says so, with the settings that decide the
// WAL's full-page images, for the notes.
func vacuumAfterDelete(ctx context.Context, side pruneSide, db *database) (string, error) {
	from, err := readWALPos(ctx, db.pool)
	if err != nil {
		return "", err
	}
	start := time.Now()
	if _, err := db.pool.Exec(ctx, "VACUUM "+strings.Join(pruneTables(side.suffix), ", ")); err != nil {
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
	return fmt.Sprintf("Left for later by the DELETE, not counted here: VACUUM of its tables afterwards, the hot path stopped, took %s and wrote %s of WAL. Server: %s; a CHECKPOINT before each side, so that the first change to each month-old page writes it whole, as it would in a deployment.",
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
		deleteBase = "the same day deleted row by row (the default partition), same run"
		hotBase    = "the same hot path just before, without retention, same database"
	)
	const sidesRef = "Both sides are this module's retention (dispatcher.PruneOnce) on its partitioned history (migration 017); the wall-time row says how."
	sidesNote := "Both sides are this module's retention (dispatcher.PruneOnce) on its partitioned history (migration 017): the DELETE side's day is in the default partitions, which retention prunes row by row, as it pruned every intent before the history was partitioned; the DROP side's day is a range of its own, dropped whole (DETACH and DROP of its three partitions under a lock of the partitioned tables, the hot path's statements waiting behind it), after which its intents' keys are deleted. The processed markers are deleted row by row on both sides: they are the dedup, unique across any time, so never partitioned."
	what := fmt.Sprintf("Retention of a day of %s finished intents, their attempts, events and markers", count(n))
	timeRow := atMostRow(what+": wall time, the day's range dropped whole", "ms", ms(drop.cost.took), deleteBase, ms(del.cost.took), pruneCostTarget)
	timeRow.Note = strings.Join([]string{drop.cost.how, del.cost.how, del.after, sidesNote}, " ")
	walRow := atMostRow(what+": WAL written, the day's range dropped whole", "KiB", float64(drop.cost.wal)/1024, deleteBase, float64(del.cost.wal)/1024, pruneCostTarget)
	walRow.Note = strings.Join([]string{drop.cost.walHow, del.cost.walHow, sidesRef}, " ")
	rows := []Row{timeRow, walRow}
	sides := []struct {
		label string
		res   pruneResult
		note  string
	}{{"DELETE (row by row)", del, " " + sidesRef}, {"DROP (the range whole)", drop, " " + sidesRef}}
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
