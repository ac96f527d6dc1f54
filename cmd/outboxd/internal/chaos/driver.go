package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// ConsumerName is the consumer most of the suite's messages are delivered
// to; LongConsumerName, exactly intents.MaxConsumerLength bytes, gets the
// share LongConsumerRate.
const (
	ConsumerName     = "chaos"
	LongConsumerName = "chaos.consumer-with-the-longest-name-the-package-accepts_" +
		"0123456789.0123456789-0123456789.0123456789"
	LongConsumerRate = 0.2
)

// Consumers are the consumers the suite delivers to.
var Consumers = []string{ConsumerName, LongConsumerName}

// Share of the messages whose ids are hostile to key derivation: they
// contain the key's separator ':', its escape '%' (some already looking
// like an escape, "%3A"), and its hash mark '~'; a third of them are
// exactly intents.MaxMessageIDLength bytes and share all but their last
// bytes, so their keys are hashed and differ only in the hash; some
// continue the previous message's id with ":payment", the suffix its own
// key derivation appends.
const hostileIDRate = 0.3

// Rates of the driver's at-least-once misbehaviour, per message.
const (
	concurrentDuplicateRate = 0.10 // delivered three times at once
	sequentialDuplicateRate = 0.25 // delivered again 0.2–5s later
	crashAfterCommitRate    = 0.05 // the consumer "dies" after commit, before the ack
)

type message struct {
	consumer string
	id       string
	amount   int
	// refund is the part of amount refunded after the payment, ordered
	// after it and taking its PaymentIntent id; 0 for none.
	refund int
	// capture: the payment only authorises (capture_method manual) and a
	// capture ordered after it charges; a refund then comes after both.
	// cancel: the payment only authorises and a cancel ordered after it
	// releases the authorisation; such a message records no refund.
	capture, cancel bool
}

// How often a message records more than a payment and an email: a partial
// refund of its payment (every RefundEvery-th message), an authorisation
// captured by an intent ordered after it (every CaptureEvery-th), or
// cancelled by one instead (every CancelEvery-th: a multiple of
// CaptureEvery, so half of those authorisations).
const (
	RefundEvery  = 3
	CaptureEvery = 5
	CancelEvery  = 10
)

// plan says what message number i (from 1) records besides its payment
// and email.
func plan(i int) (refund, capture, cancel bool) {
	cancel = i%CancelEvery == 0
	capture = i%CaptureEvery == 0 && !cancel
	refund = i%RefundEvery == 0 && !cancel
	return refund, capture, cancel
}

// intentsRecorded is how many intents messages 1 to n record.
func intentsRecorded(n int) int {
	total := 0
	for i := 1; i <= n; i++ {
		refund, capture, cancel := plan(i)
		total += 2
		for _, more := range []bool{refund, capture, cancel} {
			if more {
				total++
			}
		}
	}
	return total
}

// messageID is the id of message number i (from 1), hostile or not.
func messageID(i int, prev string, rnd *rand.Rand) string {
	plain := fmt.Sprintf("msg-%06d", i)
	if rnd.Float64() >= hostileIDRate {
		return plain
	}
	switch rnd.IntN(6) {
	case 0:
		return fmt.Sprintf("order:%06d:payment", i)
	case 1:
		return fmt.Sprintf("order%%3A%06d%%", i) // "order%3A000001%": an escape in disguise
	case 2:
		return fmt.Sprintf("~order~%06d~", i)
	case 3:
		if prev != "" && len(prev)+len(":payment") <= intents.MaxMessageIDLength {
			return prev + ":payment"
		}
		return plain + ":%~"
	default:
		tail := fmt.Sprintf("-%06d", i)
		pad := strings.Repeat("long:%3A~", intents.MaxMessageIDLength/9+1)
		return pad[:intents.MaxMessageIDLength-len(tail)] + tail
	}
}

// driver is an at-least-once broker feeding consumers that record a payment
// and an email per message with intents.Client.Consume. A delivery stays
// outstanding until a consumer acknowledges it; a failed Consume is
// delivered again.
type driver struct {
	client *intents.Client
	msgs   []message
	queue  chan *message

	outstanding sync.WaitGroup
	done        chan struct{}

	delivered      atomic.Int64
	concurrentDups atomic.Int64
	sequentialDups atomic.Int64
	crashes        atomic.Int64
	nacked         atomic.Int64
	absorbed       atomic.Int64
	acked          atomic.Int64
}

func newDriver(client *intents.Client, n int, rnd *rand.Rand) *driver {
	d := &driver{client: client, queue: make(chan *message, n*8+16), done: make(chan struct{})}
	prev := ""
	for i := range n {
		m := message{consumer: ConsumerName, id: messageID(i+1, prev, rnd), amount: 500 + rnd.IntN(20000)}
		refund, capture, cancel := plan(i + 1)
		if refund {
			m.refund = m.amount / 4
		}
		m.capture, m.cancel = capture, cancel
		if rnd.Float64() < LongConsumerRate {
			m.consumer = LongConsumerName
		}
		d.msgs = append(d.msgs, m)
		prev = m.id
	}
	return d
}

