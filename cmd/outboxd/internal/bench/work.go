package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The work scenario counts what Postgres does for one message, for every
// system alike, on the end-to-end workload (a processed marker, a business
// row and one keyed Stripe call, called against the zero-latency double):
// heap tuples and index entries written, WAL, commits and the server's CPU.
// Counts, not times: a loaded machine changes none of them but the CPU.
//
// Each system runs in a fresh database: WorkMessages messages at workRate,
// every call made, the system stopped (so every settlement and completion
// is written) and its connections closed (so every backend has reported
// its statistics, which it does at exit). Tuples come from
// pg_stat_user_tables, commits from pg_stat_database, WAL from
// pg_current_wal_lsn (the whole server's: nothing else may run), CPU from
// the processes named postgres, read before the connections close.
//
// Index entries are counted as every index of a table for each insert and
// each update that is not HOT: an upper bound for every system alike
// (partial indexes skip some). They are also counted exactly, from the
// WAL (pg_walinspect): each B-tree leaf insertion (an INSERT_LEAF or
// INSERT_POST record, or a leaf page's split, which carries the new entry)
// and each GIN insertion (into the pending list or the tree) into an index
// of the scenario's database. The business row is left out, and so are
// the maintenance tables (leader election, queue and client registries,
// the finished counts and the activity roll-up), which a busy system
// writes per batch or per second rather than per message; the notes list
// them apart.

// workRate is the offered rate of the work scenario: low enough for every
// system on two cores, so that each runs its steady path (no backlog that
// batches more than it would).
const workRate = 200

// maintenanceTables are left out of the per-message figures (see above).
var maintenanceTables = []string{
	"river_leader", "river_queue", "river_client", "river_client_queue", "river_migration",
	"outbox_intent_counts", "outbox_counts_saved", "outbox_activity_minutes", "outbox_activity_rollup",
}

// businessTables are the consumers' own writes, the same for every system.
var businessTables = []string{"bench_orders"}

// tableWork is one table's writes.
type tableWork struct {
	name                          string
	inserted, updated, hot, gone  int64
	indexes                       int64
	indexEntries, tuplesOfTheHeap int64
	// walEntries counts the entries its indexes' WAL records inserted.
	walEntries int64
}

// workCount is a system's writes over a run.
type workCount struct {
	messages    int
	tables      []tableWork // every table written, most written first
	walBytes    int64
	commits     int64
	postgresCPU time.Duration
	// walEntriesErr says why the index entries were not counted from the
	// WAL (pg_walinspect missing, or not allowed); nil when they were.
	walEntriesErr error
}

// perMessage is n divided by the messages.
func (w workCount) perMessage(n int64) float64 { return float64(n) / float64(max(w.messages, 1)) }

// hotPath sums the tables that are neither business nor maintenance.
func (w workCount) hotPath() (heap, index int64) {
	heap, index, _ = w.hotPathExact()
	return heap, index
}

// hotPathExact is hotPath with the index entries counted from the WAL.
func (w workCount) hotPathExact() (heap, index, walEntries int64) {
	for _, t := range w.tables {
		if slices.Contains(maintenanceTables, t.name) || slices.Contains(businessTables, t.name) {
			continue
		}
		heap += t.tuplesOfTheHeap
		index += t.indexEntries
		walEntries += t.walEntries
	}
	return heap, index, walEntries
}

// breakdown says, per message, what each table was written for: "outbox_intents
// 1 ins + 2 upd (1 HOT) × 6 indexes".
func (w workCount) breakdown() string {
	var parts, apart []string
	for _, t := range w.tables {
		s := fmt.Sprintf("%s %s", t.name, w.tableLine(t))
		if slices.Contains(maintenanceTables, t.name) || slices.Contains(businessTables, t.name) {
			apart = append(apart, s)
			continue
		}
		parts = append(parts, s)
	}
	out := strings.Join(parts, "; ")
	if len(apart) > 0 {
		out += " (left out: " + strings.Join(apart, "; ") + ")"
	}
	return out
}

