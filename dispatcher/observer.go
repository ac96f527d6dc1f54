package dispatcher

import (
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers"
)

// Observer is told what the dispatcher did, for metrics. Set it as
// Config.Observer; package internal/metrics implements it for Prometheus.
//
// Both methods are called after the outcome they report has committed, so
// an outcome that failed to commit (and will be retried) is never reported.
// They are called from worker goroutines, concurrently, on the path of every
// attempt: they must be safe for concurrent use, fast, and must not block
// (no I/O). They cannot fail the attempt and are not retried.
type Observer interface {
	// AttemptFinished reports one attempt at an intent of the given kind
	// that has an outcome: performed, refused, to be retried, or ambiguous.
	// d is how long the call to the provider took, or zero when it is not
	// known (an attempt found open after a dispatcher stopped mid-call,
	// reported as ambiguous). An attempt an operator overtook by moving the
	// intent is still reported.
	AttemptFinished(kind string, outcome providers.Outcome, d time.Duration)

	// IntentSettled reports an intent of the given kind that the dispatcher
	// moved to succeeded, failed or in_doubt (not a retry, which stays
	// pending). sinceRecorded is the time from the intent's recording to
	// now, measured against the database's clock at recording, so it is
	// never negative but may be skewed by the difference between clocks.
	IntentSettled(kind string, state intenttype.State, sinceRecorded time.Duration)
}

// observe reports a committed settlement to the Observer, if any. settled
// is whether the settlement changed the intent's state (an operator may
// have moved it during the attempt).
func (d *Dispatcher) observe(kind string, recordedAt time.Time, s settlement, settled bool) {
	o := d.config.Observer
	if o == nil {
		return
	}
	if a := s.attempt; a != nil && a.outcome != "" {
		var took time.Duration
		if !a.started.IsZero() {
			took = max(a.finished.Sub(a.started), 0)
		}
		o.AttemptFinished(kind, a.outcome, took)
	}
	if !settled {
		return
	}
	switch s.state {
	case intenttype.StateSucceeded, intenttype.StateFailed, intenttype.StateInDoubt:
		o.IntentSettled(kind, s.state, max(time.Since(recordedAt), 0))
	}
}
