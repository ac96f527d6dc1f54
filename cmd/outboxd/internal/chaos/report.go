package chaos

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"
)

// Report is what a run did and found. Effect counts come from the doubles'
// own records, read over HTTP after the run.
type Report struct {
	Seed        uint64 `json:"seed"`
	Dispatchers int    `json:"dispatchers"`
	CallTimeout string `json:"call_timeout"`

	ChaosSeconds float64 `json:"chaos_seconds"`
	DrainSeconds float64 `json:"drain_seconds"`
	TotalSeconds float64 `json:"total_seconds"`

	// DispatcherStarts counts every 'outboxd run' started; DispatcherKills
	// the SIGKILLs; UnexpectedExits the processes that exited on their own
	// (typically a start-up query cut by a backend termination); they were
	// restarted. DrainRestarts counts graceful restarts of the whole fleet
	// during the drain (see drain).
	DispatcherStarts int `json:"dispatcher_starts"`
	DispatcherKills  int `json:"dispatcher_kills"`
	UnexpectedExits  int `json:"unexpected_exits"`
	DrainRestarts    int `json:"drain_restarts"`
	// BackendKillRounds counts rounds of pg_terminate_backend;
	// BackendsTerminated the backends they terminated.
	BackendKillRounds  int `json:"backend_kill_rounds"`
	BackendsTerminated int `json:"backends_terminated"`
	// FaultsInjected counts the faults the doubles applied, by double and
	// kind ("stripe lose_response").
	FaultsInjected map[string]int `json:"faults_injected"`

	// Deliveries counts every delivery to a consumer; DuplicatesDelivered
	// those beyond the first of each message, by cause.
	// DuplicatesAbsorbed counts the Consume calls that found the message
	// already processed; it may exceed DuplicatesDelivered, since a
	// commit whose answer a terminated connection cut is run again by
	// Consume and then found to be a duplicate of itself.
	Messages             int `json:"messages"`
	Deliveries           int `json:"deliveries"`
	DuplicatesDelivered  int `json:"duplicates_delivered"`
	ConcurrentDuplicates int `json:"concurrent_duplicates"`
	SequentialDuplicates int `json:"sequential_duplicates"`
	CrashRedeliveries    int `json:"crash_redeliveries"`
	Nacks                int `json:"nacks"`
	DuplicatesAbsorbed   int `json:"duplicates_absorbed"`

	// CutRequests counts effect-causing requests whose body did not arrive
	// whole (a dispatcher killed while sending): the doubles refused them.
	CutRequests int `json:"cut_requests"`
	Intents     int `json:"intents"`
	Payments    int `json:"payments_at_stripe_double"`
	Emails      int `json:"emails_at_sendgrid_double"`
	// Captures counts the authorisations captured at the Stripe double,
	// each by a capture intent ordered after its payment; Cancels the
	// authorisations cancelled, each by a cancel intent ordered after it.
	// Refunds counts the refunds at the Stripe double and Refunded what
	// they refunded (cents); each was ordered after its message's payment
	// and took that payment's PaymentIntent id. CancelledAfterPayment
	// counts the refunds not performed because their payment failed or was
	// cancelled (or their capture did), WaitingForPayment those still
	// waiting for an in_doubt predecessor; captures are counted with them.
	Refunds               int   `json:"refunds_at_stripe_double"`
	Captures              int   `json:"captures_at_stripe_double"`
	Cancels               int   `json:"cancels_at_stripe_double"`
	Refunded              int64 `json:"refunded_cents"`
	CancelledAfterPayment int   `json:"refunds_cancelled_after_payment"`
	WaitingForPayment     int   `json:"refunds_waiting_for_payment"`
	Replays               int   `json:"stripe_replays"`
	ReplayedAttempts      int   `json:"replayed_attempts"`
	Reconciled            int   `json:"reconciled"`
	DuplicateEffects      int   `json:"duplicate_effects"`
	Succeeded             int   `json:"succeeded"`
	Failed                int   `json:"failed"`
	InDoubt               int   `json:"in_doubt"`
	// InDoubtActed counts the in_doubt intents whose effect the double had
	// in fact performed (an operator would resolve them as succeeded).
	InDoubtActed int `json:"in_doubt_acted"`
	// InDoubtWhy counts the in_doubt intents by the evidence that explains
	// them (the Why constants).
	InDoubtWhy map[string]int `json:"in_doubt_why"`
	Lost       int            `json:"lost"`

	// HostileIDs counts the messages whose ids contain ':', '%' or '~',
	// MaxLengthIDs those exactly intents.MaxMessageIDLength bytes long, and
	// LongConsumerMessages those delivered to LongConsumerName.
	HostileIDs           int `json:"hostile_ids"`
	MaxLengthIDs         int `json:"max_length_ids"`
	LongConsumerMessages int `json:"long_consumer_messages"`

	// ForeignObjects counts the other deployment's PaymentIntents created
	// before the run, ForeignAtDouble those the double holds after it;
	// AdoptedForeign the intents that succeeded with one of them (a
	// violation).
	ForeignObjects  int `json:"foreign_objects"`
	ForeignAtDouble int `json:"foreign_at_double"`
	AdoptedForeign  int `json:"adopted_foreign"`

	// StormAnswered counts the payments the Stripe double answered with a
	// 503 during a storm. FailedBudget counts the intents that failed with
	// their attempt budget spent and nothing that may have acted;
	// BudgetSpentMayHaveActed the intents that spent it after an attempt
	// that may have acted (a 503 may have: none of them may end failed).
	StormAnswered int `json:"storm_answered"`
	// SendGridHTTP2 counts the emails that reached the SendGrid double
	// over HTTP/2; StreamResets those whose stream it reset after
	// accepting them.
	SendGridHTTP2           int `json:"sendgrid_http2"`
	StreamResets            int `json:"stream_resets"`
	FailedBudget            int `json:"failed_budget"`
	BudgetSpentMayHaveActed int `json:"budget_spent_may_have_acted"`

	// OperatorActions counts the operator's actions by outcome ("cancel
	// done", "resend refused"); Cancelled, ResolvedSucceeded and
	// ResolvedFailed the intents an operator left in that state.
	OperatorActions map[string]int `json:"operator_actions"`
	// OperatorErrors are the first few operator errors other than refusals
	// (typically a connection the chaos terminated).
	OperatorErrors    []string `json:"operator_errors,omitempty"`
	Cancelled         int      `json:"cancelled"`
	ResolvedSucceeded int      `json:"resolved_succeeded"`
	ResolvedFailed    int      `json:"resolved_failed"`

	// InDoubtSettledByLookUp counts the in_doubt intents a dispatcher's
	// later look-up settled (events from in_doubt by the dispatcher), of
	// which InDoubtFoundByLookUp found the effect; ProvenAbsent the intents
	// sent back to pending after a consistent read proved the effect
	// absent. InDoubtForOperator counts the intents left in_doubt with no
	// look-up scheduled (they wait for an operator),
	// InDoubtRecheckScheduled those with one still scheduled.
	// StripeInDoubtShare is the share of Stripe intents left in_doubt.
	InDoubtSettledByLookUp  int     `json:"in_doubt_settled_by_look_up"`
	InDoubtFoundByLookUp    int     `json:"in_doubt_found_by_look_up"`
	ProvenAbsent            int     `json:"proven_absent"`
	InDoubtForOperator      int     `json:"in_doubt_for_operator"`
	InDoubtRecheckScheduled int     `json:"in_doubt_recheck_scheduled"`
	StripeInDoubtShare      float64 `json:"stripe_in_doubt_share"`

	Problems []string `json:"problems,omitempty"`
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// WriteTable prints the report as the summary table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, value any) { fmt.Fprintf(tw, "  %s\t%v\n", label, value) }
	secs := func(s float64) string {
		return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
	}
	fmt.Fprintln(tw, "Chaos report")
	row("duration", fmt.Sprintf("%s chaos + %s drain = %s", secs(r.ChaosSeconds), secs(r.DrainSeconds), secs(r.TotalSeconds)))
	row("seed", r.Seed)
	row("dispatchers", fmt.Sprintf("%d at a time, %d started (call timeout %s)", r.Dispatchers, r.DispatcherStarts, r.CallTimeout))
	row("dispatcher kills (SIGKILL)", r.DispatcherKills)
	row("dispatcher exits on their own", r.UnexpectedExits)
	row("graceful restarts in drain", r.DrainRestarts)
	row("backend kills", fmt.Sprintf("%d backends in %d rounds", r.BackendsTerminated, r.BackendKillRounds))
	keys := make([]string, 0, len(r.FaultsInjected))
	for k := range r.FaultsInjected {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		row("fault "+k, r.FaultsInjected[k])
	}
	row("messages", fmt.Sprintf("%d (%d with ':', '%%' or '~' in the id, %d ids of the maximum length, %d to the %d-byte consumer)",
		r.Messages, r.HostileIDs, r.MaxLengthIDs, r.LongConsumerMessages, len(LongConsumerName)))
	row("deliveries", r.Deliveries)
	row("duplicates delivered", fmt.Sprintf("%d (concurrent %d, sequential %d, after a consumer crash %d, after an error %d)",
		r.DuplicatesDelivered, r.ConcurrentDuplicates, r.SequentialDuplicates, r.CrashRedeliveries, r.Nacks))
	row("duplicates absorbed", r.DuplicatesAbsorbed)
	row("intents", r.Intents)
	row("requests cut by a kill", r.CutRequests)
	row("effects", fmt.Sprintf("%d payments at the Stripe double, %d emails at the SendGrid double", r.Payments, r.Emails))
	row("refunds, captures, cancels", fmt.Sprintf("%d refunds (%d cents), %d captures and %d cancels at the Stripe double, each after its payment and on its PaymentIntent; %d not performed as what they come after failed or was cancelled, %d waiting for an in_doubt one",
		r.Refunds, r.Refunded, r.Captures, r.Cancels, r.CancelledAfterPayment, r.WaitingForPayment))
	row("another deployment's PaymentIntents", fmt.Sprintf("%d created before the run, %d at the double after it, %d adopted", r.ForeignObjects, r.ForeignAtDouble, r.AdoptedForeign))
	row("503 storms", fmt.Sprintf("%d payments answered 503; %d intents failed with their budget spent and nothing that may have acted; %d spent it after an attempt that may have acted", r.StormAnswered, r.FailedBudget, r.BudgetSpentMayHaveActed))
	row("SendGrid over HTTP/2", fmt.Sprintf("%d emails, %d streams reset after the double accepted the email", r.SendGridHTTP2, r.StreamResets))
	ops := make([]string, 0, len(r.OperatorActions))
	for k := range r.OperatorActions {
		ops = append(ops, k)
	}
	sort.Strings(ops)
	for _, k := range ops {
		row("operator "+k, r.OperatorActions[k])
	}
	for _, e := range r.OperatorErrors {
		row("  operator error", e)
	}
	row("provider replays", r.Replays)
	row("reconciled after ambiguity", r.Reconciled)
	row("duplicate effects", r.DuplicateEffects)
	row("succeeded", r.Succeeded)
	row("failed", fmt.Sprintf("%d (%d with the budget spent, %d resolved by the operator)", r.Failed, r.FailedBudget, r.ResolvedFailed))
	row("cancelled by the operator", r.Cancelled)
	row("resolved succeeded by the operator", r.ResolvedSucceeded)
	row("in_doubt settled by a later look-up", fmt.Sprintf("%d (%d found the effect)", r.InDoubtSettledByLookUp, r.InDoubtFoundByLookUp))
	row("proven absent, sent again under a new key", r.ProvenAbsent)
	row("in_doubt", fmt.Sprintf("%d (the provider had acted for %d); %d wait for an operator, %d still have a look-up scheduled", r.InDoubt, r.InDoubtActed, r.InDoubtForOperator, r.InDoubtRecheckScheduled))
	row("Stripe intents left in_doubt", fmt.Sprintf("%.1f%%", 100*r.StripeInDoubtShare))
	why := make([]string, 0, len(r.InDoubtWhy))
	for k := range r.InDoubtWhy {
		why = append(why, k)
	}
	sort.Strings(why)
	for _, k := range why {
		row("  "+k, r.InDoubtWhy[k])
	}
	row("lost", r.Lost)
	if r.OK() {
		row("result", "OK: every effect at most once, every succeeded intent exactly once, no intent lost, every in_doubt explained")
	} else {
		row("result", fmt.Sprintf("FAILED: %d problems", len(r.Problems)))
		for i, p := range r.Problems {
			if i == 20 {
				row("problem", fmt.Sprintf("... and %d more", len(r.Problems)-20))
				break
			}
			row("problem", p)
		}
	}
	return tw.Flush()
}
