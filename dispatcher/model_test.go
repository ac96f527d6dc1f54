package dispatcher

// TestModel is a property-based, state-machine test of the intent's
// lifecycle (DESIGN.md, "Invariants at the edges"). rapid draws a sequence of
// actions — record an intent, run one dispatch step with a chosen provider
// fault, crash a step after its claim or after its call (runtime.Goexit in a
// wrapping provider, no hook in production code), park a step as a zombie and
// release it later, rescue a dispatching intent, Recheck, operator Resend /
// Cancel / Resolve (single or bulk, from what the operator sees or from
// what it saw when it last looked, guarded by that version, and a race of
// two operators on one in_doubt intent), advance the clock past the key
// window, and the borders (DESIGN.md, "At the borders"): the next look-ups
// answered from the whole table (as recorded; refused 400, 401, 403, 404;
// 429 with and without Retry-After; 500), the next claim, load-and-claim,
// settlement or operator commit losing its answer after the server
// committed it (a testkit.LostAckProxy in front of the dispatcher's and
// the operator's pool), intents recorded after ones that failed or were
// cancelled, with and without a shared ordering key — and drives the
// real dispatcher (d.work, d.Recheck, no River workers) against a real
// database and the real Stripe and SendGrid doubles. After every action it
// checks, from the doubles' own records and the rows:
//
//   - never two effects for one intent;
//   - succeeded ⇒ exactly one effect (a charged PaymentIntent, an email);
//   - failed ⇒ no charge and no email; cancelled ⇒ no effect at all;
//   - a cancelled intent had no call under its current key that may have
//     reached the provider, and a pending or in_doubt one after such a
//     call says may_have_acted;
//   - out of attempts only with the whole budget used (a resend's too);
//   - no call to a keyed provider past its key window (less
//     Config.KeyWindowMargin) after an earlier call under the same key that
//     may have reached it;
//   - every event in outbox_events is an edge of intenttype.Transitions, by
//     the right actor, and the events chain (claims and same-key retries
//     are silent);
//   - an operator action that is refused changes nothing (and one that
//     lost its commit's answer is found applied, not refused);
//   - no intent uses more attempts than its budget (take-overs included);
//   - ordered intents (recorded after others, by name in a message or by
//     key, and with ordering keys): no call is made for an intent before
//     every intent it comes after succeeded, nor while an earlier intent
//     of its ordering key is unfinished or another is in flight; from the
//     doubles' records, a dependent's effect comes after its predecessors'
//     and a key's effects come in recorded order; a waiting intent always
//     has something unfinished to wait for (none is stranded), and none
//     waits for an intent that failed or was cancelled;
//   - a call the provider answered with success, by a worker that went on,
//     settles the intent succeeded (whatever bytes the answer held); "may
//     have acted" needs a call or a worker stopped around one;
//   - liveness, at the end: with the faults stopped and time moved on,
//     every intent is terminal or in_doubt, none pending or dispatching,
//     and no in_doubt one has a look-up due that Recheck leaves undone.
//
// Model assumptions: the operator is truthful (resolves by what the double
// shows, resends only what it does not have); a worker parked before its
// call sends it only if its claim still holds and less than CallTimeout of
// model time passed (a take-over needs River's RescueStuckJobsAfter, longer
// than CallTimeout, so the stalled worker's context has ended by then).
//
// Each border fixed in this package's history is caught by the default run
// when reintroduced (a refused look-up read as proof, an unguarded stale
// resend, a key stranded behind an intent recorded cancelled, a take-over
// past the budget, an action retried without its identity, a provider
// reference Postgres refuses, a lost claim answer not released); the log
// line "borders:" says how often the run met each input.
//
// The default run is small and fixed so it fits in `make test`: 35 cases of
// 30 to 60 actions from a fixed seed, printed (about 20 s). Longer runs:
//
//	go test -count=1 -run TestModel ./dispatcher/ -rapid.checks=200 -rapid.steps=60
//	go test -count=1 -run TestModel ./dispatcher/ -rapid.seed=0   # a random seed
//
// (or RAPID_CHECKS, RAPID_STEPS, RAPID_SEED in the environment). A failure
// prints the shrunk action list with names and the failing intent's rows,
// attempts, events, provider calls and the doubles' records.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// Defaults of the bounded run; see the comment above.
const (
	modelChecks = 35
	modelSteps  = 60
	modelSeed   = 20240611

	modelCallTimeout = 300 * time.Millisecond
	modelMaxAttempts = 4
	modelKeyMargin   = time.Hour
	modelWait        = 20 * time.Second
)

const (
	modelPayment  = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa", "confirm": true}`
	modelDeclined = `{"amount": 500, "currency": "usd", "customer": "cus_1", "payment_method": "pm_card_visa_chargeDeclined", "confirm": true}`
	modelEmail    = `{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Receipt", "text": "Thanks"}`
)

// modelDefaults sets rapid's flags to the bounded run unless the command
// line or the environment chose otherwise.
func modelDefaults(t *testing.T) {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]string{
		"rapid.checks":     strconv.Itoa(modelChecks),
		"rapid.steps":      strconv.Itoa(modelSteps),
		"rapid.seed":       strconv.Itoa(modelSeed),
		"rapid.nofailfile": "true",
	} {
		env := "RAPID_" + strings.ToUpper(strings.TrimPrefix(name, "rapid."))
		if _, ok := os.LookupEnv(env); ok || set[name] {
			continue
		}
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("model run: -rapid.checks=%s -rapid.steps=%s -rapid.seed=%s",
		flag.Lookup("rapid.checks").Value, flag.Lookup("rapid.steps").Value, flag.Lookup("rapid.seed").Value)
}

func flagInt(name string) int {
	n, err := strconv.Atoi(flag.Lookup(name).Value.String())
	if err != nil {
		panic(err)
	}
	return n
}

// faultChoice is one provider call's outcome, as the doubles show it.
type faultChoice struct {
	Name  string
	Fault fault.Fault
}

var modelFaults = []faultChoice{
	{"ok", fault.Fault{}},
	{"lost_response", fault.Fault{Kind: fault.LoseResponse}},
	{"500_before", fault.Fault{Kind: fault.ErrorBefore, Status: 500}},
	{"500_after", fault.Fault{Kind: fault.ErrorAfter, Status: 500}},
	{"503_before", fault.Fault{Kind: fault.ErrorBefore, Status: 503}},
	{"503_after", fault.Fault{Kind: fault.ErrorAfter, Status: 503}},
	{"429", fault.Fault{Kind: fault.RateLimit, RetryAfter: time.Millisecond}},
	{"delay_past_timeout", fault.Fault{Kind: fault.Delay, Delay: 5 * time.Second}},
	{"bad_reference", fault.Fault{Kind: fault.BadReference}},
}

// reaches reports whether a call that met f may have reached the provider
// (acted, or saved an answer under the key): everything but a refusal
// before acting that saves nothing.
func (f faultChoice) reaches() bool {
	switch f.Fault.Kind {
	case fault.RateLimit:
		return false
	case fault.ErrorBefore:
		return f.Fault.Status == 500
	}
	return true
}

// interrupt is what the wrapping provider does around the real call.
type interrupt string

const (
	runThrough  interrupt = ""
	crashBefore interrupt = "crash_before_call" // claim committed, no call
	crashAfter  interrupt = "crash_after_call"  // call made, no settle
	parkBefore  interrupt = "park_before_call"  // a zombie: resumes later
	parkAfter   interrupt = "park_after_call"   // a zombie with an outcome
)

// plan is what the next provider call does.
type plan struct {
	fault     faultChoice
	interrupt interrupt
	zombie    *zombie
}

// callRec is one Perform the dispatcher made.
type callRec struct {
	Intent    int64
	Provider  string
	Key       string
	KeyFirst  time.Time
	At        time.Time // model clock, when the call went (or would have gone) out
	Fault     string
	Interrupt interrupt
	Sent      bool // reached the real adapter
	Reaches   bool // may have reached the provider
	Outcome   string
	// Resumed: the worker was parked around the call, then let go on to
	// settle it.
	Resumed bool
}

type zombie struct {
	intent   int64
	mode     interrupt
	release  chan struct{}
	parked   chan struct{}
	done     chan struct{}
	parkedAt time.Time
	clock    *testkit.Clock
}

// modelProvider wraps a real adapter: it injects the planned fault into the
// double just before the call, logs the call, and crashes or parks the
// worker around it.
type modelProvider struct {
	providers.Provider
	m   *model
	inj *fault.Injector
}

