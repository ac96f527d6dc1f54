package brokerloop

import (
	"errors"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/intents"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	failed := errors.New("handler failed")
	badID := fmt.Errorf("message id too long: %w", intents.ErrInvalidMessage)
	cases := []struct {
		name string
		o    Outcome
		want Verdict
	}{
		{"committed", Outcome{Delivered: 1, MaxDeliver: 3}, Ack},
		{"committed while the shutdown cut in", Outcome{Delivered: 1, MaxDeliver: 3, Uncounted: true}, Ack},
		{"past MaxDeliver, committed", Outcome{Delivered: 9, MaxDeliver: 3}, Ack},
		{"invalid id", Outcome{Err: badID, Delivered: 1, MaxDeliver: 3}, Refuse},
		{"invalid id, uncounted", Outcome{Err: badID, Delivered: 1, MaxDeliver: 3, Uncounted: true}, Refuse},
		{"invalid id on the last delivery", Outcome{Err: badID, Delivered: 3, MaxDeliver: 3}, Refuse},
		{"failed, deliveries left", Outcome{Err: failed, Delivered: 2, MaxDeliver: 3}, Redeliver},
		{"failed on the last delivery", Outcome{Err: failed, Delivered: 3, MaxDeliver: 3}, GiveUp},
		{"failed past the last delivery", Outcome{Err: failed, Delivered: 4, MaxDeliver: 3}, GiveUp},
		{"failed once with MaxDeliver 1", Outcome{Err: failed, Delivered: 1, MaxDeliver: 1}, GiveUp},
		{"failed with no limit", Outcome{Err: failed, Delivered: 1000, MaxDeliver: -1}, Redeliver},
		{"not the message's failure", Outcome{Err: failed, Delivered: 3, MaxDeliver: 3, Uncounted: true}, Requeue},
	}
	for _, tc := range cases {
		if got := Decide(tc.o); got != tc.want {
			t.Errorf("%s: Decide = %s, want %s", tc.name, got, tc.want)
		}
	}
}
