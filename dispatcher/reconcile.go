package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers"
)

// verdict is what a look-up at the provider proved about an intent whose
// effect may have happened.
type verdict struct {
	to            intenttype.State
	newGeneration bool
	providerRef   string
	note          string
	// recheck: the look-up proved nothing yet; a later one may.
	recheck bool
	// retryAfter, with recheck: the provider asked to be asked again then
	// (a 429); the wait spends none of the intent's re-checks.
	retryAfter time.Duration
}

// reconcile asks the provider whether it performed req (DESIGN.md,
// invariants 1 and 9). Found: succeeded. Absence proven by a consistent
// read: pending under a new key, but only when settled says no request can
// still be in progress at the provider, and only for an intent whose
// requests carried the namespace; otherwise it is looked up again later.
// The only proof of failure is the intent's own object showing nothing was
// done (*providers.NotPerformedError); a look-up that was refused, rate
// limited or failed proves nothing, whatever its status (invariant 12), and
// so does any error Reconcile returns that is not one of its answers.
// Anything else leaves the intent in_doubt.
func (d *Dispatcher) reconcile(ctx context.Context, p providers.Provider, req providers.Request, settled bool) verdict {
	if !p.Capabilities().CanReconcile {
		return verdict{to: intenttype.StateInDoubt, note: "the provider cannot be asked"}
	}
	callCtx, cancel := context.WithTimeout(ctx, d.config.CallTimeout)
	defer cancel()
	res, found, err := p.Reconcile(callCtx, req)
	var notPerformed *providers.NotPerformedError
	var lookup *providers.LookupError
	var mismatch *providers.MismatchError
	switch {
	case err == nil && found:
		return verdict{to: intenttype.StateSucceeded, providerRef: res.ProviderRef}
	case err == nil && req.Namespace == "":
		return verdict{to: intenttype.StateInDoubt, recheck: true,
			note: "not found, but its requests carried no namespace (recorded before namespaces), so absence is not proven"}
	case err == nil && !settled:
		return verdict{to: intenttype.StateInDoubt, recheck: true,
			note: "not found now; looked up again once no request can still be in progress at the provider"}
	case err == nil:
		return verdict{to: intenttype.StatePending, newGeneration: true,
			note: "the provider proved it absent by a consistent read: performed again under a new key"}
	case errors.As(err, &mismatch):
		return verdict{to: intenttype.StateInDoubt, note: "not adopted: " + mismatch.Error()}
	case errors.As(err, &notPerformed):
		return verdict{to: intenttype.StateFailed, note: "the provider shows it did not happen: " + notPerformed.Error()}
	case errors.As(err, &lookup):
		return verdict{to: intenttype.StateInDoubt, recheck: true, retryAfter: lookup.RetryAfter, note: lookup.Error()}
	case errors.Is(err, providers.ErrReconcileUnsupported):
		return verdict{to: intenttype.StateInDoubt, note: "the provider cannot be asked"}
	case errors.Is(err, providers.ErrAbsenceNotProven):
		return verdict{to: intenttype.StateInDoubt, recheck: true, note: "not found, and " + err.Error()}
	}
	return verdict{to: intenttype.StateInDoubt, recheck: true, note: "look-up failed: " + err.Error()}
}