func (p *modelProvider) Perform(ctx context.Context, req providers.Request) (providers.Result, error) {
	m := p.m
	pl := m.takePlan()
	rec := callRec{Intent: req.IntentID, Provider: p.Name(), Key: req.IdempotencyKey, KeyFirst: req.KeyFirstUsedAt,
		At: m.clock.Now(), Fault: pl.fault.Name, Interrupt: pl.interrupt}
	switch pl.interrupt {
	case crashBefore:
		m.logCall(rec)
		runtime.Goexit()
	case parkBefore:
		z := pl.zombie
		close(z.parked)
		<-z.release
		rec.At = m.clock.Now()
		if m.clock.Now().Sub(z.parkedAt) >= modelCallTimeout || !m.stillClaimed(req) {
			// The worker's call context has ended, whatever the wall clock
			// of this test says: as much model time passed as the call's
			// timeout, or its claim was taken over or settled, which in a
			// deployment takes River's RescueStuckJobsAfter, longer than
			// CallTimeout. (Without this, a stalled request sent after a
			// take-over is a duplicate no claim can prevent.)
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
		}
	}
	var orderKey string
	if ctx.Err() == nil {
		rec.Sent = true
		rec.Reaches = pl.fault.reaches()
		if pl.fault.Fault.Kind != fault.None {
			p.inj.Push(pl.fault.Fault)
		}
		orderKey = m.checkOrderAtCall(req.IntentID)
	}
	res, err := p.Provider.Perform(ctx, req)
	if rec.Sent {
		// The call is over, whatever the worker does next (park, crash).
		m.callDone(orderKey)
	}
	rec.Outcome = "ok"
	if err != nil {
		rec.Outcome = providers.Classify(err).Error()
	}
	m.logCall(rec)
	switch pl.interrupt {
	case crashAfter:
		runtime.Goexit()
	case parkAfter:
		close(pl.zombie.parked)
		<-pl.zombie.release
	}
	return res, err
}

// checkOrderAtCall records a violation if a call for intent id goes out
// before every intent it comes after succeeded, while an earlier intent of
// its ordering key is unfinished, or while another call of its key is in
// flight. It returns the intent's ordering key, counted in flight until
// callDone.
func (m *model) checkOrderAtCall(id int64) string {
	var key string
	var notSucceeded, earlierUnfinished int
	err := m.env.pool.QueryRow(context.Background(), `
SELECT coalesce(i.ordering_key, ''),
    (SELECT count(*) FROM outbox_intent_dependencies d JOIN outbox_intents p ON p.id = d.after_id
     WHERE d.intent_id = i.id AND p.state <> 'succeeded'),
    (SELECT count(*) FROM outbox_intents o
     WHERE o.ordering_key = i.ordering_key AND o.key_seq < i.key_seq AND o.state NOT IN ('succeeded', 'failed', 'cancelled'))
FROM outbox_intents i WHERE i.id = $1`, id).Scan(&key, &notSucceeded, &earlierUnfinished)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight == nil {
		m.inFlight = map[string]int{}
	}
	switch {
	case err != nil:
		m.violations = append(m.violations, fmt.Sprintf("intent %d: reading its order at a call: %v", id, err))
	case notSucceeded > 0:
		m.violations = append(m.violations, fmt.Sprintf("intent %d: called while %d intents it comes after had not succeeded", id, notSucceeded))
	case earlierUnfinished > 0:
		m.violations = append(m.violations, fmt.Sprintf("intent %d: called while %d earlier intents of ordering key %q were unfinished", id, earlierUnfinished, key))
	case key != "" && m.inFlight[key] > 0:
		m.violations = append(m.violations, fmt.Sprintf("intent %d: called while another call of ordering key %q was in flight", id, key))
	}
	if key != "" {
		m.inFlight[key]++
	}
	return key
}

func (m *model) callDone(key string) {
	if key == "" {
		return
	}
	m.mu.Lock()
	m.inFlight[key]--
	m.mu.Unlock()
}

// stillClaimed reports whether req's attempt still holds its intent.
func (m *model) stillClaimed(req providers.Request) bool {
	var claimed *int
	var state string
	err := m.env.pool.QueryRow(context.Background(), `SELECT state, claimed_attempt FROM outbox_intents WHERE id = $1`, req.IntentID).Scan(&state, &claimed)
	return err == nil && state == "dispatching" && claimed != nil && *claimed == req.Attempt
}

// modelEnv is shared by every case of one run: one database, two doubles.
type modelEnv struct {
	pool *pgxpool.Pool
	// proxied reaches the same database through proxy, which loses the
	// answers the lose_ack action arms it to: the dispatcher, the
	// recorder and the operator use it; the checks use pool.
	proxied  *pgxpool.Pool
	proxy    *testkit.LostAckProxy
	clock    *testkit.Clock
	stripe   *stripedouble.Server
	sendgrid *sendgriddouble.Server
	seq      atomic.Int64
	// ordered counts, over the run, what the ordered intents went
	// through: recorded waiting, released, cancelled by the dispatcher;
	// and the failed intents an operator sent again.
	ordered [4]int
	// borders counts, over the run, the border inputs met: stale operator
	// actions refused, look-ups answered with a fault, answers lost.
	borders struct{ staleRefused, lookupFaults, lostAcks int }
	// queue counts, over the run, the queue's claims (one at a time and in
	// batches), the intents they claimed, and the queued claims handed to
	// River's jobs (take-overs).
	queue struct{ claims, batches, claimed, handedOver int }
}

// modelView is an intent as the operator looked at it, some steps before
// acting: its version and what the doubles had then.
type modelView struct {
	State   intenttype.State
	Version intenttype.Version
	Effects effectSet
}

// modelLookup is one answer a look-up at the provider can get: found or
// absent as the double's records say, or a fault that proves nothing
// (DESIGN.md, invariant 12).
type modelLookup struct {
	Name  string
	Fault fault.Fault
}

var modelLookups = []modelLookup{
	{"as_recorded", fault.Fault{}},
	{"400_refused", fault.Fault{Kind: fault.ErrorBefore, Status: 400}},
	{"401_refused", fault.Fault{Kind: fault.ErrorBefore, Status: 401}},
	{"403_refused", fault.Fault{Kind: fault.ErrorBefore, Status: 403}},
	{"404_refused", fault.Fault{Kind: fault.ErrorBefore, Status: 404}},
	{"429_retry_after", fault.Fault{Kind: fault.RateLimit, RetryAfter: time.Second}},
	{"429_no_retry_after", fault.Fault{Kind: fault.RateLimit}},
	{"500", fault.Fault{Kind: fault.ErrorBefore, Status: 500}},
}

// modelLostAcks are the writes whose answer lose_ack can lose after the
// server committed them, by a text of their SQL (LostAckProxy).
var modelLostAcks = []struct{ Name, SQL string }{
	{"claim_queued", "AS claimed_id"}, // the common claim: twice the weight
	{"claim_queued", "AS claimed_id"},
	{"load_and_claim", "LEFT JOIN claimed c ON true"},
	{"claim", "SELECT attempt_count, provider_key, key_namespace, key_first_used_at FROM claimed"},
	{"settle", "claimed_attempt = NULL"},
	{"operator_commit", ""}, // the COMMIT of an operator's transaction: twice too
	{"operator_commit", ""},
}

type modelIntent struct {
	ID       int64
	Key      string
	Provider string
	Payload  string // "ok", "declined", "email"
	// After lists the intents it comes after; OrderingKey its stream.
	After       []int64
	OrderingKey string
}

// model is one case.
type model struct {
	env   *modelEnv
	clock *testkit.Clock
	d     *Dispatcher
	rec   *intents.Client
	ops   *audit.Store
	sgRec bool

	mu    sync.Mutex
	next  plan
	calls []callRec
	// inFlight counts the calls in flight per ordering key; violations
	// are what the provider wrapper saw at a call that order forbids.
	inFlight   map[string]int
	violations []string
	intents    []modelIntent
	zombies    []*zombie
	actions    []string
	// views are what the operator saw of intents when it last looked.
	views map[int64]modelView
}

func (m *model) takePlan() plan {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.next
	m.next = plan{}
	return p
}

func (m *model) setPlan(p plan) {
	m.mu.Lock()
	m.next = p
	m.mu.Unlock()
}

func (m *model) logCall(c callRec) {
	m.mu.Lock()
	m.calls = append(m.calls, c)
	m.mu.Unlock()
}

func (m *model) callsSnapshot() []callRec {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *model) note(t *rapid.T, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	m.actions = append(m.actions, s)
	t.Log("action: " + s)
}

