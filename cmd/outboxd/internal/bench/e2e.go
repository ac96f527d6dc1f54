package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// The end-to-end scenario runs every system the same way: paced producers
// (open loop: a message is due at its time whether or not the previous one
// has committed) hand each message to the system's consumer, which commits a
// processed marker, one business row and one outgoing call in one
// transaction; the system's workers then make the call against the Stripe
// double, which timestamps its arrival. The offered rate steps up until a
// step fails; the sustainable rate is the last step that passed.

// e2eLatencyLimit is the commit → call p99 a step must stay under.
const e2eLatencyLimit = 50 * time.Millisecond

// e2eDrainLimit bounds the wait for a failed step's calls before the next
// step.
const e2eDrainLimit = time.Minute

// drain waits until every key has been called, up to e2eDrainLimit.
func drain(ctx context.Context, dbl *doubles, keys []int64) error {
	ctx, cancel := context.WithTimeout(ctx, e2eDrainLimit)
	defer cancel()
	for _, k := range keys {
		if err := dbl.arrivals.waitFor(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// e2eTries is how many times in a row a rate must fail to end the climb.
const e2eTries = 3

// e2eConsumerConns is the consumers' pool: as many connections as the
// commit-limit baseline has clients.
const e2eConsumerConns = 8

// e2eSystem is one outbox implementation, started in its own database
// against the doubles. Every peer implements it, so that rows are alike.
type e2eSystem interface {
	// consume handles message seq in one transaction of the consumers'
	// pool (marker, business row, the outgoing call recorded) and returns,
	// once committed, the key the double will see in the call's
	// metadata[intent_id].
	consume(ctx context.Context, seq int64) (int64, error)
	// stop stops the system's workers.
	stop(ctx context.Context) error
}

// e2ePeer names a system and starts it.
type e2ePeer struct {
	// key names the peer in Config.Peers; name is the row's label.
	key  string
	name string
	// setup says how the system is configured, for the notes.
	setup string
	// start starts the system's workers (workers of them) in db, calling
	// the double at dbl.StripeURL(); consumers use env.consumers.
	start func(ctx context.Context, env *e2eEnv) (e2eSystem, error)
}

// e2eEnv is what a system is started with.
type e2eEnv struct {
	r         *runner
	db        *database     // the system's database; db.pool is its workers' pool
	consumers *pgxpool.Pool // the consumers' pool, e2eConsumerConns connections
	dbl       *doubles
	workers   int
	// tracer counts the workers' round trips; a system that opens a pool
	// of its own sets it on that pool's connections.
	tracer *roundTrips
}

// insertBusinessRow is the business write every consumer makes.
func insertBusinessRow(ctx context.Context, tx pgx.Tx, seq int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO bench_orders (message_id, amount) VALUES ($1, 500)`, msgID(seq))
	return err
}

// insertMarker is the processed marker of the peers that have none of
// their own: a duplicate delivery would fail on the primary key.
func insertMarker(ctx context.Context, tx pgx.Tx, seq int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO bench_processed (consumer, message_id) VALUES ('bench', $1)`, msgID(seq))
	return err
}

func msgID(seq int64) string { return "m-" + strconv.FormatInt(seq, 10) }

// benchTablesSQL creates the peers' marker table, the business table every
// consumer writes to and the commit-limit baseline's table, in the
// template.
const benchTablesSQL = `
CREATE TABLE bench_processed (consumer text NOT NULL, message_id text NOT NULL, PRIMARY KEY (consumer, message_id));
CREATE TABLE bench_orders (id bigserial PRIMARY KEY, message_id text NOT NULL, amount integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bench_commit (id bigserial PRIMARY KEY, v integer NOT NULL)`

// ---- this module ----

func outboxPeer() e2ePeer {
	return e2ePeer{
		key:   "outbox",
		name:  "outbox (this module)",
		setup: "intents.Client.Consume recording one Stripe payment intent; dispatcher.New with its defaults and MaxWorkers = workers",
		start: func(ctx context.Context, env *e2eEnv) (e2eSystem, error) {
			client, err := intents.NewClient(env.consumers, &intents.Config{Providers: env.dbl.Registry(), Logger: env.r.cfg.Logger})
			if err != nil {
				return nil, err
			}
			d, err := dispatcher.New(env.db.pool, env.r.dispatcherConfig(env.dbl.Registry(), env.workers, nil))
			if err != nil {
				return nil, err
			}
			if err := d.Start(ctx); err != nil {
				return nil, err
			}
			return &outboxSystem{client: client, d: d}, nil
		},
	}
}

type outboxSystem struct {
	client *intents.Client
	d      *dispatcher.Dispatcher
}

func (s *outboxSystem) consume(ctx context.Context, seq int64) (int64, error) {
	res, err := s.client.Consume(ctx, intents.Message{Consumer: "bench", ID: msgID(seq)}, func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if err := insertBusinessRow(ctx, tx, seq); err != nil {
			return err
		}
		return rec.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Payload: json.RawMessage(paymentPayload)})
	})
	if err != nil {
		return 0, err
	}
	if res.Duplicate || len(res.Intents) != 1 {
		return 0, fmt.Errorf("message %d: duplicate %v, %d intents", seq, res.Duplicate, len(res.Intents))
	}
	return res.Intents[0].ID, nil
}