func (w workCount) tableLine(t tableWork) string {
	var ops []string
	if t.inserted > 0 {
		ops = append(ops, fmt.Sprintf("%.2f ins", w.perMessage(t.inserted)))
	}
	if t.updated > 0 {
		ops = append(ops, fmt.Sprintf("%.2f upd (%.2f HOT)", w.perMessage(t.updated), w.perMessage(t.hot)))
	}
	if t.gone > 0 {
		ops = append(ops, fmt.Sprintf("%.2f del", w.perMessage(t.gone)))
	}
	exact := ""
	if w.walEntriesErr == nil {
		exact = fmt.Sprintf(" (%.2f entries written)", w.perMessage(t.walEntries))
	}
	return fmt.Sprintf("%s, %d index%s%s", strings.Join(ops, " + "), t.indexes, map[bool]string{true: "", false: "es"}[t.indexes == 1], exact)
}

func (w workCount) String() string {
	heap, index, walEntries := w.hotPathExact()
	exact := ""
	if w.walEntriesErr == nil {
		exact = fmt.Sprintf(" (%.1f written, from the WAL)", w.perMessage(walEntries))
	}
	return fmt.Sprintf("%.2f heap tuples, %.1f index entries%s, %.0f WAL bytes, %.2f commits, %.2f ms Postgres CPU a message",
		w.perMessage(heap), w.perMessage(index), exact, w.perMessage(w.walBytes), w.perMessage(w.commits),
		float64(w.postgresCPU.Microseconds())/1000/float64(max(w.messages, 1)))
}

// workRows counts every system's work per message and compares this
// module's with the cheapest peer's.
func (r *runner) workRows(ctx context.Context) ([]Row, error) {
	var ours workCount
	type peerWork struct {
		name string
		work workCount
	}
	var peers []peerWork
	var leftOut []string
	for i, peer := range e2ePeers() {
		if i > 0 && len(r.cfg.Peers) > 0 && !contains(r.cfg.Peers, peer.key) {
			continue
		}
		r.progress("Postgres work per message: %s, %d messages at %d/s", peer.name, r.sizes.WorkMessages, workRate)
		w, err := r.countWork(ctx, peer)
		if err != nil {
			if i == 0 {
				return nil, err
			}
			r.progress("  %s left out: %v", peer.name, err)
			leftOut = append(leftOut, fmt.Sprintf("%s left out of this run: %v", peer.name, err))
			continue
		}
		r.progress("  %s", w)
		if i == 0 {
			ours = w
			continue
		}
		peers = append(peers, peerWork{peer.name, w})
	}
	// The cheapest peer by heap tuples is the baseline of every row.
	sort.SliceStable(peers, func(a, b int) bool {
		ha, _ := peers[a].work.hotPath()
		hb, _ := peers[b].work.hotPath()
		return peers[a].work.perMessage(ha) < peers[b].work.perMessage(hb)
	})
	var note strings.Builder
	fmt.Fprintf(&note, "This module: %s; %s.", ours, ours.breakdown())
	for _, p := range peers {
		fmt.Fprintf(&note, " %s: %s; %s.", p.name, p.work, p.work.breakdown())
	}
	for _, l := range leftOut {
		fmt.Fprintf(&note, " %s.", l)
	}
	fmt.Fprintf(&note, " %d messages a system at %d/s, one keyed Stripe call each; counted from pg_stat_user_tables (an index entry for each index of a table at each insert and non-HOT update), pg_stat_database, pg_current_wal_lsn() and the postgres processes' CPU; the entries written from the WAL's index insertions (pg_walinspect).", r.sizes.WorkMessages, workRate)
	if ours.walEntriesErr != nil {
		fmt.Fprintf(&note, " Index entries not counted from the WAL: %v.", ours.walEntriesErr)
	}
	baseName, base := "no peer in this run", workCount{}
	if len(peers) > 0 {
		baseName, base = peers[0].name+", same run", peers[0].work
	}
	heap, index, walEntries := ours.hotPathExact()
	baseHeap, baseIndex, baseWALEntries := base.hotPathExact()
	cpu := func(w workCount) float64 {
		return float64(w.postgresCPU.Microseconds()) / 1000 / float64(max(w.messages, 1))
	}
	rows := []Row{
		workRow("heap tuples written", "tuples/message", ours.perMessage(heap), baseName, base.perMessage(baseHeap), "≤ 5 a message", ours.perMessage(heap) <= 5),
		workRow("index entries written (every index of a table at each write: an upper bound)", "entries/message", ours.perMessage(index), baseName, base.perMessage(baseIndex), "≤ 12 a message", ours.perMessage(index) <= 12),
		workRow("WAL", "bytes/message", ours.perMessage(ours.walBytes), baseName, base.perMessage(base.walBytes), "≤ 3× the cheapest peer",
			len(peers) > 0 && ours.perMessage(ours.walBytes) <= 3*base.perMessage(base.walBytes)),
		workRow("Postgres CPU", "ms/message", cpu(ours), baseName, cpu(base), "≤ 2× the cheapest peer", len(peers) > 0 && cpu(ours) <= 2*cpu(base)),
	}
	if ours.walEntriesErr == nil {
		exact := workRow("index entries written (counted from the WAL: partial indexes skip)", "entries/message", ours.perMessage(walEntries),
			baseName, base.perMessage(baseWALEntries), "context: the upper bound's target, ≤ 12", ours.perMessage(walEntries) <= 12)
		rows = slices.Insert(rows, 2, exact)
	}
	rows[0].Note = note.String()
	return rows, nil
}