func TestModel(t *testing.T) {
	modelDefaults(t)
	pool, _ := pgtest.NewDB(t)
	env := &modelEnv{pool: pool, clock: testkit.NewRunningClock()}
	env.proxied, env.proxy = testkit.LostAckPool(t, pool)
	var err error
	env.stripe, err = stripedouble.NewServer(stripedouble.Config{Now: env.clock.Now, Faults: fault.New(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.stripe.Close() })
	env.sendgrid, err = sendgriddouble.NewServer(sendgriddouble.Config{Now: env.clock.Now, Faults: fault.New(2)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.sendgrid.Close() })

	rapid.Check(t, func(rt *rapid.T) {
		m := env.newCase(rt)
		defer m.releaseAll()
		// A generated action list rather than rt.Repeat: Repeat's length
		// is geometric and often ends after a couple of actions, too
		// short to reach the interleavings that matter. The first action,
		// "nothing", is what shrinking replaces the irrelevant ones with.
		actions := []struct {
			name string
			fn   func(*rapid.T)
		}{
			{"nothing", func(*rapid.T) {}},
			{"record", m.actRecord},
			{"step", m.actStep},
			{"step", m.actStep},
			{"claim_batch", m.actClaimBatch},
			{"river_job", m.actRiverJob},
			{"sweep", m.actSweep},
			{"crash", m.actCrash},
			{"park", m.actPark},
			{"release", m.actRelease},
			{"rescue", m.actRescue},
			{"recheck", m.actRecheck},
			{"operator", m.actOperator},
			{"advance_clock", m.actAdvance},
			{"look", m.actLook},
			{"operator_race", m.actOperatorRace},
			{"operator_race", m.actOperatorRace},
			{"lookup_answer", m.actLookupAnswer},
			{"lose_ack", m.actLoseAck},
		}
		names := make([]int, len(actions))
		for i := range actions {
			names[i] = i
		}
		steps := flagInt("rapid.steps")
		n := rapid.IntRange(steps/2, steps).Draw(rt, "actions")
		for range n {
			a := actions[rapid.SampledFrom(names).Draw(rt, "action")]
			if a.name != "record" && len(m.intents) == 0 {
				continue
			}
			a.fn(rt)
			m.check(rt)
		}
		m.finish(rt)
	})
	if err := env.countOrdered(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("ordered intents: %d recorded waiting, %d released, %d cancelled by the dispatcher; %d failed intents sent again",
		env.ordered[0], env.ordered[1], env.ordered[2], env.ordered[3])
	t.Logf("borders: %d stale operator actions refused, %d look-ups answered with a fault, %d answers lost (%d by the proxy)",
		env.borders.staleRefused, env.borders.lookupFaults, env.borders.lostAcks, env.proxy.Lost())
	t.Logf("queue: %d claims (%d of batches) claimed %d intents; %d queued claims handed to River",
		env.queue.claims, env.queue.batches, env.queue.claimed, env.queue.handedOver)
	if !t.Failed() && (env.queue.batches == 0 || env.queue.handedOver == 0) {
		t.Errorf("the run never exercised a batch claim or a take-over of a queued claim: %+v", env.queue)
	}
	if !t.Failed() && (env.ordered[0] == 0 || env.ordered[1] == 0 || env.ordered[2] == 0) {
		t.Errorf("the run never exercised one of waiting, release and cancellation by the dispatcher: %v", env.ordered)
	}
}

// countOrdered adds the case's ordered intents to env.ordered, before the
// next case truncates them.
func (env *modelEnv) countOrdered(ctx context.Context) error {
	var counts [4]int
	if err := env.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE from_state IS NULL AND to_state = 'waiting'),
		count(*) FILTER (WHERE from_state = 'waiting' AND to_state = 'pending'),
		count(*) FILTER (WHERE actor = 'dispatcher' AND from_state = 'waiting' AND to_state = 'cancelled'),
		count(*) FILTER (WHERE from_state = 'failed' AND to_state = 'pending')
		FROM outbox_intent_events`).Scan(&counts[0], &counts[1], &counts[2], &counts[3]); err != nil {
		return err
	}
	for i, n := range counts {
		env.ordered[i] += n
	}
	return nil
}

func (env *modelEnv) newCase(t *rapid.T) *model {
	ctx := context.Background()
	if err := env.countOrdered(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := env.pool.Exec(ctx, `TRUNCATE outbox_intents, outbox_processed_messages, outbox_ordering_keys, river_job CASCADE`); err != nil {
		t.Fatal(err)
	}
	env.stripe.LookupFaults().Clear()
	env.sendgrid.LookupFaults().Clear()
	env.proxy.Arm(0)
	env.proxy.ArmStatement("", 0)
	m := &model{env: env, clock: env.clock, views: map[int64]modelView{}}
	m.sgRec = rapid.Bool().Draw(t, "sendgrid_reconciles")
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: env.stripe.URL()})
	if err != nil {
		t.Fatal(err)
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: env.sendgrid.URL(), Reconcile: m.sgRec, Now: env.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := providers.NewRegistry(&modelProvider{Provider: sp, m: m, inj: env.stripe.Faults()},
		&modelProvider{Provider: gp, m: m, inj: env.sendgrid.Faults()})
	if err != nil {
		t.Fatal(err)
	}
	m.rec, err = intents.NewClient(env.pool, &intents.Config{Providers: reg})
	if err != nil {
		t.Fatal(err)
	}
	if m.ops, err = audit.New(env.proxied, reg); err != nil {
		t.Fatal(err)
	}
	m.d, err = New(env.proxied, &Config{
		Providers:       reg,
		CallTimeout:     modelCallTimeout,
		MaxAttempts:     modelMaxAttempts,
		KeyWindowMargin: modelKeyMargin,
		RecheckDelay:    time.Millisecond,
		MaxRechecks:     3,
		Now:             env.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.d.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	m.note(t, "case: sendgrid reconciles=%t", m.sgRec)
	return m
}

// finish releases every zombie, waits for it, and checks once more; then,
// with the faults stopped, lets time move on and the dispatcher work, and
// checks liveness (DESIGN.md, invariant 15): every intent ends terminal,
// or in_doubt with no look-up left due (one is scheduled, or it plainly
// waits for an operator); none is left pending or dispatching, and no
// waiting one is stranded (checkOrder).
func (m *model) finish(t *rapid.T) {
	for len(m.zombies) > 0 {
		m.releaseZombie(t, 0)
	}
	m.check(t)
	m.env.stripe.LookupFaults().Clear()
	m.env.sendgrid.LookupFaults().Clear()
	m.env.proxy.Arm(0)
	m.env.proxy.ArmStatement("", 0)
	for round := 0; ; round++ {
		m.clock.Advance(2 * time.Hour) // past every re-check delay, the absence settle time
		var ids []int64
		rows, err := m.env.pool.Query(context.Background(), `SELECT id FROM outbox_intents WHERE state IN ('pending', 'dispatching') ORDER BY id`)
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), modelWait)
		_, err = m.d.Recheck(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Recheck: %v", err)
		}
		if len(ids) == 0 {
			break
		}
		if round == 2*modelMaxAttempts+4 {
			t.Fatalf("liveness: intents %v are still pending or dispatching after %d rounds without faults\n%s", ids, round, m.report(ids[0]))
		}
		for _, id := range ids {
			m.step(t, "drain", id, faultChoice{Name: "ok"}, runThrough)
		}
		m.check(t)
	}
	var id int64
	// Due since before the last round's Recheck (2 h of model time ago):
	// a look-up nothing runs. (One Recheck asked again, paced or rate
	// limited, is due again only later.)
	err := m.env.pool.QueryRow(context.Background(), `SELECT id FROM outbox_intents WHERE state = 'in_doubt' AND recheck_at <= $1 ORDER BY id LIMIT 1`, m.clock.Now().Add(-time.Hour)).Scan(&id)
	if err == nil {
		t.Fatalf("liveness: intent %d is in_doubt with a look-up due that Recheck did not run\n%s", id, m.report(id))
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	m.check(t)
}

// releaseAll lets every parked worker go, after a failure, so none is left
// blocked; it waits for them, bounded.
func (m *model) releaseAll() {
	for _, z := range m.zombies {
		close(z.release)
		select {
		case <-z.done:
		case <-time.After(modelWait):
		}
	}
	m.zombies = nil
}

// ---- actions ----

// actRecord records a message of one intent or of two, the second after
// the first by name; an intent may also come after one recorded before
// (by key), and may have an ordering key.
func (m *model) actRecord(t *rapid.T) {
	type drawn struct {
		in intents.Intent
		mi modelIntent
	}
	draw := func(name string) drawn {
		kind := rapid.SampledFrom([]string{"payment", "declined_payment", "email"}).Draw(t, "intent")
		k, payload, prov := stripeprovider.KindPaymentIntent, modelPayment, "stripe"
		switch kind {
		case "declined_payment":
			payload = modelDeclined
		case "email":
			k, payload, prov = sendgridprovider.KindEmail, modelEmail, "sendgrid"
		}
		d := drawn{in: intents.Intent{Kind: k, Name: name, Payload: json.RawMessage(payload)}, mi: modelIntent{Provider: prov, Payload: kind}}
		d.in.OrderingKey = rapid.SampledFrom([]string{"", "", "k1", "k2"}).Draw(t, "ordering_key")
		d.mi.OrderingKey = d.in.OrderingKey
		if len(m.intents) > 0 && rapid.IntRange(0, 2).Draw(t, "after_earlier") == 0 {
			// Often one that already finished without succeeding: the
			// intent is then recorded cancelled.
			candidates := m.intents
			if done := m.finishedUnsucceeded(t); len(done) > 0 && rapid.Bool().Draw(t, "after_a_failed_one") {
				candidates = done
			}
			p := candidates[rapid.IntRange(0, len(candidates)-1).Draw(t, "after")]
			d.in.After = append(d.in.After, intents.After{Key: p.Key})
			d.mi.After = append(d.mi.After, p.ID)
		}
		return d
	}
	var msg []drawn
	chained := false
	if rapid.IntRange(0, 2).Draw(t, "pair") == 0 {
		first, second := draw("first"), draw("second")
		// The second comes after the first, or only shares its message
		// and its ordering key (an intent of a key recorded cancelled
		// must not strand the next of its key), or neither.
		switch rapid.SampledFrom([]string{"chained", "same_key", "independent"}).Draw(t, "pair_shape") {
		case "chained":
			chained = true
			second.in.After = append(second.in.After, intents.After{Name: "first"})
		case "same_key":
			key := first.in.OrderingKey
			if key == "" {
				key = rapid.SampledFrom([]string{"k1", "k2"}).Draw(t, "shared_key")
			}
			first.in.OrderingKey, first.mi.OrderingKey = key, key
			second.in.OrderingKey, second.mi.OrderingKey = key, key
		}
		msg = []drawn{first, second}
	} else {
		msg = []drawn{draw("")}
	}
	res, err := m.rec.Consume(context.Background(), intents.Message{Consumer: "model", ID: fmt.Sprintf("m-%d-%d", os.Getpid(), m.env.seq.Add(1))},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			for _, d := range msg {
				if err := rec.Record(d.in); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	var desc []string
	for i, d := range msg {
		d.mi.ID, d.mi.Key = res.Intents[i].ID, res.Intents[i].Key
		if i == 1 && chained {
			d.mi.After = append(d.mi.After, res.Intents[0].ID)
		}
		m.intents = append(m.intents, d.mi)
		desc = append(desc, fmt.Sprintf("%s → intent %d (after %v, ordering key %q): %s", d.mi.Payload, d.mi.ID, d.mi.After, d.mi.OrderingKey, m.state(t, d.mi.ID)))
	}
	m.note(t, "record %s", strings.Join(desc, "; "))
}

// finishedUnsucceeded are the intents that failed or were cancelled.
func (m *model) finishedUnsucceeded(t *rapid.T) []modelIntent {
	var out []modelIntent
	for _, in := range m.intents {
		if st := m.state(t, in.ID); st == intenttype.StateFailed || st == intenttype.StateCancelled {
			out = append(out, in)
		}
	}
	return out
}

// pick draws an intent in one of states (any state when none given); 0
// when there is none.
func (m *model) pick(t *rapid.T, label string, states ...intenttype.State) int64 {
	var ids []int64
	for _, in := range m.intents {
		if len(states) == 0 || slices.Contains(states, m.state(t, in.ID)) {
			ids = append(ids, in.ID)
		}
	}
	if len(ids) == 0 {
		return 0
	}
	return rapid.SampledFrom(ids).Draw(t, label)
}

func (m *model) state(t *rapid.T, id int64) intenttype.State {
	var s intenttype.State
	if err := m.env.pool.QueryRow(context.Background(), `SELECT state FROM outbox_intents WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatalf("state of %d: %v", id, err)
	}
	return s
}