// run feeds the messages at rate per second and starts consumers; done
// closes once every delivery, duplicates included, is acknowledged.
func (d *driver) run(ctx context.Context, rate float64, consumers int, seed uint64) {
	d.outstanding.Add(1) // the feeder's own, so the queue cannot close before it is done
	go func() {
		d.outstanding.Wait()
		close(d.queue)
		close(d.done)
	}()
	for c := range consumers {
		go d.consume(ctx, rand.New(rand.NewPCG(seed, uint64(1000+c))))
	}
	go d.feed(ctx, rate, rand.New(rand.NewPCG(seed, 7)))
}

func (d *driver) feed(ctx context.Context, rate float64, rnd *rand.Rand) {
	defer d.outstanding.Done()
	start := time.Now()
	for i := range d.msgs {
		m := &d.msgs[i]
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if !sleepUntil(ctx, due) {
			return
		}
		copies := 1
		if rnd.Float64() < concurrentDuplicateRate {
			copies = 3
			d.concurrentDups.Add(2)
		}
		for range copies {
			d.enqueue(m)
		}
		if rnd.Float64() < sequentialDuplicateRate {
			d.sequentialDups.Add(1)
			d.enqueueLater(ctx, m, 200*time.Millisecond+time.Duration(rnd.Int64N(int64(5*time.Second))))
		}
	}
}

func (d *driver) enqueue(m *message) {
	d.outstanding.Add(1)
	d.queue <- m // the queue holds every delivery the driver can make
}

// enqueueLater delivers m again after delay; the delivery is outstanding
// from now.
func (d *driver) enqueueLater(ctx context.Context, m *message, delay time.Duration) {
	d.outstanding.Add(1)
	go func() {
		if sleepUntil(ctx, time.Now().Add(delay)) {
			d.queue <- m
		}
	}()
}

func (d *driver) consume(ctx context.Context, rnd *rand.Rand) {
	for m := range d.queue {
		d.delivered.Add(1)
		res, err := d.client.Consume(ctx, intents.Message{Consumer: m.consumer, ID: m.id}, handle(m))
		switch {
		case err != nil:
			// Nack: delivered again shortly (a connection the suite
			// terminated more often than Consume's own retries absorb).
			d.nacked.Add(1)
			d.enqueueLater(ctx, m, 50*time.Millisecond)
		case res.Duplicate:
			d.absorbed.Add(1)
			d.acked.Add(1)
		case rnd.Float64() < crashAfterCommitRate:
			d.crashes.Add(1)
			d.enqueueLater(ctx, m, 0)
		default:
			d.acked.Add(1)
		}
		d.outstanding.Done()
	}
}

func (d *driver) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// handle is the consumer: one business row, a payment (for some messages an
// authorisation, captured or cancelled by an intent ordered after it; see
// plan), for some a partial refund ordered after the payment (and the
// capture), and a receipt email, in the transaction that inserts the
// processed marker.
func handle(m *message) intents.Handler {
	return func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, insertOrderSQL, m.consumer, m.id, m.amount); err != nil {
			return err
		}
		payment := map[string]any{
			"amount": m.amount, "currency": "usd", "customer": customerOf(m.id),
			"payment_method": "pm_card_visa", "confirm": true,
			"metadata": map[string]string{"message_id": m.id},
		}
		fromPayment := intents.After{Name: "payment", Fill: map[string]string{"payment_intent": intents.ResultProviderRef}}
		refundAfter := []intents.After{fromPayment}
		if m.capture || m.cancel {
			payment["capture_method"] = "manual"
		}
		if err := rec.Record(intents.Intent{
			Kind: stripeprovider.KindPaymentIntent, Name: "payment", Reference: m.id, Payload: payment,
		}); err != nil {
			return err
		}
		if m.capture {
			if err := rec.Record(intents.Intent{
				Kind: stripeprovider.KindCapture, Name: "capture", Reference: m.id,
				Payload: map[string]any{"metadata": map[string]string{"message_id": m.id}},
				After:   []intents.After{fromPayment},
			}); err != nil {
				return err
			}
			refundAfter = append(refundAfter, intents.After{Name: "capture"})
		}
		if m.cancel {
			if err := rec.Record(intents.Intent{
				Kind: stripeprovider.KindCancel, Name: "cancel", Reference: m.id,
				Payload: map[string]any{"cancellation_reason": "abandoned"},
				After:   []intents.After{fromPayment},
			}); err != nil {
				return err
			}
		}
		if m.refund > 0 {
			if err := rec.Record(intents.Intent{
				Kind: stripeprovider.KindRefund, Name: "refund", Reference: m.id,
				Payload: map[string]any{
					"amount": m.refund, "reason": "requested_by_customer",
					"metadata": map[string]string{"message_id": m.id},
				},
				After: refundAfter,
			}); err != nil {
				return err
			}
		}
		return rec.Record(intents.Intent{
			Kind: sendgridprovider.KindEmail, Name: "receipt", Reference: m.id,
			Payload: map[string]any{
				"from":    map[string]string{"email": "shop@example.com"},
				"to":      []map[string]string{{"email": "buyer@example.com"}},
				"subject": "Receipt for " + m.id,
				"text":    fmt.Sprintf("We charged %d cents.", m.amount),
			},
		})
	}
}

// sleepUntil waits until t or until ctx ends, and reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// customerOf spreads the suite's payments over 50 customers, as a shop's are
// spread: reconciliation lists one customer's recent PaymentIntents.
func customerOf(messageID string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(messageID))
	return fmt.Sprintf("cus_chaos_%02d", h.Sum32()%50)
}