func workRow(what, unit string, figure float64, baseline string, baseFigure float64, target string, met bool) Row {
	row := Row{Measure: "Postgres work per message, keyed success path: " + what + ", this module", Unit: unit, Figure: figure,
		Baseline: baseline, BaselineFigure: baseFigure, Target: target, Met: met}
	if baseFigure > 0 {
		row.Ratio = figure / baseFigure
	}
	return row
}

// countWork runs WorkMessages messages through peer in a fresh database
// and counts what Postgres wrote for them.
func (r *runner) countWork(ctx context.Context, peer e2ePeer) (workCount, error) {
	w := workCount{messages: r.sizes.WorkMessages}
	workers := r.sizes.Workers
	db, err := r.newDatabase(ctx, "work", min(workers+10, 60))
	if err != nil {
		return w, err
	}
	defer r.closeDatabase(ctx, db)
	consumers, err := openConsumers(ctx, db, nil)
	if err != nil {
		return w, err
	}
	defer consumers.Close()
	dbl, err := startDoubles(nil, true)
	if err != nil {
		return w, err
	}
	defer dbl.Close()

	before, err := readWork(ctx, db.pool)
	if err != nil {
		return w, err
	}
	cpuStart := takeCPUSnapshot()
	sys, err := peer.start(ctx, &e2eEnv{r: r, db: db, consumers: consumers, dbl: dbl, workers: workers, tracer: &roundTrips{}})
	if err != nil {
		return w, fmt.Errorf("%s: start: %w", peer.name, err)
	}
	if err := offerWork(ctx, peer, sys, dbl, w.messages); err != nil {
		return w, err
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return w, fmt.Errorf("%s: %d calls were performed twice", peer.name, dup)
	}
	w.postgresCPU = takeCPUSnapshot().postgresSince(cpuStart)
	// Every backend reports its statistics when it exits: close them all,
	// then read from a new one.
	consumers.Close()
	db.pool.Reset()
	if err := waitAlone(ctx, db.pool); err != nil {
		return w, err
	}
	after, err := readWork(ctx, db.pool)
	if err != nil {
		return w, err
	}
	w.walBytes, w.commits = after.wal-before.wal, after.commits-before.commits
	w.tables = tablesWritten(before, after)
	entries, err := walIndexEntries(ctx, db.pool, before.lsn, after.lsn)
	w.walEntriesErr = err
	for i := range w.tables {
		w.tables[i].walEntries = entries[w.tables[i].name]
	}
	return w, nil
}

// walIndexEntriesSQL counts, per table, the index entries the WAL between
// $1 and $2 inserted into the indexes of the current database: a B-tree
// leaf insertion, or a leaf split (the record carries the new entry), or
// a GIN insertion (into its pending list or its tree).
const walIndexEntriesSQL = `
WITH record AS (
    SELECT regexp_match(block_ref, 'rel \d+/(\d+)/(\d+)') AS rel
    FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
    WHERE (resource_manager = 'Btree' AND (record_type IN ('INSERT_LEAF', 'INSERT_POST')
                                          OR (record_type IN ('SPLIT_L', 'SPLIT_R') AND description LIKE 'level 0,%')))
       OR (resource_manager = 'Gin' AND record_type IN ('INSERT', 'UPDATE_META_PAGE'))
)
SELECT CASE WHEN n.nspname = 'public' THEN t.relname ELSE n.nspname || '.' || t.relname END, count(*)
FROM record
JOIN pg_class i ON i.relfilenode = (record.rel[2])::oid
JOIN pg_index x ON x.indexrelid = i.oid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE (record.rel[1])::oid = (SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1`