func (m *model) drawFault(t *rapid.T) faultChoice {
	return rapid.SampledFrom(modelFaults).Draw(t, "fault")
}

// run runs one dispatch step for intent id, on the path outboxd run takes
// for it, in a goroutine of its own, and waits for it: it returns the
// intent it worked (the queue claims its oldest queued intent, which may be
// another), whether it crashed (runtime.Goexit) and its error.
//
//   - A queued pending intent: the queue claims one (d.claimQueued, as its
//     fetch loop does) and performs it (d.performClaimed).
//   - A queued claim (dispatching): its worker is gone, or parked; the
//     sweep hands every queued claim to River, as it does once they are
//     older than RescueStuckJobsAfter, and River's job takes it over.
//   - Anything else is River's: its dispatch job runs (riverWork).
func (m *model) run(t *rapid.T, id int64) (ran int64, crashed bool, err error) {
	done := make(chan struct{})
	returned := false
	queued, state := m.queued(t, id)
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), modelWait)
		defer cancel()
		ran, err = m.dispatch(ctx, id, queued, state, func(int64) {})
		returned = true
	}()
	select {
	case <-done:
	case <-time.After(modelWait):
		t.Fatalf("a dispatch step on intent %d did not finish within %s", id, modelWait)
	}
	m.setPlan(plan{})
	return ran, !returned, err
}

// dispatch is run's step, in the calling goroutine; claimed is told which
// intent the queue claimed, before its call.
func (m *model) dispatch(ctx context.Context, id int64, queued bool, state intenttype.State, claimed func(int64)) (int64, error) {
	switch {
	case queued && state == intenttype.StatePending:
		batch, err := m.d.claimQueued(ctx, 1)
		if err != nil {
			_ = m.d.releaseUnsent(ctx, nil, err) // as the fetch loop does
		}
		m.env.queue.claims++
		m.env.queue.claimed += len(batch.Claimed)
		if err != nil || len(batch.Claimed) == 0 {
			return 0, err
		}
		claimed(batch.Claimed[0].Row.ID)
		m.d.performClaimed(ctx, batch.Claimed[0])
		return batch.Claimed[0].Row.ID, nil
	case queued:
		n, err := m.d.store.HandOverStale(ctx, m.clock.Now().Add(time.Microsecond), 1000)
		if err != nil {
			return id, err
		}
		m.env.queue.handedOver += n
	}
	return id, m.riverWork(ctx, id)
}

// riverWork is what River does with intent id's dispatch job: it fetches
// the live job (running), runs the worker's Work on it, and then, as its
// completer does, completes the job if it is still running (the
// settlement may have deleted it, or replaced it with a later attempt's),
// or makes it retryable on an error. A crash (runtime.Goexit) leaves it
// running, for River's rescuer. With no live job (a step the model takes
// without River's schedule), Work runs with none.
func (m *model) riverWork(ctx context.Context, id int64) error {
	var jobID int64
	err := m.env.pool.QueryRow(ctx, `UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now()
		WHERE id = (SELECT id FROM river_job WHERE kind = 'outbox_dispatch' AND (args->>'intent_id')::bigint = $1
		            AND state IN ('available', 'scheduled', 'retryable', 'running') ORDER BY id LIMIT 1)
		RETURNING id`, id).Scan(&jobID)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return &modelError{err}
	}
	workErr := m.d.work(ctx, jobID, id)
	if jobID != 0 {
		next := "completed"
		if workErr != nil {
			next = "retryable"
		}
		if _, err := m.env.pool.Exec(ctx, `UPDATE river_job SET state = $2::river_job_state,
			finalized_at = CASE WHEN $2::text = 'completed' THEN now() END
			WHERE id = $1 AND state = 'running'`, jobID, next); err != nil {
			return &modelError{err}
		}
	}
	return workErr
}

// modelError is a failure of the model's own emulation (not of the code
// under test): the case stops.
type modelError struct{ err error }

func (e *modelError) Error() string { return "model: " + e.err.Error() }

// queued reads whether the queue holds intent id, and its state.
func (m *model) queued(t *rapid.T, id int64) (bool, intenttype.State) {
	var q bool
	var s intenttype.State
	if err := m.env.pool.QueryRow(context.Background(), `SELECT queued, state FROM outbox_intents WHERE id = $1`, id).Scan(&q, &s); err != nil {
		t.Fatalf("intent %d: %v", id, err)
	}
	return q, s
}

