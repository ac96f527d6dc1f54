package brokerloop

import (
	"errors"

	"github.com/outboxkit/outbox/intents"
)

// Verdict is what a consumer does with one delivery once Consume has
// returned. Each consumer carries it out in its broker's terms.
type Verdict int

const (
	// Ack: the transaction committed, or the message had been processed
	// already. Acknowledge it.
	Ack Verdict = iota + 1
	// Refuse: intents refused the message id, so no delivery of this
	// message can ever be processed. Take it out of the queue for good
	// (dead-letter or terminate) rather than redeliver it.
	Refuse
	// Redeliver: the message's own handling failed and it has deliveries
	// left. Hand it back for another delivery, counted.
	Redeliver
	// GiveUp: the message's own handling failed on its last allowed
	// delivery. Take it out of the queue for good.
	GiveUp
	// Requeue: the failure was not the message's (Outcome.Uncounted). Hand
	// it back without counting the delivery.
	Requeue
)

func (v Verdict) String() string {
	switch v {
	case Ack:
		return "ack"
	case Refuse:
		return "refuse"
	case Redeliver:
		return "redeliver"
	case GiveUp:
		return "give-up"
	case Requeue:
		return "requeue"
	}
	return "unknown"
}

// Outcome is what one delivery came to.
type Outcome struct {
	// Err is Consume's error: nil when the transaction committed or the
	// message was a duplicate.
	Err error
	// Delivered is how many times the message has been delivered, this
	// delivery included: 1 on the first.
	Delivered int
	// MaxDeliver is how many deliveries a failing message gets; 0 or less
	// is no limit.
	MaxDeliver int
	// Uncounted says the failure was not caused by the message (the
	// database was unreachable, a shutdown cut the handler short), so it
	// must not count toward MaxDeliver. A broker that counts every
	// delivery itself leaves it false.
	Uncounted bool
}

// Decide is the verdict on o. An id intents refuses is refused before any
// failure is counted: no redelivery can make it valid.
func Decide(o Outcome) Verdict {
	switch {
	case o.Err == nil:
		return Ack
	case errors.Is(o.Err, intents.ErrInvalidMessage):
		return Refuse
	case o.Uncounted:
		return Requeue
	case o.MaxDeliver > 0 && o.Delivered >= o.MaxDeliver:
		return GiveUp
	}
	return Redeliver
}
