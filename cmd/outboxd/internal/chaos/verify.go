package chaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// stoppedDuringCall is how the dispatcher words an attempt it found open (a
// write-ahead without an outcome: the dispatcher, or its connection, died
// during the call).
const stoppedDuringCall = "stopped during the call"

// Reasons an in_doubt intent was ambiguous, as counted in
// Report.InDoubtWhy. Each is backed by evidence independent of the
// dispatcher's own bookkeeping.
const (
	// WhyServerError: the attempt got a 5xx, and the double's wire log
	// shows it answered that 5xx for this intent.
	WhyServerError = "5xx from the provider"
	// WhyLostResponse: the attempt lost its connection or timed out, and
	// the wire log shows the double dropped the connection without an
	// answer for this intent.
	WhyLostResponse = "response lost"
	// WhySlowResponse: the attempt timed out, and the wire log shows the
	// double answered this intent only after the call timeout, or that the
	// client had gone by then.
	WhySlowResponse = "response slower than the call timeout"
	// WhyStreamReset: the attempt lost its answer, and the wire log shows
	// the double reset the request's HTTP/2 stream after acting.
	WhyStreamReset = "stream reset after the provider acted"
	// WhyDiedDuringCall: the attempt's write-ahead was found open, and a
	// dispatcher process died (SIGKILL, or an exit of its own) between the
	// attempt's start and the moment it was found open, or a database
	// backend was terminated in that time or up to DeadConnectionMargin
	// before it.
	WhyDiedDuringCall = "dispatcher or its connection died during the call"
)

// DeadConnectionMargin is how long before an attempt a terminated backend
// may still cut it: a connection terminated while idle in a pool is found
// dead only when next used, and pgxpool checks (pings) only connections
// idle for longer than a second before handing them out.
const DeadConnectionMargin = 2 * time.Second

// evidence is what the providers' side recorded, read after the run.
type evidence struct {
	stripe       stripedouble.Stats
	sendgrid     sendgriddouble.Stats
	wire         map[string]map[int64][]WireRecord // by provider ("stripe", "sendgrid"), then intent id
	unattributed int                               // wire records without an intent id
	stripeObjs   []StripeObject                    // every PaymentIntent at the Stripe double, the other deployment's included
	ourStripe    map[string]int                    // this deployment's PaymentIntents by intent id
	refunds      []StripeRefund                    // every refund at the Stripe double
	ourRefunds   map[string]int                    // refunds by intent id
	ourCaptures  map[string]int                    // captured PaymentIntents by capture intent id
	ourCancels   map[string]int                    // cancelled PaymentIntents by cancel intent id (filled by checkDependents)
	storm        StormStats
	resets       ResetStats
	deaths       []time.Time // dispatcher processes reaped after SIGKILL or an exit of their own, sorted
	terminations []time.Time // backend termination rounds that terminated something, sorted
}