func (m *model) step(t *rapid.T, what string, id int64, f faultChoice, in interrupt) {
	before := m.state(t, id)
	m.setPlan(plan{fault: f, interrupt: in})
	ran, crashed, err := m.run(t, id)
	if me := (*modelError)(nil); errors.As(err, &me) {
		t.Fatal(me)
	}
	res := fmt.Sprintf("%s → %s", before, m.state(t, id))
	if ran != id {
		res = "the queue claimed nothing"
		if ran != 0 {
			res = fmt.Sprintf("the queue claimed intent %d: → %s", ran, m.state(t, ran))
		}
	}
	if crashed {
		res += " (crashed)"
	} else if err != nil {
		res += fmt.Sprintf(" (work: %v)", err)
	}
	m.note(t, "%s intent %d fault=%s %s: %s", what, id, f.Name, in, res)
}

// actClaimBatch is the queue claiming a batch of its oldest intents at
// once, as a fetch loop does, and their workers each calling with a
// fault of its own, crashing around the call or not; or the process
// crashing once the claim committed, before any call.
func (m *model) actClaimBatch(t *rapid.T) {
	n := rapid.IntRange(2, 4).Draw(t, "batch")
	dies := rapid.IntRange(0, 5).Draw(t, "process_dies_after_claim") == 0
	plans := make([]plan, n)
	for i := range plans {
		plans[i] = plan{fault: m.drawFault(t), interrupt: rapid.SampledFrom([]interrupt{runThrough, runThrough, crashBefore, crashAfter}).Draw(t, "interrupt")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), modelWait)
	defer cancel()
	batch, err := m.d.claimQueued(ctx, n)
	if err != nil {
		_ = m.d.releaseUnsent(ctx, nil, err) // as the fetch loop does
	}
	m.env.queue.claims++
	m.env.queue.batches++
	m.env.queue.claimed += len(batch.Claimed)
	if dies {
		// Its workers stopped before their calls, as a crash before the
		// call leaves them.
		for _, l := range batch.Claimed {
			m.logCall(callRec{Intent: l.Row.ID, Provider: l.Row.Provider, Key: l.Claim.ProviderKey, KeyFirst: l.Claim.KeyFirstUsedAt,
				At: m.clock.Now(), Interrupt: crashBefore})
		}
	}
	if err != nil || dies {
		m.note(t, "the queue claims %d: %d claimed, %d handed to River (%v)%s", n, len(batch.Claimed), batch.HandedOver, err,
			map[bool]string{true: "; the process dies before any call", false: ""}[dies])
		return
	}
	var desc []string
	for i, l := range batch.Claimed {
		m.setPlan(plans[i])
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.d.performClaimed(ctx, l)
		}()
		<-done
		m.setPlan(plan{})
		desc = append(desc, fmt.Sprintf("intent %d fault=%s %s → %s", l.Row.ID, plans[i].fault.Name, plans[i].interrupt, m.state(t, l.Row.ID)))
	}
	m.note(t, "the queue claims %d: %s; %d handed to River", n, strings.Join(desc, "; "), batch.HandedOver)
}

