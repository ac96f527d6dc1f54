package dispatcher_test

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// recordingObserver keeps every call it gets.
type recordingObserver struct {
	mu       sync.Mutex
	attempts map[string]int // "kind outcome" → count
	settled  map[string]int // "kind state" → count
	zeroTook int            // attempts reported with a zero duration
	sinceMin time.Duration
}

func (o *recordingObserver) AttemptFinished(kind string, outcome providers.Outcome, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts[kind+" "+string(outcome)]++
	if d == 0 {
		o.zeroTook++
	}
}

func (o *recordingObserver) IntentSettled(kind string, state intenttype.State, since time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settled[kind+" "+string(state)]++
	if o.sinceMin == 0 || since < o.sinceMin {
		o.sinceMin = since
	}
}

func (o *recordingObserver) snapshot() (attempts, settled map[string]int, zeroTook int, sinceMin time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a, s := map[string]int{}, map[string]int{}
	for k, v := range o.attempts {
		a[k] = v
	}
	for k, v := range o.settled {
		s[k] = v
	}
	return a, s, o.zeroTook, o.sinceMin
}

func TestObserverSeesEveryCommittedAttemptAndSettlement(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	obs := &recordingObserver{attempts: map[string]int{}, settled: map[string]int{}}
	b.sendgrid.Faults().Push(
		fault.Fault{Kind: fault.RateLimit, RetryAfter: 10 * time.Millisecond}, // first email: retried, then sent
		fault.Fault{Kind: fault.None},
		fault.Fault{Kind: fault.LoseResponse}, // second email: in_doubt
	)
	paid := b.record(t, stripeprovider.KindPaymentIntent, paymentPayload)
	declined := b.record(t, stripeprovider.KindPaymentIntent, declinedPayload)
	cfg := b.config()
	cfg.Observer = obs
	cfg.MaxWorkers = 1 // emails in recording order, so the faults land as planned
	b.start(t, cfg)
	for _, id := range []int64{paid, declined} {
		b.waitSettled(t, id)
	}
	sent := b.record(t, sendgridprovider.KindEmail, emailPayload)
	if s := b.waitSettled(t, sent); s.State != intenttype.StateSucceeded {
		t.Fatalf("first email = %+v, want succeeded", s)
	}
	lost := b.record(t, sendgridprovider.KindEmail, emailPayload)
	if s := b.waitSettled(t, lost); s.State != intenttype.StateInDoubt {
		t.Fatalf("second email = %+v, want in_doubt", s)
	}

	wantAttempts := map[string]int{
		"stripe.payment_intent succeeded": 1,
		"stripe.payment_intent failed":    1,
		"sendgrid.email retry":            1,
		"sendgrid.email succeeded":        1,
		"sendgrid.email ambiguous":        1,
	}
	wantSettled := map[string]int{
		"stripe.payment_intent succeeded": 1,
		"stripe.payment_intent failed":    1,
		"sendgrid.email succeeded":        1,
		"sendgrid.email in_doubt":         1,
	}
	// The observer hears of an outcome just after it commits: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		attempts, settled, _, _ := obs.snapshot()
		if maps.Equal(attempts, wantAttempts) && maps.Equal(settled, wantSettled) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("observer saw attempts %v and settlements %v,\nwant %v and %v", attempts, settled, wantAttempts, wantSettled)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, _, zeroTook, sinceMin := obs.snapshot()
	if zeroTook != 0 {
		t.Errorf("%d attempts were reported with no duration; every one here timed a call", zeroTook)
	}
	if sinceMin <= 0 {
		t.Errorf("smallest time since recording = %s, want positive", sinceMin)
	}
}

// A settlement whose commit's answer is lost is sent again, finds its own
// outcome already there, and counts as applied: the Observer (and so the
// settled metrics) hears of the email once, not never (DESIGN.md, "At the
// borders": lost commit acknowledgements).
func TestASettlementWhoseAnswerIsLostIsObservedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	proxied, proxy := testkit.LostAckPool(t, b.pool)
	proxy.ArmStatement("WITH closed AS", 1) // settleSQL
	obs := &recordingObserver{attempts: map[string]int{}, settled: map[string]int{}}
	id := b.record(t, sendgridprovider.KindEmail, emailPayload)
	cfg := b.config()
	cfg.Observer = obs
	b.startOn(t, proxied, cfg)

	if s := b.waitSettled(t, id); s.State != intenttype.StateSucceeded {
		t.Fatalf("intent = %+v, want succeeded", s)
	}
	if proxy.Lost() != 1 {
		t.Fatalf("the proxy lost %d answers, want the settlement's", proxy.Lost())
	}
	if n := b.sendgrid.EffectsFor(id); n != 1 {
		t.Fatalf("the SendGrid double sent %d emails, want 1", n)
	}
	testkit.Eventually(t, 5*time.Second, "the Observer hears of the success", func() bool {
		_, settled, _, _ := obs.snapshot()
		return settled[sendgridprovider.KindEmail+" succeeded"] == 1
	})
	_, settled, _, _ := obs.snapshot()
	if n := settled[sendgridprovider.KindEmail+" succeeded"]; n != 1 {
		t.Fatalf("the Observer heard of the success %d times, want once", n)
	}
}