// collect reads the doubles' records over HTTP.
func collect(ctx context.Context, a DoublesAddrs, deaths, terminations []time.Time) (*evidence, error) {
	ev := &evidence{wire: map[string]map[int64][]WireRecord{}}
	if err := getJSON(ctx, a.StripeURL+"/_double/stats", &ev.stripe); err != nil {
		return nil, err
	}
	if err := getJSON(ctx, a.SendGridControlURL+"/_double/stats", &ev.sendgrid); err != nil {
		return nil, err
	}
	objs, err := stripeObjects(ctx, a)
	if err != nil {
		return nil, err
	}
	ev.stripeObjs, ev.ourStripe = objs, ourEffects(objs)
	if err := getJSON(ctx, a.StripeURL+RefundsPath, &ev.refunds); err != nil {
		return nil, err
	}
	ev.ourRefunds, ev.ourCaptures = map[string]int{}, map[string]int{}
	for _, o := range objs {
		if id := o.Metadata[stripeprovider.CaptureIntentIDMetadataKey]; id != "" && !o.foreign() && o.AmountReceived > 0 {
			ev.ourCaptures[id]++
		}
	}
	for _, rf := range ev.refunds {
		ev.ourRefunds[rf.Metadata[stripeprovider.IntentIDMetadataKey]]++
	}
	if err := getJSON(ctx, a.StripeURL+StormPath, &ev.storm); err != nil {
		return nil, err
	}
	if err := getJSON(ctx, a.SendGridControlURL+ResetsPath, &ev.resets); err != nil {
		return nil, err
	}
	for provider, url := range map[string]string{"stripe": a.StripeURL, "sendgrid": a.SendGridControlURL} {
		var recs []WireRecord
		if err := getJSON(ctx, url+WirePath, &recs); err != nil {
			return nil, err
		}
		byIntent := map[int64][]WireRecord{}
		for _, r := range recs {
			if r.Foreign {
				continue
			}
			if r.IntentID == 0 {
				ev.unattributed++
				continue
			}
			byIntent[r.IntentID] = append(byIntent[r.IntentID], r)
		}
		ev.wire[provider] = byIntent
	}
	ev.deaths, ev.terminations = slices.Clone(deaths), slices.Clone(terminations)
	slices.SortFunc(ev.deaths, time.Time.Compare)
	slices.SortFunc(ev.terminations, time.Time.Compare)
	return ev, nil
}

func (ev *evidence) effects(kind string, id int64) int {
	key := strconv.FormatInt(id, 10)
	switch kind {
	case stripeprovider.KindPaymentIntent:
		return ev.ourStripe[key]
	case stripeprovider.KindRefund:
		return ev.ourRefunds[key]
	case stripeprovider.KindCapture:
		return ev.ourCaptures[key]
	case stripeprovider.KindCancel:
		return ev.ourCancels[key]
	case sendgridprovider.KindEmail:
		return ev.sendgrid.EffectsByIntent[key]
	}
	return 0
}

// wireFor is the wire log of the provider that performs kind, by intent id.
func (ev *evidence) wireFor(kind string) map[int64][]WireRecord {
	provider, _, _ := strings.Cut(kind, ".")
	return ev.wire[provider]
}

// diedDuring reports whether a dispatcher process died in [from, to], or a
// backend was terminated in [from-DeadConnectionMargin, to].
func (ev *evidence) diedDuring(from, to time.Time) bool {
	return anyIn(ev.deaths, from, to) || anyIn(ev.terminations, from.Add(-DeadConnectionMargin), to)
}

// anyIn reports whether sorted holds a time in [from, to].
func anyIn(sorted []time.Time, from, to time.Time) bool {
	i, _ := slices.BinarySearchFunc(sorted, from, time.Time.Compare)
	return i < len(sorted) && !sorted[i].After(to)
}

type intentRow struct {
	ID           int64
	Kind         string
	State        string
	Consumer     string
	MessageID    string
	AttemptCount int
	LastError    string
	MayHaveActed bool
	ProviderRef  string
	RecheckDue   bool
	// LastActor and LastTo are the intent's latest event's.
	LastActor string
	LastTo    string
}

// byOperator reports whether an operator, not a dispatcher, made the
// intent's latest change of state.
func (in intentRow) byOperator() bool { return strings.HasPrefix(in.LastActor, "operator:") }

type attemptRow struct {
	IntentID   int64
	Attempt    int
	StartedAt  time.Time
	FinishedAt *time.Time
	Outcome    string
	HTTPStatus int
	Error      string
}