// actRiverJob is River fetching one of its live dispatch jobs, whatever the
// intent is doing meanwhile (queued, held by a parked worker, in_doubt),
// and running it.
func (m *model) actRiverJob(t *rapid.T) {
	rows, err := m.env.pool.Query(context.Background(), `SELECT DISTINCT (args->>'intent_id')::bigint FROM river_job
		WHERE kind = 'outbox_dispatch' AND state IN ('available', 'scheduled', 'retryable') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 {
		return
	}
	id := rapid.SampledFrom(ids).Draw(t, "job_of")
	before := m.state(t, id)
	m.setPlan(plan{fault: m.drawFault(t)})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), modelWait)
		defer cancel()
		done <- m.riverWork(ctx, id)
	}()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(modelWait):
		t.Fatalf("River's job of intent %d did not finish within %s", id, modelWait)
	}
	m.setPlan(plan{})
	if me := (*modelError)(nil); errors.As(werr, &me) {
		t.Fatal(me)
	}
	m.note(t, "River runs the job of intent %d: %s → %s (work: %v)", id, before, m.state(t, id), werr)
}

// actSweep is the leader's sweep (Sweep): it hands the queue's claims older
// than RescueStuckJobsAfter, by the model's clock, to River jobs, and gives
// a job to River's intents that lost theirs.
func (m *model) actSweep(t *rapid.T) {
	ctx, cancel := context.WithTimeout(context.Background(), modelWait)
	defer cancel()
	n, err := m.d.Sweep(ctx)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	m.env.queue.handedOver += n
	m.note(t, "sweep: %d given to River", n)
}

func (m *model) actStep(t *rapid.T) {
	id := m.pick(t, "intent", intenttype.StatePending, intenttype.StateDispatching)
	if id == 0 {
		return
	}
	m.step(t, "step", id, m.drawFault(t), runThrough)
}

func (m *model) actRescue(t *rapid.T) {
	id := m.pick(t, "intent", intenttype.StateDispatching)
	if id == 0 {
		return
	}
	m.step(t, "rescue", id, m.drawFault(t), runThrough)
}

func (m *model) actCrash(t *rapid.T) {
	id := m.pick(t, "intent", intenttype.StatePending, intenttype.StateDispatching)
	if id == 0 {
		return
	}
	in := rapid.SampledFrom([]interrupt{crashBefore, crashAfter}).Draw(t, "crash")
	m.step(t, "step", id, m.drawFault(t), in)
}

// actPark starts a step whose worker stops in the provider call (before or
// after it) and stays there, as a worker that hangs and is rescued while
// still alive; actRelease lets it go on.
func (m *model) actPark(t *rapid.T) {
	if len(m.zombies) >= 2 {
		return
	}
	id := m.pick(t, "intent", intenttype.StatePending, intenttype.StateDispatching)
	if id == 0 {
		return
	}
	f := m.drawFault(t)
	in := rapid.SampledFrom([]interrupt{parkBefore, parkAfter}).Draw(t, "park")
	z := &zombie{intent: id, mode: in, release: make(chan struct{}), parked: make(chan struct{}), done: make(chan struct{}), clock: m.clock}
	before := m.state(t, id)
	m.setPlan(plan{fault: f, interrupt: in, zombie: z})
	queued, state := m.queued(t, id)
	var err error
	go func() {
		defer close(z.done)
		ctx, cancel := context.WithTimeout(context.Background(), modelWait+time.Minute)
		defer cancel()
		// The queue may claim another intent: the zombie holds that one.
		_, err = m.dispatch(ctx, id, queued, state, func(claimed int64) { z.intent = claimed })
	}()
	select {
	case <-z.parked:
		z.parkedAt = m.clock.Now()
		m.zombies = append(m.zombies, z)
		m.note(t, "park intent %d fault=%s %s: %s → %s (worker parked on intent %d)", id, f.Name, in, before, m.state(t, id), z.intent)
	case <-z.done:
		// The step made no call (settled without one, or lost its claim).
		m.setPlan(plan{})
		m.note(t, "park intent %d fault=%s %s: %s → %s (no call made; work: %v)", id, f.Name, in, before, m.state(t, id), err)
	case <-time.After(modelWait):
		t.Fatalf("parked step on intent %d neither parked nor finished within %s", id, modelWait)
	}
}

func (m *model) actRelease(t *rapid.T) {
	if len(m.zombies) == 0 {
		return
	}
	i := rapid.IntRange(0, len(m.zombies)-1).Draw(t, "zombie")
	m.releaseZombie(t, i)
}

func (m *model) releaseZombie(t *rapid.T, i int) {
	z := m.zombies[i]
	m.zombies = slices.Delete(m.zombies, i, i+1)
	before := m.state(t, z.intent)
	close(z.release)
	select {
	case <-z.done:
	case <-time.After(modelWait):
		t.Fatalf("released worker on intent %d did not finish within %s", z.intent, modelWait)
	}
	m.mu.Lock()
	for i := len(m.calls) - 1; i >= 0; i-- {
		if c := &m.calls[i]; c.Intent == z.intent && c.Interrupt == z.mode && !c.Resumed {
			c.Resumed = true
			break
		}
	}
	m.mu.Unlock()
	m.note(t, "release %s worker of intent %d: %s → %s", z.mode, z.intent, before, m.state(t, z.intent))
}

func (m *model) actRecheck(t *rapid.T) {
	ctx, cancel := context.WithTimeout(context.Background(), modelWait)
	defer cancel()
	n, err := m.d.Recheck(ctx)
	if err != nil {
		t.Fatalf("Recheck: %v", err)
	}
	m.note(t, "recheck: %d settled", n)
}

func (m *model) actAdvance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Minute, 6 * time.Hour, 22*time.Hour + 30*time.Minute, 23*time.Hour + 30*time.Minute, 25 * time.Hour}).Draw(t, "advance")
	m.clock.Advance(d)
	m.note(t, "advance clock by %s", d)
}

// actLook is an operator looking at an intent: what it sees (its state,
// its version, the doubles' records) is what a later stale action acts on.
func (m *model) actLook(t *rapid.T) {
	id := m.pick(t, "intent")
	if id == 0 {
		return
	}
	d, err := m.ops.Get(context.Background(), strconv.FormatInt(id, 10))
	if err != nil {
		// A read on a connection the proxy cut: the operator reloads.
		m.note(t, "look at intent %d failed: %v", id, err)
		return
	}
	m.views[id] = modelView{State: d.Intent.State, Version: d.Intent.Version(), Effects: m.effects(id)}
	m.note(t, "look at intent %d: %s at %s, %s", id, d.Intent.State, d.Intent.Version(), m.effects(id))
}

// actLookupAnswer decides how the next look-up at each provider is
// answered: as the double's records say, or refused, rate limited or
// failed, which proves nothing.
func (m *model) actLookupAnswer(t *rapid.T) {
	la := rapid.SampledFrom(modelLookups).Draw(t, "lookup")
	if la.Fault.Kind != fault.None {
		m.env.stripe.LookupFaults().Push(la.Fault)
		m.env.sendgrid.LookupFaults().Push(la.Fault)
		m.env.borders.lookupFaults++
	}
	m.note(t, "the next look-ups answer %s", la.Name)
}

// actLoseAck makes the next write of a kind lose its answer after the
// server committed it: a claim, a settlement or an operator's commit.
func (m *model) actLoseAck(t *rapid.T) {
	la := rapid.SampledFrom(modelLostAcks).Draw(t, "lost_ack")
	if la.SQL == "" {
		m.env.proxy.Arm(1)
	} else {
		m.env.proxy.ArmStatement(la.SQL, 1)
	}
	m.env.borders.lostAcks++
	m.note(t, "the next %s loses its answer", la.Name)
}

// actOperatorRace is two operators on one in_doubt intent: Ann looks at
// it; meanwhile Bob resends it and the dispatcher performs it again (with a
// drawn fault, so it may come back in_doubt: the state Ann saw, a later
// version); then Ann acts on what she saw, alone or in bulk. Her action
// must be refused unless nothing changed (DESIGN.md, invariant 11).
func (m *model) actOperatorRace(t *rapid.T) {
	// One the provider does not have (a send refused with a 5xx before
	// acting, say), so Bob resends it.
	var absent []int64
	for _, in := range m.intents {
		if m.state(t, in.ID) == intenttype.StateInDoubt && !m.effects(in.ID).any() {
			absent = append(absent, in.ID)
		}
	}
	if len(absent) == 0 {
		return
	}
	id := rapid.SampledFrom(absent).Draw(t, "intent")
	m.views[id] = modelView{}
	d, err := m.ops.Get(context.Background(), strconv.FormatInt(id, 10))
	if err != nil {
		m.note(t, "race: Ann's look at intent %d failed: %v", id, err)
		return
	}
	m.views[id] = modelView{State: d.Intent.State, Version: d.Intent.Version(), Effects: m.effects(id)}
	m.note(t, "race: Ann looks at intent %d: %s at %s, %s", id, d.Intent.State, d.Intent.Version(), m.effects(id))
	if !m.effects(id).any() {
		if _, err := m.ops.Resend(context.Background(), id, "bob", "checked: absent"); err != nil {
			m.note(t, "race: Bob's resend of intent %d: %v", id, err)
		} else {
			m.step(t, "race: dispatch", id, m.drawFault(t), runThrough)
		}
	}
	m.actOperatorOn(t, id, true)
}

// actOperator acts as a truthful operator would decide, at any moment:
// resolve by what the provider shows, resend only what the provider does not
// have, cancel anything. Refusals are expected; they must change nothing.
func (m *model) actOperator(t *rapid.T) {
	// Mostly an intent from a list an operator works through (in_doubt,
	// failed), sometimes any: the refusals matter too.
	id := m.pick(t, "intent", intenttype.StateInDoubt, intenttype.StateFailed)
	if id == 0 || rapid.IntRange(0, 2).Draw(t, "any_intent") == 0 {
		id = m.pick(t, "intent")
	}
	if id == 0 {
		return
	}
	m.actOperatorOn(t, id, false)
}

// actOperatorOn is actOperator on intent id; with fromView, from what the
// operator saw when it last looked.
func (m *model) actOperatorOn(t *rapid.T, id int64, fromView bool) {
	action := rapid.SampledFrom([]string{"resend", "cancel", "resolve"}).Draw(t, "action")
	ctx := context.Background()
	before := m.snapshot(t, id)
	eff := m.effects(id)
	// The operator acts on what it sees now, or on what it saw when it
	// last looked (some steps ago), guarded by that version, alone or in
	// bulk (DESIGN.md, invariant 11).
	view, stale := m.views[id]
	stale = stale && (fromView || rapid.Bool().Draw(t, "stale_view"))
	bulk := rapid.IntRange(0, 3).Draw(t, "bulk") == 0
	a := audit.Action{IntentID: id, Actor: "model"}
	desc := action
	if stale {
		eff = view.Effects
		a.IfVersion = &view.Version
		desc += fmt.Sprintf(" from the view at %s (%s)", view.Version, view.State)
	}
	switch action {
	case "resend":
		// What the provider has: anything, for an intent that may have
		// acted; a charge or an email, for one that failed (a declined
		// PaymentIntent moved no money: the customer's new card goes).
		has := eff.any()
		if before.State == intenttype.StateFailed {
			has = eff.charged()
		}
		if has {
			m.note(t, "operator %s on intent %d: skipped, the provider has it", desc, id)
			return
		}
		a.Kind, a.Reason = audit.ActionResend, "checked at the provider: absent"
	case "cancel":
		a.Kind, a.Reason = audit.ActionCancel, "no longer wanted"
	case "resolve":
		a.Kind, a.As, a.Reason = audit.ActionResolve, intenttype.StateFailed, "looked at the provider"
		if eff.charged() {
			a.As = intenttype.StateSucceeded
		}
		desc = strings.Replace(desc, "resolve", "resolve as "+string(a.As), 1)
	}
	var err error
	if bulk {
		seen := intenttype.Version{KeyGeneration: before.KeyGeneration, AttemptCount: before.AttemptCount}
		if stale {
			seen = view.Version
		}
		var res audit.BulkResult
		res, err = m.ops.ActAll(ctx, audit.Filter{States: intenttype.States}, audit.BulkAction{Kind: a.Kind, As: a.As, Actor: a.Actor, Reason: a.Reason,
			Seen: map[int64]intenttype.Version{id: seen}}, false, nil)
		desc = "bulk " + desc
		if err == nil && res.Done == 0 {
			err = &audit.TransitionError{IntentID: id, Action: string(a.Kind)} // refused (or not listed)
		}
		if err == nil && res.Errors > 0 {
			err = fmt.Errorf("bulk: %+v", res.Items)
		}
	} else {
		_, err = m.ops.Act(ctx, a)
	}
	var te *audit.TransitionError
	if stale && errors.As(err, &te) {
		m.env.borders.staleRefused++
	}
	switch {
	case err == nil:
		m.note(t, "operator %s on intent %d: %s → %s", desc, id, before.State, m.state(t, id))
	case errors.As(err, &te):
		if after := m.snapshot(t, id); after != before {
			t.Fatalf("operator %s on intent %d was refused (%v) but changed it: %+v → %+v", desc, id, err, before, after)
		}
		m.note(t, "operator %s on intent %d: refused (%s)", desc, id, before.State)
	default:
		t.Fatalf("operator %s on intent %d: %v", desc, id, err)
	}
}

type rowSnapshot struct {
	State         intenttype.State
	AttemptCount  int
	BudgetFrom    int
	KeyGeneration int
	MayHaveActed  bool
	UpdatedAt     time.Time
	Events        int
	Jobs          int
}

func (m *model) snapshot(t *rapid.T, id int64) rowSnapshot {
	var s rowSnapshot
	err := m.env.pool.QueryRow(context.Background(), `
SELECT state, attempt_count, budget_from, key_generation, may_have_acted, updated_at,
       (SELECT count(*) FROM outbox_intent_events WHERE intent_id = i.id),
       (SELECT count(*) FROM river_job WHERE args @> jsonb_build_object('intent_id', i.id))
FROM outbox_intents i WHERE id = $1`, id).
		Scan(&s.State, &s.AttemptCount, &s.BudgetFrom, &s.KeyGeneration, &s.MayHaveActed, &s.UpdatedAt, &s.Events, &s.Jobs)
	if err != nil {
		t.Fatalf("snapshot %d: %v", id, err)
	}
	return s
}

// ---- the doubles' records ----

type effectSet struct {
	PaymentIntents []string // id:status
	Charged        int      // PaymentIntents that succeeded
	Emails         []string
	// SameKey counts PaymentIntents made under a key another of them was
	// made under (one key generation, two objects).
	SameKey int
}

func (e effectSet) total() int    { return len(e.PaymentIntents) + len(e.Emails) }
func (e effectSet) any() bool     { return e.total() > 0 }
func (e effectSet) charged() bool { return e.Charged+len(e.Emails) > 0 }
func (e effectSet) String() string {
	return fmt.Sprintf("payment intents %v, emails %v", e.PaymentIntents, e.Emails)
}

func (m *model) effects(id int64) effectSet {
	var e effectSet
	want := strconv.FormatInt(id, 10)
	keys := map[string]bool{}
	for _, pi := range m.env.stripe.PaymentIntents() {
		if pi.Metadata[providers.MetadataIntentID] == want {
			if keys[pi.IdempotencyKey] {
				e.SameKey++
			}
			keys[pi.IdempotencyKey] = true
			e.PaymentIntents = append(e.PaymentIntents, pi.ID+":"+pi.Status)
			if pi.Status == "succeeded" {
				e.Charged++
			}
		}
	}
	for _, em := range m.env.sendgrid.Emails() {
		if em.CustomArgs[providers.MetadataIntentID] == want {
			e.Emails = append(e.Emails, em.MessageID)
		}
	}
	return e
}

// ---- invariants ----

type modelRow struct {
	ID           int64
	Provider     string
	State        intenttype.State
	MayHaveActed bool
	ProviderKey  string
	Generation   int
	AttemptsUsed int
}

type eventRow struct {
	Intent int64
	Actor  string
	From   string
	To     string
	Reason string
}

func (m *model) check(t *rapid.T) {
	ctx := context.Background()
	// Every pending or dispatching intent belongs to the queue or has a
	// live River job (invariant 15: nothing waits forever).
	var orphan int64
	err := m.env.pool.QueryRow(ctx, `SELECT id FROM outbox_intents i
		WHERE NOT queued AND state IN ('pending', 'dispatching') AND NOT EXISTS (
			SELECT 1 FROM river_job j WHERE j.kind = 'outbox_dispatch' AND (j.args->>'intent_id')::bigint = i.id
			  AND j.state IN ('available', 'scheduled', 'retryable', 'running'))
		ORDER BY id LIMIT 1`).Scan(&orphan)
	if err == nil {
		t.Fatalf("intent %d: %s without the queue or a live River job\n%s", orphan, m.state(t, orphan), m.report(orphan))
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	// ... never both: a River job never works a queued intent.
	err = m.env.pool.QueryRow(ctx, `SELECT id FROM outbox_intents i
		WHERE queued AND EXISTS (
			SELECT 1 FROM river_job j WHERE j.kind = 'outbox_dispatch' AND (j.args->>'intent_id')::bigint = i.id
			  AND j.state IN ('available', 'scheduled', 'retryable', 'running'))
		ORDER BY id LIMIT 1`).Scan(&orphan)
	if err == nil {
		t.Fatalf("intent %d: queued, and a River job is live for it\n%s", orphan, m.report(orphan))
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	rows, err := m.env.pool.Query(ctx, `SELECT id, provider, state, may_have_acted, coalesce(provider_key, ''), key_generation, attempt_count - budget_from FROM outbox_intents ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	intentRows, err := pgx.CollectRows(rows, pgx.RowToStructByPos[modelRow])
	if err != nil {
		t.Fatal(err)
	}
	rows, err = m.env.pool.Query(ctx, `SELECT intent_id, actor, coalesce(from_state, ''), to_state, coalesce(reason, '') FROM outbox_intent_events ORDER BY at, id`)
	if err != nil {
		t.Fatal(err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[eventRow])
	if err != nil {
		t.Fatal(err)
	}
	calls := m.callsSnapshot()
	for _, r := range intentRows {
		if msg := m.checkIntent(r, events, calls); msg != "" {
			t.Fatalf("intent %d: %s\n%s", r.ID, msg, m.report(r.ID))
		}
	}
	m.mu.Lock()
	violations := slices.Clone(m.violations)
	m.mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("order violated at a call: %s\n%s", violations[0], m.report(0))
	}
	if id, msg := m.checkOrder(t); msg != "" {
		t.Fatalf("intent %d: %s\n%s", id, msg, m.report(id))
	}
}

// checkOrder checks the order from the doubles' records and the rows: a
// dependent's first effect comes after its predecessors' (each succeeded),
// a key's effects come in its recorded order, and every waiting intent has
// something unfinished to wait for and nothing failed or cancelled.
func (m *model) checkOrder(t *rapid.T) (int64, string) {
	first := map[int64]time.Time{}
	for _, pi := range m.env.stripe.PaymentIntents() {
		if id, err := strconv.ParseInt(pi.Metadata[providers.MetadataIntentID], 10, 64); err == nil {
			if at, ok := first[id]; !ok || pi.Created.Before(at) {
				first[id] = pi.Created
			}
		}
	}
	for _, em := range m.env.sendgrid.Emails() {
		if id, err := strconv.ParseInt(em.CustomArgs[providers.MetadataIntentID], 10, 64); err == nil {
			if at, ok := first[id]; !ok || em.AcceptedAt.Before(at) {
				first[id] = em.AcceptedAt
			}
		}
	}
	for _, in := range m.intents {
		at, performed := first[in.ID]
		if !performed {
			continue
		}
		for _, p := range in.After {
			pAt, ok := first[p]
			if st := m.state(t, p); st != intenttype.StateSucceeded || !ok || pAt.After(at) {
				return in.ID, fmt.Sprintf("performed at %s, but intent %d it comes after is %s with its effect at %v", at, p, st, pAt)
			}
		}
	}
	rows, err := m.env.pool.Query(context.Background(), `SELECT id, ordering_key FROM outbox_intents WHERE ordering_key IS NOT NULL ORDER BY ordering_key, key_seq`)
	if err != nil {
		t.Fatal(err)
	}
	type keyed struct {
		ID  int64
		Key string
	}
	byKey, err := pgx.CollectRows(rows, pgx.RowToStructByPos[keyed])
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]time.Time{}
	for _, k := range byKey {
		at, performed := first[k.ID]
		if !performed {
			continue
		}
		if at.Before(last[k.Key]) {
			return k.ID, fmt.Sprintf("performed at %s, before an intent recorded earlier on ordering key %q (at %s)", at, k.Key, last[k.Key])
		}
		last[k.Key] = at
	}
	var id int64
	var why string
	err = m.env.pool.QueryRow(context.Background(), `
SELECT i.id, CASE
    WHEN EXISTS (SELECT 1 FROM outbox_intent_dependencies d JOIN outbox_intents p ON p.id = d.after_id
                 WHERE d.intent_id = i.id AND p.state IN ('failed', 'cancelled'))
        THEN 'waiting for an intent that failed or was cancelled'
    ELSE 'waiting, but nothing it waits for is unfinished: stranded' END
FROM outbox_intents i
WHERE i.state = 'waiting' AND (
    EXISTS (SELECT 1 FROM outbox_intent_dependencies d JOIN outbox_intents p ON p.id = d.after_id
            WHERE d.intent_id = i.id AND p.state IN ('failed', 'cancelled'))
    OR (NOT EXISTS (SELECT 1 FROM outbox_intent_dependencies d JOIN outbox_intents p ON p.id = d.after_id
                    WHERE d.intent_id = i.id AND p.state <> 'succeeded')
        AND NOT EXISTS (SELECT 1 FROM outbox_intents o
                        WHERE o.ordering_key = i.ordering_key AND o.key_seq < i.key_seq
                          AND o.state NOT IN ('succeeded', 'failed', 'cancelled'))))
ORDER BY i.id LIMIT 1`).Scan(&id, &why)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return id, why
}