// walIndexEntries counts the index entries written between two WAL
// positions per table (walIndexEntriesSQL), named as readWork names them.
// It needs pg_walinspect, which it creates in the scenario's database.
func walIndexEntries(ctx context.Context, pool *pgxpool.Pool, from, to string) (map[string]int64, error) {
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, walIndexEntriesSQL, from, to)
	if err != nil {
		return nil, err
	}
	entries := map[string]int64{}
	var table string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&table, &n}, func() error {
		entries[table] = n
		return nil
	})
	return entries, err
}

// offerWork offers n messages to sys at workRate, waits until each was
// called, and stops sys.
func offerWork(ctx context.Context, peer e2ePeer, sys e2eSystem, dbl *doubles, n int) error {
	var seq atomic.Int64
	keys := make([]int64, n)
	err := paced(ctx, workRate, n, func(ctx context.Context, i int) error {
		key, err := sys.consume(ctx, seq.Add(1))
		keys[i] = key
		return err
	})
	if err == nil {
		err = drain(ctx, dbl, keys)
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if stopErr := sys.stop(stopCtx); err == nil && stopErr != nil {
		err = fmt.Errorf("%s: stop: %w", peer.name, stopErr)
	}
	return err
}

// tablesWritten is what was written to each table between before and
// after, the tables written to most first.
func tablesWritten(before, after workSnapshot) []tableWork {
	var tables []tableWork
	for name, t := range after.tables {
		b := before.tables[name]
		d := tableWork{name: name, inserted: t.inserted - b.inserted, updated: t.updated - b.updated, hot: t.hot - b.hot,
			gone: t.gone - b.gone, indexes: t.indexes}
		if d.inserted == 0 && d.updated == 0 && d.gone == 0 {
			continue
		}
		d.tuplesOfTheHeap = d.inserted + d.updated + d.gone
		d.indexEntries = d.indexes * (d.inserted + d.updated - d.hot)
		tables = append(tables, d)
	}
	sort.Slice(tables, func(a, b int) bool {
		if tables[a].tuplesOfTheHeap != tables[b].tuplesOfTheHeap {
			return tables[a].tuplesOfTheHeap > tables[b].tuplesOfTheHeap
		}
		return tables[a].name < tables[b].name
	})
	return tables
}

// workSnapshot is the counters countWork subtracts.
type workSnapshot struct {
	tables  map[string]tableWork
	wal     int64
	lsn     string
	commits int64
}

// readWork reads the write counters of the database behind pool, in one
// transaction. Tables of every schema are read (a peer may keep its own),
// named schema.table outside public.
func readWork(ctx context.Context, pool *pgxpool.Pool) (workSnapshot, error) {
	s := workSnapshot{tables: map[string]tableWork{}}
	rows, err := pool.Query(ctx, `
		SELECT CASE WHEN schemaname = 'public' THEN relname ELSE schemaname || '.' || relname END,
			n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
			(SELECT count(*) FROM pg_index x WHERE x.indrelid = t.relid)
		FROM pg_stat_user_tables t`)
	if err != nil {
		return s, err
	}
	for rows.Next() {
		var t tableWork
		if err := rows.Scan(&t.name, &t.inserted, &t.updated, &t.hot, &t.gone, &t.indexes); err != nil {
			rows.Close()
			return s, err
		}
		s.tables[t.name] = t
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	err = pool.QueryRow(ctx, `
		SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, pg_current_wal_lsn()::text,
			(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())`).Scan(&s.wal, &s.lsn, &s.commits)
	return s, err
}

// waitAlone waits, bounded, until the connection pool reads from is the
// only one to its database left: a closed connection's backend reports its
// statistics as it exits, a moment after the client hung up.
func waitAlone(ctx context.Context, pool *pgxpool.Pool) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var others int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			return err
		}
		if others == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d connections to the database were still open 10s after every pool closed", others)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