// apply fills st from a verdict about an intent that may have acted (why).
func (d *Dispatcher) apply(st *intentstore.Settlement, v verdict, why string) {
	st.To, st.NewGeneration, st.ProviderRef = v.to, v.newGeneration, v.providerRef
	st.RecheckCount = st.Row.RecheckCount
	if v.newGeneration {
		st.RecheckCount = 0 // a new key starts its own look-ups
	}
	switch v.to {
	case intenttype.StateSucceeded:
		st.Reason = "reconciled: the provider has it (" + why + ")"
	case intenttype.StateInDoubt:
		st.LastError = why + "; " + v.note
		switch {
		case v.recheck && v.retryAfter > 0 && d.config.MaxRechecks > 0: // 0: never look up again (MaxRechecks < 0 as given)
			// Asked to wait: the same look-up goes again then, and the
			// wait spends none of the re-checks.
			at := d.config.Now().Add(v.retryAfter)
			st.RecheckAt = &at
			st.LastError += fmt.Sprintf(" (asked again at %s, as the provider asked)", at.UTC().Format(time.RFC3339))
		case v.recheck && st.RecheckCount < d.config.MaxRechecks:
			at := d.config.Now().Add(recheckBackoff(d.config.RecheckDelay, st.RecheckCount))
			st.RecheckAt, st.RecheckCount = &at, st.RecheckCount+1
			st.LastError += fmt.Sprintf(" (look-up %d of %d at %s)", st.RecheckCount, d.config.MaxRechecks, at.UTC().Format(time.RFC3339))
		default:
			st.LastError += "; no automatic look-up is left: it waits for an operator"
		}
		st.Reason = st.LastError
	default:
		st.LastError = why + "; " + v.note
		st.Reason = st.LastError
	}
}

// maxRecheckWait caps the doubling of re-check delays: a look-up is asked
// at least this often while any are left.
const maxRecheckWait = 24 * time.Hour

// recheckBackoff is base doubled n times, capped at maxRecheckWait, without
// the overflow of a plain shift (base << 40 wraps into the past).
func recheckBackoff(base time.Duration, n int) time.Duration {
	wait := base
	for range n {
		if wait >= maxRecheckWait/2 {
			return maxRecheckWait
		}
		wait *= 2
	}
	return min(wait, maxRecheckWait)
}

type recheckArgs struct{}

func (recheckArgs) Kind() string { return "outbox_recheck" }

func (recheckArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: intentstore.DispatchQueue, MaxAttempts: 1}
}

type recheckWorker struct {
	river.WorkerDefaults[recheckArgs]
	d *Dispatcher
}

func (w *recheckWorker) Timeout(*river.Job[recheckArgs]) time.Duration {
	return w.d.config.jobTimeout()
}

func (w *recheckWorker) Work(ctx context.Context, _ *river.Job[recheckArgs]) error {
	_, err := w.d.Recheck(ctx)
	return err
}

const recheckBatch = 100

// Recheck looks up again, at their providers, the in_doubt intents whose
// next look-up is due (Config.RecheckDelay, doubling, at most
// Config.MaxRechecks times), and settles each by what the provider now
// proves: succeeded, failed, or pending under a new key (queued in the
// same transaction). It returns how many it settled out of in_doubt. The
// leader runs it every Config.RecheckInterval; calling it directly is safe
// (a settlement applies only to the intent as it was looked up).
func (d *Dispatcher) Recheck(ctx context.Context) (int, error) {
	var served []string
	for _, p := range d.config.Providers.Providers() {
		served = append(served, p.Name())
	}
	rows, err := d.store.DueRechecks(ctx, d.config.Now(), served, recheckBatch)
	if err != nil {
		return 0, fmt.Errorf("dispatcher: recheck: %w", err)
	}
	moved := 0
	for _, row := range rows {
		p, ok := d.config.Providers.ByName(row.Provider)
		if !ok {
			continue
		}
		s := step{d: d, row: row, p: p}
		st := intentstore.Settlement{Row: row, From: intenttype.StateInDoubt, MayHaveActed: true}
		v := d.reconcile(ctx, p, s.request(), d.settledSince(row.LastAttemptAt))
		d.apply(&st, v, "held in doubt")
		res, err := d.store.Settle(ctx, st)
		if err != nil {
			return moved, fmt.Errorf("dispatcher: recheck: %w", err)
		}
		if res.Applied && res.State != intenttype.StateInDoubt {
			moved++
			d.config.Logger.InfoContext(ctx, "in_doubt intent settled by a later look-up", "intent_id", row.ID, "state", res.State)
			d.observe(row.Kind, row.CreatedAt, time.Time{}, st, true)
		}
	}
	return moved, nil
}
