package intents_test

import (
	"errors"
	"testing"

	"github.com/outboxkit/outbox/intents"
)

// TestIntentErrorCountsAsPeopleDo: an IntentError names the intent by its
// position as people count it, never by a number that reads like an
// intent's id ("intent 0").
func TestIntentErrorCountsAsPeopleDo(t *testing.T) {
	t.Parallel()
	for index, want := range map[int]string{
		0:   `the 1st intent (stripe.refund "refund"): refused`,
		1:   `the 2nd intent (stripe.refund "refund"): refused`,
		2:   `the 3rd intent (stripe.refund "refund"): refused`,
		3:   `the 4th intent (stripe.refund "refund"): refused`,
		10:  `the 11th intent (stripe.refund "refund"): refused`,
		11:  `the 12th intent (stripe.refund "refund"): refused`,
		12:  `the 13th intent (stripe.refund "refund"): refused`,
		20:  `the 21st intent (stripe.refund "refund"): refused`,
		21:  `the 22nd intent (stripe.refund "refund"): refused`,
		110: `the 111th intent (stripe.refund "refund"): refused`,
		122: `the 123rd intent (stripe.refund "refund"): refused`,
	} {
		err := &intents.IntentError{Index: index, Kind: "stripe.refund", Name: "refund", Err: errors.New("refused")}
		if got := err.Error(); got != want {
			t.Errorf("IntentError{Index: %d}.Error() = %q, want %q", index, got, want)
		}
	}
	if got := (&intents.IntentError{Kind: "sendgrid.email", Err: errors.New("refused")}).Error(); got != "the 1st intent (sendgrid.email): refused" {
		t.Errorf("an unnamed intent: %q", got)
	}
}
