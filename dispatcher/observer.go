package dispatcher

import (
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers"
)

// Observer is told what the dispatcher did, for metrics. Set it as
// Config.Observer; package dispatcher/metrics implements it for Prometheus.
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

// observe reports a committed settlement to the Observer, if any. applied
// is whether the settlement changed the intent's state (an operator may have
// moved it during the attempt); started is when the call began, zero when
// there was none or it is not known.
func (d *Dispatcher) observe(kind string, recordedAt, started time.Time, st intentstore.Settlement, applied bool) {
	o := d.config.Observer
	if o == nil {
		return
	}
	if a := st.Outcome; a != nil && a.Outcome != "" {
		var took time.Duration
		if !started.IsZero() {
			took = max(a.Finished.Sub(started), 0)
		}
		o.AttemptFinished(kind, providers.Outcome(a.Outcome), took)
	}
	if !applied {
		return
	}
	switch st.To {
	case intenttype.StateSucceeded, intenttype.StateFailed, intenttype.StateInDoubt:
		if st.From != st.To {
			o.IntentSettled(kind, st.To, max(time.Since(recordedAt), 0))
		}
	}
}