// verify fills the report's outcome from the database and the evidence, and
// lists every violation in rep.Problems.
func verify(ctx context.Context, cfg Config, pool *pgxpool.Pool, ev *evidence, rep *Report) error {
	rows, err := pool.Query(ctx, intentsSQL)
	if err != nil {
		return fmt.Errorf("chaos: read intents: %w", err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[intentRow])
	if err != nil {
		return fmt.Errorf("chaos: read intents: %w", err)
	}
	rep.Intents = len(all)
	v := &verdict{cfg: cfg, ev: ev, rep: rep, foreign: ev.foreignIDs()}
	v.countProviderSide()
	if want := intentsRecorded(rep.Messages); rep.Intents != want {
		v.problem("%d intents recorded for %d messages, want %d", rep.Intents, rep.Messages, want)
	}
	// checkDependents also counts the cancels' effects, which judging the
	// intents reads.
	if v.dependents, err = checkDependents(ctx, pool, ev, rep, v.problem); err != nil {
		return err
	}
	inDoubt, byID, known := v.judgeIntents(all)
	if err := pool.QueryRow(ctx, inDoubtEventsSQL).Scan(&rep.InDoubtSettledByLookUp, &rep.InDoubtFoundByLookUp, &rep.ProvenAbsent); err != nil {
		return fmt.Errorf("chaos: count look-ups: %w", err)
	}
	v.checkEffectsKnown(known)
	v.checkEffectsAttributed()
	if err := explainInDoubt(ctx, cfg, pool, ev, inDoubt, byID, rep, v.problem); err != nil {
		return err
	}
	return v.checkConsistency(ctx, pool)
}

// verdict is what verify judges by (the configuration, the evidence, the
// other deployment's PaymentIntents, the dependent intents) and the report
// it fills.
type verdict struct {
	cfg        Config
	ev         *evidence
	rep        *Report
	foreign    map[string]bool // the other deployment's PaymentIntents, by id
	dependents map[int64]dependentRow
}

func (v *verdict) problem(format string, args ...any) {
	v.rep.Problems = append(v.rep.Problems, fmt.Sprintf(format, args...))
}

// foreignIDs are the ids of the other deployment's PaymentIntents at the
// Stripe double.
func (ev *evidence) foreignIDs() map[string]bool {
	foreign := map[string]bool{}
	for _, o := range ev.stripeObjs {
		if o.foreign() {
			foreign[o.ID] = true
		}
	}
	return foreign
}

// countProviderSide fills the report's counts of what the doubles did.
func (v *verdict) countProviderSide() {
	rep, ev := v.rep, v.ev
	rep.ForeignAtDouble = len(v.foreign)
	rep.Payments = len(ev.stripeObjs) - len(v.foreign)
	rep.Emails = ev.sendgrid.Emails
	rep.Replays = ev.stripe.Replays
	rep.StormAnswered = ev.storm.Answered
	rep.StreamResets, rep.SendGridHTTP2 = ev.resets.Resets, ev.resets.HTTP2
	rep.FaultsInjected = map[string]int{}
	for k, n := range ev.stripe.Faults {
		rep.FaultsInjected["stripe "+string(k)] = n
	}
	for k, n := range ev.sendgrid.Faults {
		rep.FaultsInjected["sendgrid "+string(k)] = n
	}
	rep.InDoubtWhy = map[string]int{}
}

// judgeIntents judges every intent by its state and its effects, and
// returns the in_doubt ones, every intent by id, and the ids of the intents
// of each kind the doubles perform.
func (v *verdict) judgeIntents(all []intentRow) (inDoubt []int64, byID map[int64]intentRow, known map[string]map[string]bool) {
	known = map[string]map[string]bool{stripeprovider.KindPaymentIntent: {}, stripeprovider.KindRefund: {}, stripeprovider.KindCapture: {}, stripeprovider.KindCancel: {}, sendgridprovider.KindEmail: {}}
	byID = map[int64]intentRow{}
	stripeIntents, stripeInDoubt := 0, 0
	for _, in := range all {
		byID[in.ID] = in
		if known[in.Kind] != nil {
			known[in.Kind][strconv.FormatInt(in.ID, 10)] = true
		}
		if in.State == "in_doubt" {
			inDoubt = append(inDoubt, in.ID)
		}
		if in.Kind == stripeprovider.KindPaymentIntent {
			stripeIntents++
			if in.State == "in_doubt" {
				stripeInDoubt++
			}
		}
		v.judge(in, v.ev.effects(in.Kind, in.ID))
	}
	if stripeIntents > 0 {
		v.rep.StripeInDoubtShare = float64(stripeInDoubt) / float64(stripeIntents)
	}
	return inDoubt, byID, known
}

// judge judges one intent that took effect n times at its double.
func (v *verdict) judge(in intentRow, n int) {
	if n > 1 {
		v.rep.DuplicateEffects++
		v.problem("intent %d (%s) took effect %d times at the double", in.ID, in.Kind, n)
	}
	if in.MayHaveActed && in.AttemptCount >= v.cfg.MaxAttempts {
		v.rep.BudgetSpentMayHaveActed++
	}
	switch in.State {
	case "succeeded":
		v.succeeded(in, n)
	case "in_doubt":
		v.inDoubt(in, n)
	case "failed":
		v.failed(in, n)
	case "cancelled":
		v.cancelled(in, n)
	case "waiting":
		v.waiting(in, n)
	case "pending", "dispatching":
		v.rep.Lost++
		v.problem("intent %d (%s) still %s after the drain", in.ID, in.Kind, in.State)
	default:
		v.problem("intent %d (%s) ended %s, which nobody asked for", in.ID, in.Kind, in.State)
	}
}

func (v *verdict) succeeded(in intentRow, n int) {
	v.rep.Succeeded++
	if in.byOperator() {
		v.rep.ResolvedSucceeded++
	}
	if n != 1 {
		v.problem("intent %d (%s) succeeded with %d effects at the double, want exactly 1", in.ID, in.Kind, n)
	}
	if v.foreign[in.ProviderRef] {
		v.rep.AdoptedForeign++
		v.problem("intent %d (%s) succeeded with another deployment's PaymentIntent %s", in.ID, in.Kind, in.ProviderRef)
	}
}

// inDoubt counts an in_doubt intent; explainInDoubt judges it.
func (v *verdict) inDoubt(in intentRow, n int) {
	v.rep.InDoubt++
	if n == 1 {
		v.rep.InDoubtActed++
	}
	if in.RecheckDue {
		v.rep.InDoubtRecheckScheduled++
	} else {
		v.rep.InDoubtForOperator++
	}
}

func (v *verdict) failed(in intentRow, n int) {
	v.rep.Failed++
	switch {
	case in.byOperator():
		v.rep.ResolvedFailed++
		if n != 0 {
			v.problem("intent %d (%s) was resolved failed by the operator, yet has %d effects at the double", in.ID, in.Kind, n)
		}
	case n != 0 || in.MayHaveActed:
		v.problem("intent %d (%s) failed after %d attempts though it may have acted (%d effects at the double): %s",
			in.ID, in.Kind, in.AttemptCount, n, in.LastError)
	case in.AttemptCount >= v.cfg.MaxAttempts:
		v.rep.FailedBudget++
	}
}

func (v *verdict) cancelled(in intentRow, n int) {
	f, isDependent := v.dependents[in.ID]
	switch {
	case in.byOperator():
		v.rep.Cancelled++
	case isDependent && f.PredecessorFailed:
		v.rep.CancelledAfterPayment++
	default:
		v.problem("intent %d (%s) ended cancelled, which no operator asked for and no failed predecessor explains", in.ID, in.Kind)
	}
	if n != 0 {
		v.problem("intent %d (%s) was cancelled, yet has %d effects at the double", in.ID, in.Kind, n)
	}
}

func (v *verdict) waiting(in intentRow, n int) {
	if f, isDependent := v.dependents[in.ID]; isDependent && f.PredecessorOpen {
		v.rep.WaitingForPayment++
	} else {
		v.rep.Lost++
		v.problem("intent %d (%s) still waiting after the drain, though nothing it comes after is in_doubt", in.ID, in.Kind)
	}
	if n != 0 {
		v.problem("intent %d (%s) is waiting, yet has %d effects at the double", in.ID, in.Kind, n)
	}
}

// checkEffectsKnown checks that every effect at a double is for an intent
// of its kind in the database.
func (v *verdict) checkEffectsKnown(known map[string]map[string]bool) {
	ev := v.ev
	for kind, byIntent := range map[string]map[string]int{stripeprovider.KindPaymentIntent: ev.ourStripe, stripeprovider.KindRefund: ev.ourRefunds, stripeprovider.KindCapture: ev.ourCaptures, stripeprovider.KindCancel: ev.ourCancels, sendgridprovider.KindEmail: ev.sendgrid.EffectsByIntent} {
		for id, n := range byIntent {
			if !known[kind][id] {
				v.problem("the %s double performed %d effects for intent %q, which is not a %s intent in the database", kind, n, id, kind)
			}
		}
	}
}

// checkEffectsAttributed checks that every effect at a double carries an
// intent id. Requests cut mid-body by a killed dispatcher carry no readable
// intent id; they cannot have acted, which the totals check.
func (v *verdict) checkEffectsAttributed() {
	ev := v.ev
	v.rep.CutRequests = ev.unattributed
	for name, c := range map[string]struct {
		total    int
		byIntent map[string]int
	}{"Stripe": {v.rep.Payments, ev.ourStripe}, "Stripe refund": {len(ev.refunds), ev.ourRefunds}, "SendGrid": {ev.sendgrid.Emails, ev.sendgrid.EffectsByIntent}} {
		sum := 0
		for id, n := range c.byIntent {
			if id != "" {
				sum += n
			}
		}
		if sum != c.total {
			v.problem("the %s double performed %d effects, of which only %d carry an intent id", name, c.total, sum)
		}
	}
}

// checkConsistency checks the consumers' transactions: every message has
// its processed marker with exactly its intents, and its business row once.
func (v *verdict) checkConsistency(ctx context.Context, pool *pgxpool.Pool) error {
	rep := v.rep
	var markers, markersWrong, intentsWithoutMarker, orders, ordersTwice, markersWithoutOrder int
	if err := pool.QueryRow(ctx, consistencySQL, Consumers, stripeprovider.KindPaymentIntent, sendgridprovider.KindEmail, stripeprovider.KindRefund, stripeprovider.KindCapture, stripeprovider.KindCancel).
		Scan(&markers, &markersWrong, &intentsWithoutMarker, &orders, &ordersTwice, &markersWithoutOrder, &rep.ReplayedAttempts, &rep.Reconciled); err != nil {
		return fmt.Errorf("chaos: consistency: %w", err)
	}
	if markers != rep.Messages {
		v.problem("%d processed markers for %d messages", markers, rep.Messages)
	}
	if markersWrong > 0 {
		v.problem("%d processed markers without exactly their payment and email intents and at most one refund, capture and cancel", markersWrong)
	}
	if intentsWithoutMarker > 0 {
		v.problem("%d intents recorded by a consumer have no processed marker", intentsWithoutMarker)
	}
	if orders != rep.Messages || ordersTwice > 0 || markersWithoutOrder > 0 {
		v.problem("business rows: %d messages stored, %d stored more than once, %d markers without their row (want %d, 0, 0)",
			orders, ordersTwice, markersWithoutOrder, rep.Messages)
	}
	return nil
}

// explainInDoubt checks that every in_doubt intent was really ambiguous: it
// has an attempt that may have reached the provider (one classified
// ambiguous, or a retry without proof that the provider did nothing: a 5xx
// or no answer, which makes "may have acted" stick until the budget runs
// out), and the provider's side or the chaos log backs the reason that
// attempt gives (see the Why constants).
func explainInDoubt(ctx context.Context, cfg Config, pool *pgxpool.Pool, ev *evidence, ids []int64, byID map[int64]intentRow, rep *Report, problem func(string, ...any)) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := pool.Query(ctx, attemptsSQL, ids)
	if err != nil {
		return fmt.Errorf("chaos: read attempts: %w", err)
	}
	attempts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	if err != nil {
		return fmt.Errorf("chaos: read attempts: %w", err)
	}
	lastAmbiguous := map[int64]attemptRow{}
	lastMaybe := map[int64]attemptRow{}
	for _, a := range attempts {
		switch {
		case a.Outcome == "ambiguous":
			lastAmbiguous[a.IntentID] = a
		case a.Outcome == "retry" && (a.HTTPStatus >= 500 || a.HTTPStatus == 0 || a.HTTPStatus == 409):
			lastMaybe[a.IntentID] = a
		}
	}
	for id, a := range lastMaybe {
		if _, ok := lastAmbiguous[id]; !ok {
			lastAmbiguous[id] = a
		}
	}
	for _, id := range ids {
		in := byID[id]
		a, ok := lastAmbiguous[id]
		if !ok {
			problem("intent %d (%s) is in_doubt without an attempt that may have acted (last error %q)", id, in.Kind, in.LastError)
			continue
		}
		wire := ev.wireFor(in.Kind)[id]
		why := ""
		switch {
		case strings.Contains(a.Error, stoppedDuringCall):
			if a.FinishedAt != nil && ev.diedDuring(a.StartedAt, *a.FinishedAt) {
				why = WhyDiedDuringCall
			}
		case a.HTTPStatus >= 500:
			for _, w := range wire {
				if w.Status == a.HTTPStatus {
					why = WhyServerError
				}
			}
		default:
			for _, w := range wire {
				switch {
				case w.Reset:
					why = WhyStreamReset
				case w.Dropped && why != WhyStreamReset:
					why = WhyLostResponse
				case why == "" && w.Ambiguous(cfg.CallTimeout):
					why = WhySlowResponse
				}
			}
		}
		if why == "" {
			problem("intent %d (%s) is in_doubt without evidence of ambiguity: attempt %d %s (HTTP %d, %q), wire %s",
				id, in.Kind, a.Attempt, a.Outcome, a.HTTPStatus, a.Error, formatWire(wire))
			continue
		}
		rep.InDoubtWhy[why]++
	}
	return nil
}