// silent reports whether an intent may move from a to b without an event:
// a claim, a same-key retry, a take-over.
func silent(a, b string) bool {
	ps := func(s string) bool { return s == "pending" || s == "dispatching" }
	return a == b || (ps(a) && ps(b))
}

func (m *model) checkIntent(r modelRow, events []eventRow, calls []callRec) string {
	eff := m.effects(r.ID)
	// Two objects are two effects, but for a payment an operator resent
	// after it failed: a declined PaymentIntent moved no money, and the
	// resend's is made under a new key.
	if eff.Charged > 1 || eff.SameKey > 0 || len(eff.Emails) > 1 || (len(eff.PaymentIntents) > 1 && !m.resentAfterFailing(r.ID)) {
		return "two effects at the provider for one intent: " + eff.String()
	}
	switch r.State {
	case intenttype.StateSucceeded:
		if eff.total() != 1 || !eff.charged() {
			return "succeeded, but the provider does not show exactly one effect: " + eff.String()
		}
	case intenttype.StateFailed:
		if eff.charged() {
			return "failed, but the provider performed it: " + eff.String()
		}
	case intenttype.StateCancelled:
		// A payment an operator resent after it failed keeps its declined
		// PaymentIntent, which moved no money: nothing more may exist.
		if eff.charged() || (eff.any() && !m.resentAfterFailing(r.ID)) {
			return "cancelled, but the provider has it: " + eff.String()
		}
		for _, c := range calls {
			if c.Intent == r.ID && c.Reaches && c.Key == r.ProviderKey {
				return fmt.Sprintf("cancelled after a call under its current key that may have reached the provider (%s at %s)", c.Fault, c.At.Format(time.RFC3339))
			}
		}
	}

	// A known outcome is never discarded (invariants 7 and 14): a call the
	// provider answered with success, by a worker that went on, settles
	// the intent succeeded, whatever bytes the answer held.
	if r.State != intenttype.StateSucceeded {
		for _, c := range calls {
			if c.Intent == r.ID && c.Sent && (c.Interrupt == runThrough || c.Resumed) && c.Outcome == "ok" {
				return fmt.Sprintf("%s, though a call (%s) was answered with success and its worker went on", r.State, c.Fault)
			}
		}
	}

	// A worker that knows it did not call says so (invariant 15): "may have
	// acted" needs a call, or a worker that stopped around one (crashed or
	// parked), never only a claim whose answer was lost.
	if r.MayHaveActed && !slices.ContainsFunc(calls, func(c callRec) bool { return c.Intent == r.ID }) && !m.parked(r.ID) {
		return "may_have_acted, though no call was made for it and no worker stopped around one"
	}

	// Every call spends an attempt, and none is made past the budget
	// (invariant 14), a take-over's included.
	if r.AttemptsUsed > modelMaxAttempts {
		return fmt.Sprintf("%d attempts used of a budget of %d", r.AttemptsUsed, modelMaxAttempts)
	}

	// "May have acted" is sticky (invariant 3): once settled after a call
	// under the current key that may have reached the provider, the row
	// says so.
	if r.State == intenttype.StatePending || r.State == intenttype.StateInDoubt {
		for _, c := range calls {
			if c.Intent == r.ID && c.Reaches && c.Key == r.ProviderKey && !r.MayHaveActed {
				return fmt.Sprintf("%s with may_have_acted false after a call under its current key that may have reached the provider (%s %s)", r.State, c.Fault, c.Interrupt)
			}
		}
	}

	// Past the key window, never blind (invariant 8).
	if r.Provider == "stripe" {
		window := stripeprovider.DefaultKeyWindow - modelKeyMargin
		for i, c := range calls {
			if c.Intent != r.ID || !c.Sent {
				continue
			}
			for _, e := range calls[:i] {
				if e.Intent == r.ID && e.Key == c.Key && e.Reaches && c.At.Sub(c.KeyFirst) >= window {
					return fmt.Sprintf("call %d under key %q went out %s after the key was first used, past the window (%s), after an earlier call that may have reached Stripe (%s)",
						i, c.Key, c.At.Sub(c.KeyFirst).Round(time.Minute), window, e.Fault)
				}
			}
		}
	}

	// Events: every change an edge of the diagram, chained.
	prev := ""
	n := 0
	exhausted := false // the latest budget ended in "attempts exhausted"
	for _, e := range events {
		if e.Intent != r.ID {
			continue
		}
		n++
		if n == 1 {
			if e.From != "" || (e.To != "pending" && e.To != "waiting" && e.To != "cancelled") {
				return fmt.Sprintf("first event is %q → %q, want recorded as pending, waiting or cancelled", e.From, e.To)
			}
			prev = e.To
			continue
		}
		by := intenttype.ActorDispatcher
		if strings.HasPrefix(e.Actor, "operator") {
			by = intenttype.ActorOperator
		}
		if !intenttype.CanTransition(intenttype.State(e.From), intenttype.State(e.To), by) {
			return fmt.Sprintf("event %s → %s by %s (%q) is not in intenttype.Transitions", e.From, e.To, e.Actor, e.Reason)
		}
		if !silent(prev, e.From) {
			return fmt.Sprintf("event %s → %s (%q) does not follow the previous state %s", e.From, e.To, e.Reason, prev)
		}
		switch {
		case e.Reason == "attempts exhausted":
			exhausted = true
		case by == intenttype.ActorOperator && e.To == string(intenttype.StatePending):
			exhausted = false // a resend grants a budget of its own
		}
		prev = e.To
	}
	if n == 0 {
		return "no events"
	}
	// An operator's resend is performed (invariant 5): the budget it
	// granted is not spent by attempts made before it. The row's budget is
	// the latest resend's, so only an exhaustion after it is checked.
	if exhausted && r.AttemptsUsed < modelMaxAttempts {
		return fmt.Sprintf("failed as out of attempts with %d of %d used", r.AttemptsUsed, modelMaxAttempts)
	}
	if !silent(prev, string(r.State)) {
		return fmt.Sprintf("state %s, but the last event left it %s", r.State, prev)
	}
	return ""
}