func (s *outboxSystem) stop(ctx context.Context) error { return s.d.Stop(ctx) }

// ---- calling the double over HTTP, for the peers ----

// doubleCaller makes the Stripe call the peers' workers make: the same
// request the Stripe adapter sends, keyed by the message.
type doubleCaller struct {
	client *http.Client
	url    string
}

func newDoubleCaller(baseURL string, conns int) *doubleCaller {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns * 2
	return &doubleCaller{client: &http.Client{Transport: tr, Timeout: 30 * time.Second}, url: baseURL + "/v1/payment_intents"}
}

func (c *doubleCaller) pay(ctx context.Context, key int64) error {
	form := url.Values{
		"amount": {"500"}, "currency": {"usd"}, "customer": {"cus_1"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"},
		// What the Stripe adapter sends for a background charge: without it
		// Stripe (and the double) refuse the confirm for want of a return_url.
		"off_session": {"true"}, "automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[" + stripeprovider.IntentIDMetadataKey + "]": {strconv.FormatInt(key, 10)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+stripedouble.DefaultAPIKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(key, 10))
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("stripe double answered %s", resp.Status)
	}
	return nil
}

func (c *doubleCaller) close() { c.client.CloseIdleConnections() }

// ---- stepping the rate up ----

// stepResult is one step of the ladder.
type stepResult struct {
	rate      int
	achieved  float64 // commits per second the consumers achieved
	p50, p99  time.Duration
	backlog   int // committed but not yet called when the last commit returned
	maxBacklg int // the bound backlog had to stay within
	missing   int // never called within the grace period
	cpu       cpuUse
	pass      bool
	pending   []int64 // the keys never called, for the next step to wait for
}

func (s stepResult) String() string {
	verdict := "pass"
	if !s.pass {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%d/s offered, %.0f/s committed, p50 %.1f ms, p99 %.1f ms, backlog %d (bound %d), never called %d; %s: %s",
		s.rate, s.achieved, ms(s.p50), ms(s.p99), s.backlog, s.maxBacklg, s.missing, s.cpu, verdict)
}

// ladderResult is a system's climb.
type ladderResult struct {
	sustainable stepResult // the last step that passed; rate 0 when none did
	failed      stepResult // the first step that failed; rate 0 when none did
	commits     float64    // database commits per message over the climb
	// round trips per message over the climb, consumers' and workers'
	consumerTrips, workerTrips float64
}

// figure is the sustainable rate, 0 when even the lowest step failed.
func (l ladderResult) figure() float64 { return float64(l.sustainable.rate) }

// ladderRates are the offered rates: shares of bound, the rate the commit
// limit (or the workers) allow, low to high.
func ladderRates(bound float64) []int {
	var rates []int
	for _, share := range []float64{0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.15, 1.3} {
		rate := int(math.Round(share * bound))
		if rate >= 5 && (len(rates) == 0 || rate > rates[len(rates)-1]) {
			rates = append(rates, rate)
		}
	}
	if len(rates) == 0 {
		rates = []int{5}
	}
	return rates
}

// climb starts peer in a fresh database and steps its offered rate up
// through rates, stopping at the first step that fails.
func (r *runner) climb(ctx context.Context, peer e2ePeer, delay time.Duration, rates []int) (ladderResult, error) {
	var res ladderResult
	workers := r.sizes.Workers
	workerTrips, consumerTrips := &roundTrips{}, &roundTrips{}
	db, err := r.newTracedDatabase(ctx, "e2e", min(workers+10, 60), workerTrips)
	if err != nil {
		return res, err
	}
	defer r.closeDatabase(ctx, db)
	consumers, err := openConsumers(ctx, db, consumerTrips)
	if err != nil {
		return res, err
	}
	defer consumers.Close()
	dbl, err := startDelayedDoubles(delay)
	if err != nil {
		return res, err
	}
	defer dbl.Close()
	sys, err := peer.start(ctx, &e2eEnv{r: r, db: db, consumers: consumers, dbl: dbl, workers: workers, tracer: workerTrips})
	if err != nil {
		return res, fmt.Errorf("%s: start: %w", peer.name, err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := sys.stop(stopCtx); err != nil {
			r.progress("  %s: stop: %v", peer.name, err)
		}
	}()
	commitsBefore, err := xactCommits(ctx, db.pool)
	if err != nil {
		return res, err
	}
	c := &climber{r: r, peer: peer, sys: sys, dbl: dbl}
	if err := c.warmUp(ctx, db, rates[0]); err != nil {
		return res, err
	}
	if err := c.ladder(ctx, rates, &res); err != nil {
		return res, err
	}
	if err := c.refine(ctx, &res); err != nil {
		return res, err
	}
	if dup := dbl.DuplicateEffects(); dup != 0 {
		return res, fmt.Errorf("%s: %d calls were performed twice", peer.name, dup)
	}
	// The statistics reach pg_stat_database within a second of a
	// backend going idle.
	time.Sleep(1500 * time.Millisecond)
	commitsAfter, err := xactCommits(ctx, db.pool)
	if err != nil {
		return res, err
	}
	if c.messages > 0 {
		res.commits = float64(commitsAfter-commitsBefore) / float64(c.messages)
		res.consumerTrips = float64(consumerTrips.n.Load()) / float64(c.messages)
		res.workerTrips = float64(workerTrips.n.Load()) / float64(c.messages)
	}
	return res, nil
}

// openConsumers opens the consumers' pool on db, e2eConsumerConns
// connections, with tracer on them when not nil.
func openConsumers(ctx context.Context, db *database, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = e2eConsumerConns
	if tracer != nil {
		pcfg.ConnConfig.Tracer = tracer
	}
	return pgxpool.NewWithConfig(ctx, pcfg)
}

// startDelayedDoubles starts the doubles with arrival timestamps; with a
// delay, the Stripe double holds every answer that long.
func startDelayedDoubles(delay time.Duration) (*doubles, error) {
	if delay <= 0 {
		return startDoubles(nil, true)
	}
	faults := fault.New(1)
	if err := faults.SetRates(fault.Rates{Delay: 1, DelayFor: delay}); err != nil {
		return nil, err
	}
	return startDoubles(faults, true)
}

// climber steps the offered rate of a started system, carrying from one
// step to the next the calls it left behind.
type climber struct {
	r    *runner
	peer e2ePeer
	sys  e2eSystem
	dbl  *doubles
	seq  atomic.Int64
	// messages is how many were offered, the warm-up's included.
	messages int
	// pending are the keys the last step left uncalled; last is that step.
	pending []int64
	last    stepResult
	// stuck: a step's calls were not all made within e2eDrainLimit, which
	// ends the climb.
	stuck bool
}

// warmUp offers rate, not judged: connections, prepared statements, the
// workers' first fetches; then it analyzes db.
func (c *climber) warmUp(ctx context.Context, db *database, rate int) error {
	warm, n, err := c.r.step(ctx, c.sys, c.dbl, rate, &c.seq)
	if err != nil {
		return fmt.Errorf("%s warming up: %w", c.peer.name, err)
	}
	c.messages += n
	c.r.progress("  warm-up: %s", warm)
	// Statistics as autovacuum would have them a minute into a new
	// database's life. Without them every system runs the climb on the
	// plans it cached while its tables were empty (the generic plan of a
	// statement is fixed after its fifth run): sequential scans of tables
	// that grow by thousands of rows a second. ANALYZE replaces those plans
	// on every connection, for this module and the peers alike.
	if _, err := db.pool.Exec(ctx, "ANALYZE"); err != nil {
		return fmt.Errorf("%s: analyze after the warm-up: %w", c.peer.name, err)
	}
	return nil
}

// try offers rate up to e2eTries times: on a shared machine a step can
// fail on a neighbour's burst, so a rate fails when it fails every time.
func (c *climber) try(ctx context.Context, rate int) (stepResult, error) {
	var step stepResult
	for range e2eTries {
		// A failed step may leave calls behind: the next starts once
		// they are made, so that it does not inherit the backlog. A
		// system that cannot make them ends its climb there.
		if err := drain(ctx, c.dbl, c.pending); err != nil {
			c.r.progress("  the calls of the last step were not all made within %s: the climb ends", e2eDrainLimit)
			c.stuck = true
			return c.last, nil
		}
		var n int
		var err error
		step, n, err = c.r.step(ctx, c.sys, c.dbl, rate, &c.seq)
		c.pending, c.last = step.pending, step
		if err != nil {
			return step, fmt.Errorf("%s at %d/s: %w", c.peer.name, rate, err)
		}
		c.messages += n
		c.r.progress("  %s", step)
		if step.pass {
			break
		}
	}
	return step, nil
}

// ladder tries rates low to high until one fails.
func (c *climber) ladder(ctx context.Context, rates []int, res *ladderResult) error {
	for _, rate := range rates {
		step, err := c.try(ctx, rate)
		if err != nil {
			return err
		}
		if !step.pass {
			res.failed = step
			return nil
		}
		res.sustainable = step
	}
	return nil
}

// refine halves the gap between the last rate that held and the first
// that failed, twice: the ladder is coarse.
func (c *climber) refine(ctx context.Context, res *ladderResult) error {
	for range 2 {
		lo, hi := res.sustainable.rate, res.failed.rate
		if c.stuck || hi == 0 || hi-lo < max(lo/10, 5) {
			return nil
		}
		step, err := c.try(ctx, (lo+hi)/2)
		if err != nil {
			return err
		}
		if step.pass {
			res.sustainable = step
		} else {
			res.failed = step
		}
	}
	return nil
}

// step offers rate messages per second for Sizes.E2EStep, then waits for
// the calls, and judges the step.
func (r *runner) step(ctx context.Context, sys e2eSystem, dbl *doubles, rate int, seq *atomic.Int64) (stepResult, int, error) {
	// At least E2EMinMessages, so that a p99 is not just the worst call,
	// unless that takes more than three steps' time.
	total := int(float64(rate) * r.sizes.E2EStep.Seconds())
	total = max(total, min(r.sizes.E2EMinMessages, 3*total), 20)
	res := stepResult{rate: rate, maxBacklg: max(5, int(math.Ceil(float64(rate)*e2eLatencyLimit.Seconds())))}
	committed := make([]time.Time, total)
	keys := make([]int64, total)
	cpuStart := takeCPUSnapshot()
	start := time.Now()
	err := paced(ctx, rate, total, func(ctx context.Context, i int) error {
		key, err := sys.consume(ctx, seq.Add(1))
		if err != nil {
			return err
		}
		committed[i], keys[i] = time.Now(), key
		return nil
	})
	if err != nil {
		return res, total, err
	}
	end := time.Now()
	res.cpu = takeCPUSnapshot().since(cpuStart)
	res.achieved = float64(total) / end.Sub(start).Seconds()
	// Whatever was committed is called within the grace period, or counts
	// as never called.
	grace := 2*time.Second + r.sizes.E2EStep
	waitCtx, cancel := context.WithTimeout(ctx, grace)
	for _, k := range keys {
		if err := dbl.arrivals.waitFor(waitCtx, k); err != nil {
			break
		}
	}
	cancel()
	lat := make([]time.Duration, 0, total)
	for i, k := range keys {
		at, ok := dbl.arrivals.get(k)
		if !ok {
			res.pending = append(res.pending, k)
			res.missing++
			res.backlog++
			if i >= total/10 {
				lat = append(lat, grace)
			}
			continue
		}
		if at.After(end) {
			res.backlog++
		}
		if i >= total/10 { // the first tenth warms up
			lat = append(lat, max(at.Sub(committed[i]), 0))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.p50, res.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	res.pass = res.p99 <= e2eLatencyLimit && res.backlog <= res.maxBacklg && res.missing == 0 && res.achieved >= 0.95*float64(rate)
	return res, total, nil
}

func xactCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// e2ePeers are the systems compared end to end, this module first, then
// River (a dependency of the module itself), then those linked in with
// -tags benchpeers.
func e2ePeers() []e2ePeer {
	return append([]e2ePeer{outboxPeer(), riverPeer()}, linkedPeers()...)
}

// UnlinkedPeers lists the peers this binary was built without: Watermill
// and DBOS, unless it was built with -tags benchpeers as `make bench` does.
func UnlinkedPeers() []string { return unlinkedPeers() }

// Peers lists the systems the e2e scenario compares this module with.
func Peers() []string {
	var keys []string
	for _, p := range e2ePeers()[1:] {
		keys = append(keys, p.key)
	}
	return keys
}

// e2eTarget is the share of the commit limit (÷ commitsPerIntent) this
// module must sustain end to end.
const e2eTarget = 0.40

// e2eRows measures the commit limit, then every system's sustainable rate
// against a zero-latency provider and against a SlowDelay provider.
func (r *runner) e2eRows(ctx context.Context) ([]Row, error) {
	tps, how, err := r.commitLimit(ctx)
	if err != nil {
		return nil, fmt.Errorf("commit limit: %w", err)
	}
	r.progress("  %.0f commits/s", tps)
	perIntent := tps / commitsPerIntent
	var rows []Row
	for _, delay := range []time.Duration{0, r.sizes.SlowDelay} {
		workers := r.sizes.Workers
		bound, provider := perIntent, "zero-latency provider"
		baseline := fmt.Sprintf("commit limit ÷ %d commits/intent (%.0f commits/s: %s)", commitsPerIntent, tps, how)
		if delay > 0 {
			provider = fmt.Sprintf("%s provider", delay)
			if wb := float64(workers) / delay.Seconds(); wb < bound {
				bound = wb
				baseline = fmt.Sprintf("concurrency bound %d workers / %s (below the commit limit ÷ %d = %.0f/s)", workers, delay, commitsPerIntent, perIntent)
			}
		}
		rates := ladderRates(bound)
		var ours ladderResult
		oursRow := -1
		for i, peer := range e2ePeers() {
			if i > 0 && len(r.cfg.Peers) > 0 && !contains(r.cfg.Peers, peer.key) {
				continue
			}
			r.progress("end to end, %s: %s, %d workers, offered %v intents/s, %s a step", provider, peer.name, workers, rates, r.sizes.E2EStep)
			res, err := r.climb(ctx, peer, delay, rates)
			if err != nil {
				if i == 0 {
					return nil, err
				}
				// A peer that cannot run is left out, and the notes say why.
				r.progress("  %s left out: %v", peer.name, err)
				rows[oursRow].Note += fmt.Sprintf(" %s left out of this run: %v.", peer.name, err)
				continue
			}
			measure := fmt.Sprintf("End to end, sustainable, %s, %d workers: %s", provider, workers, peer.name)
			note := ladderNote(res) + " Setup: " + peer.setup + "."
			if i == 0 {
				ours = res
				if delay == 0 {
					r.sustainable = res.sustainable.rate
				}
				row := ratioRow(measure, "intents/s", res.figure(), baseline, bound, e2eTarget)
				row.Note = note
				rows = append(rows, row)
				oursRow = len(rows) - 1
				continue
			}
			row := Row{
				Measure: measure, Unit: "intents/s", Figure: res.figure(),
				Baseline: "outbox (this module), same run", BaselineFigure: ours.figure(),
				Target: "this module ahead (ratio ≤ 100%)", Met: ours.figure() >= res.figure(), Note: note,
			}
			if ours.figure() > 0 {
				row.Ratio = res.figure() / ours.figure()
			}
			rows = append(rows, row)
		}
		if missing := UnlinkedPeers(); len(missing) > 0 && len(r.cfg.Peers) == 0 {
			rows[oursRow].Note += fmt.Sprintf(" Not in this binary: %s (built without -tags benchpeers; make bench builds with it).", strings.Join(missing, ", "))
		}
	}
	return rows, nil
}

// ladderNote says at what latency the sustainable rate held, what failed
// next, and how many commits a message took.
func ladderNote(l ladderResult) string {
	var b strings.Builder
	writeClimb(&b, l)
	if l.commits > 0 {
		fmt.Fprintf(&b, " Per message: %.1f transactions (pg_stat_database xact_commit, read-only ones included), %.1f round trips from the consumer and %.1f from the workers (pgx tracer; idle polling included).",
			l.commits, l.consumerTrips, l.workerTrips)
	}
	return b.String()
}

// writeClimb says at what latency the sustainable rate held, and what
// failed next and why.
func writeClimb(b *strings.Builder, l ladderResult) {
	if l.sustainable.rate > 0 {
		fmt.Fprintf(b, "At %d/s: p50 %.1f ms, p99 %.1f ms, backlog %d; %s.", l.sustainable.rate, ms(l.sustainable.p50), ms(l.sustainable.p99), l.sustainable.backlog, l.sustainable.cpu)
	} else {
		b.WriteString("Even the lowest step failed.")
	}
	if l.failed.rate > 0 {
		f := l.failed
		var why []string
		if f.achieved < 0.95*float64(f.rate) {
			why = append(why, fmt.Sprintf("consumers committed only %.0f/s", f.achieved))
		}
		if f.p99 > e2eLatencyLimit {
			why = append(why, fmt.Sprintf("p99 %.0f ms", ms(f.p99)))
		}
		if f.backlog > f.maxBacklg || f.missing > 0 {
			why = append(why, fmt.Sprintf("backlog %d > %d (%d never called)", f.backlog, f.maxBacklg, f.missing))
		}
		fmt.Fprintf(b, " Failed at %d/s: %s; %s.", f.rate, strings.Join(why, ", "), f.cpu)
	} else {
		b.WriteString(" No step failed: the ladder's top is a floor.")
	}
}

// roundTrips counts the queries and batches sent on a pool's connections:
// each is one round trip to the server.
type roundTrips struct{ n atomic.Int64 }

func (t *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}

func (t *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