func formatWire(recs []WireRecord) string {
	if len(recs) == 0 {
		return "[no request reached the double]"
	}
	parts := make([]string, len(recs))
	for i, r := range recs {
		parts[i] = fmt.Sprintf("{status %d dropped=%t client_gone=%t took %s}", r.Status, r.Dropped, r.ClientGone, r.End.Sub(r.Start).Round(time.Millisecond))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// dependentRow is a refund, capture or cancel intent, with its message's payment
// and what it comes after.
type dependentRow struct {
	ID                int64
	Kind              string
	State             string
	Amount            int64
	PaymentRef        string
	PredecessorsDone  bool
	LastPredecessorAt *time.Time
	PredecessorFailed bool
	PredecessorOpen   bool
	FirstAttempt      *time.Time
}

// firstCall is when the earliest of records arrived at the double.
func firstCall(records []WireRecord) (time.Time, bool) {
	var first time.Time
	for _, r := range records {
		if first.IsZero() || r.Start.Before(first) {
			first = r.Start
		}
	}
	return first, !first.IsZero()
}

// checkDependents checks what ordering promises for the refunds and
// captures, from the database and the Stripe double's own records: none
// attempted before everything it comes after succeeded; each refund at the
// double made for a refund intent, of its own message's PaymentIntent (the
// id filled from the payment's result) and for the intent's amount; each
// capture of its own message's PaymentIntent; never more refunded of a
// PaymentIntent than it charged (captured, for an authorisation). It
// returns the intents by id.
func checkDependents(ctx context.Context, pool *pgxpool.Pool, ev *evidence, rep *Report, problem func(string, ...any)) (map[int64]dependentRow, error) {
	rows, err := pool.Query(ctx, dependentsSQL, []string{stripeprovider.KindRefund, stripeprovider.KindCapture, stripeprovider.KindCancel}, stripeprovider.KindPaymentIntent)
	if err != nil {
		return nil, fmt.Errorf("chaos: read refunds and captures: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dependentRow])
	if err != nil {
		return nil, fmt.Errorf("chaos: read refunds and captures: %w", err)
	}
	byID := make(map[int64]dependentRow, len(list))
	for _, f := range list {
		byID[f.ID] = f
		if f.FirstAttempt != nil && (!f.PredecessorsDone || f.LastPredecessorAt == nil) {
			problem("%s intent %d was attempted (at %s), though what it comes after has not all succeeded",
				f.Kind, f.ID, f.FirstAttempt.Format(time.RFC3339Nano))
		}
		// When it was called is the double's record: an attempt's start is
		// its claim's time on the dispatcher's clock, taken before the
		// claim's statement ran, and a queue's claim can run right after a
		// release it was sent before.
		if at, ok := firstCall(ev.wire["stripe"][f.ID]); ok && f.LastPredecessorAt != nil && at.Before(*f.LastPredecessorAt) {
			problem("%s intent %d was called at %s, before what it comes after had succeeded (the last at %s)",
				f.Kind, f.ID, at.Format(time.RFC3339Nano), f.LastPredecessorAt.Format(time.RFC3339Nano))
		}
	}
	// A cancel has no metadata of its own at Stripe: its effect is its
	// message's PaymentIntent cancelled, and only a cancel intent cancels.
	status := map[string]string{}
	charged := map[string]int64{}
	canceled := 0
	for _, o := range ev.stripeObjs {
		status[o.ID], charged[o.ID] = o.Status, o.received()
		if o.Status == "canceled" && !o.foreign() {
			canceled++
		}
	}
	ev.ourCancels = map[string]int{}
	for _, f := range list {
		if f.Kind == stripeprovider.KindCancel && f.PaymentRef != "" && status[f.PaymentRef] == "canceled" {
			ev.ourCancels[strconv.FormatInt(f.ID, 10)]++
			rep.Cancels++
		}
	}
	if canceled != rep.Cancels {
		problem("%d of our PaymentIntents are cancelled at the double, but only %d by a cancel intent of their message", canceled, rep.Cancels)
	}
	for _, o := range ev.stripeObjs {
		id := o.Metadata[stripeprovider.CaptureIntentIDMetadataKey]
		if id == "" || o.foreign() {
			continue
		}
		rep.Captures++
		n, _ := strconv.ParseInt(id, 10, 64)
		if f, ok := byID[n]; !ok || f.Kind != stripeprovider.KindCapture {
			problem("PaymentIntent %s was captured for intent %s, which is not a capture intent", o.ID, id)
		} else if o.ID != f.PaymentRef {
			problem("capture intent %d captured %s, not its payment's PaymentIntent %q", n, o.ID, f.PaymentRef)
		}
	}
	refunded := map[string]int64{}
	rep.Refunds = len(ev.refunds)
	for _, rf := range ev.refunds {
		rep.Refunded += rf.Amount
		refunded[rf.PaymentIntent] += rf.Amount
		id, _ := strconv.ParseInt(rf.Metadata[stripeprovider.IntentIDMetadataKey], 10, 64)
		f, ok := byID[id]
		switch {
		case !ok || f.Kind != stripeprovider.KindRefund:
			problem("refund %s at the double belongs to no refund intent (intent id %q)", rf.ID, rf.Metadata[stripeprovider.IntentIDMetadataKey])
		case rf.PaymentIntent != f.PaymentRef:
			problem("refund %s (intent %d) refunded %s, not its payment's PaymentIntent %q", rf.ID, id, rf.PaymentIntent, f.PaymentRef)
		case rf.Amount != f.Amount:
			problem("refund %s (intent %d) refunded %d, not the %d recorded", rf.ID, id, rf.Amount, f.Amount)
		}
	}
	for pi, n := range refunded {
		if n > charged[pi] {
			problem("PaymentIntent %s: %d refunded of %d charged", pi, n, charged[pi])
		}
	}
	return byID, nil
}