// resentAfterFailing reports whether an operator sent intent id again after
// it failed.
func (m *model) resentAfterFailing(id int64) bool {
	var n int
	if err := m.env.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events
		WHERE intent_id = $1 AND from_state = 'failed' AND to_state = 'pending'`, id).Scan(&n); err != nil {
		return false
	}
	return n > 0
}

// parked reports whether a zombie worker holds intent id.
func (m *model) parked(id int64) bool {
	return slices.ContainsFunc(m.zombies, func(z *zombie) bool { return z.intent == id })
}

// report renders everything about one intent, for a failure.
func (m *model) report(id int64) string {
	ctx := context.Background()
	var b strings.Builder
	b.WriteString("actions:\n")
	for i, a := range m.actions {
		fmt.Fprintf(&b, "  %2d. %s\n", i, a)
	}
	var row string
	_ = m.env.pool.QueryRow(ctx, `SELECT row_to_json(i)::text FROM (SELECT id, kind, state, attempt_count, budget_from, may_have_acted, claimed_attempt,
        provider_key, key_generation, key_first_used_at, recheck_count, recheck_at, provider_ref, last_error FROM outbox_intents WHERE id = $1) i`, id).Scan(&row)
	fmt.Fprintf(&b, "intent %d: %s\n", id, row)
	if rows, err := m.env.pool.Query(ctx, `SELECT row_to_json(a)::text FROM (SELECT attempt, started_at, finished_at, outcome, http_status, provider_ref, replayed, error FROM outbox_intent_attempts WHERE intent_id = $1 ORDER BY attempt) a`, id); err == nil {
		list, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		b.WriteString("attempts:\n")
		for _, a := range list {
			b.WriteString("  " + a + "\n")
		}
	}
	if rows, err := m.env.pool.Query(ctx, `SELECT actor || ': ' || coalesce(from_state, '-') || ' → ' || to_state || ' (' || coalesce(reason, '') || ')' FROM outbox_intent_events WHERE intent_id = $1 ORDER BY at, id`, id); err == nil {
		list, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		b.WriteString("events:\n")
		for _, e := range list {
			b.WriteString("  " + e + "\n")
		}
	}
	b.WriteString("provider calls:\n")
	for _, c := range m.callsSnapshot() {
		if c.Intent == id {
			fmt.Fprintf(&b, "  key=%s first_used=%s at=%s fault=%s %s sent=%t may_reach=%t outcome=%s\n",
				c.Key, c.KeyFirst.Format(time.RFC3339), c.At.Format(time.RFC3339), c.Fault, c.Interrupt, c.Sent, c.Reaches, c.Outcome)
		}
	}
	fmt.Fprintf(&b, "provider records: %s\n", m.effects(id))
	return b.String()
}
