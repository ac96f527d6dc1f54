package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// Rates of the broker's misbehaviour, per order message.
const (
	sequentialDuplicateRate = 0.25 // delivered again after everything else
	concurrentDuplicateRate = 0.10 // delivered three times at once
	crashAfterCommitRate    = 0.05 // consumer dies after commit, before ack
	declinedCardRate        = 0.03 // the customer's card is declined
	refundRate              = 0.30 // the order is partly refunded
)

type order struct {
	id       string
	customer string
	email    string
	amount   int
	card     string
	// refund is the part of amount refunded after the charge; 0 for none.
	refund int
}

type delivery struct{ order *order }

// broker is an at-least-once broker: a message stays outstanding until a
// consumer acknowledges it, and is delivered again when a consumer dies
// first. It also delivers duplicates on its own, as real brokers and
// retrying publishers do.
type broker struct {
	orders      []*order
	queue       chan delivery
	outstanding sync.WaitGroup
	done        chan struct{}

	delivered atomic.Int64
	absorbed  atomic.Int64
	crashes   atomic.Int64
	acked     atomic.Int64
}

func newBroker(n int, seed uint64) *broker {
	rnd := rand.New(rand.NewPCG(seed, 7))
	b := &broker{queue: make(chan delivery, n*6), done: make(chan struct{})}
	var later []delivery
	for i := range n {
		o := &order{
			id:       fmt.Sprintf("order-%05d", i+1),
			customer: fmt.Sprintf("cus_demo%05d", i+1),
			email:    fmt.Sprintf("buyer%05d@example.com", i+1),
			amount:   500 + rnd.IntN(20000),
			card:     "pm_card_visa",
		}
		if rnd.Float64() < declinedCardRate {
			o.card = stripedouble.DeclinedCard
		}
		if rnd.Float64() < refundRate {
			o.refund = o.amount / 4
		}
		b.orders = append(b.orders, o)
		copies := 1
		if rnd.Float64() < concurrentDuplicateRate {
			copies = 3
		}
		for range copies {
			b.enqueue(delivery{order: o})
		}
		if rnd.Float64() < sequentialDuplicateRate {
			later = append(later, delivery{order: o})
		}
	}
	for _, d := range later {
		b.enqueue(d)
	}
	return b
}

func (b *broker) enqueue(d delivery) {
	b.outstanding.Add(1)
	b.queue <- d
}

// run starts the consumers; the queue closes once every delivery is acked.
func (b *broker) run(ctx context.Context, consumers int, client *intents.Client, seed uint64) {
	go func() {
		b.outstanding.Wait()
		close(b.queue)
		close(b.done)
	}()
	for c := range consumers {
		rnd := rand.New(rand.NewPCG(seed, uint64(100+c)))
		go b.consume(ctx, client, rnd)
	}
}

func (b *broker) consume(ctx context.Context, client *intents.Client, rnd *rand.Rand) {
	for d := range b.queue {
		b.delivered.Add(1)
		res, err := client.Consume(ctx, intents.Message{Consumer: "orders", ID: d.order.id}, handleOrder(d.order))
		switch {
		case err != nil:
			if ctx.Err() != nil {
				b.outstanding.Done()
				continue
			}
			// Nack: the broker delivers it again.
			b.redeliver(d)
		case res.Duplicate:
			b.absorbed.Add(1)
			b.ack()
		case rnd.Float64() < crashAfterCommitRate:
			// Committed, then died before the ack: the broker never heard.
			b.crashes.Add(1)
			b.redeliver(d)
		default:
			b.ack()
		}
	}
}

func (b *broker) ack() {
	b.acked.Add(1)
	b.outstanding.Done()
}

func (b *broker) redeliver(d delivery) {
	b.enqueue(d)
	b.outstanding.Done()
}

func (b *broker) finished() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func (b *broker) stats(r *Report) {
	r.MessagesDelivered = int(b.delivered.Load())
	r.DuplicatesDelivered = r.MessagesDelivered - len(b.orders)
	r.DuplicatesAbsorbed = int(b.absorbed.Load())
	r.ConsumerCrashes = int(b.crashes.Load())
}

// receiptTemplate is the dynamic template the receipts are sent with (any
// "d-" id but sendgriddouble.UnknownTemplateID is one the double knows).
const receiptTemplate = "d-3f9a1c2b7e5d4a60b8c1f2e3d4a5b6c7"

// handleOrder is the demo's consumer: it stores the order and records a
// payment, a partial refund for some orders, and a templated receipt, all
// in the consumer's transaction. The refund and the receipt come after the
// payment: the refund takes the payment's PaymentIntent id when it
// succeeded, and neither is performed if the card is declined.
func handleOrder(o *order) intents.Handler {
	return func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, insertOrderSQL, o.id, o.customer, o.email, o.amount, o.refund); err != nil {
			return err
		}
		err := rec.Record(intents.Intent{
			Kind: stripeprovider.KindPaymentIntent, Name: "payment", Reference: o.id,
			Payload: map[string]any{
				"amount": o.amount, "currency": "usd", "customer": o.customer,
				"payment_method": o.card, "confirm": true, "receipt_email": o.email,
				"metadata": map[string]string{"order_id": o.id},
			},
		})
		if err != nil {
			return err
		}
		afterPayment := []intents.After{{Name: "payment"}}
		if o.refund > 0 {
			err := rec.Record(intents.Intent{
				Kind: stripeprovider.KindRefund, Name: "refund", Reference: o.id,
				Payload: map[string]any{
					"amount": o.refund, "reason": "requested_by_customer",
					"metadata": map[string]string{"order_id": o.id},
				},
				After: []intents.After{{Name: "payment", Fill: map[string]string{"payment_intent": intents.ResultProviderRef}}},
			})
			if err != nil {
				return err
			}
		}
		return rec.Record(intents.Intent{
			Kind: sendgridprovider.KindEmail, Name: "receipt", Reference: o.id,
			Payload: map[string]any{
				"from":        map[string]string{"email": "shop@example.com", "name": "Demo Shop"},
				"to":          []map[string]string{{"email": o.email}},
				"template_id": receiptTemplate,
				"dynamic_template_data": map[string]any{
					"order_id": o.id, "charged": dollars(o.amount), "refunded": dollars(o.refund),
				},
			},
			After: afterPayment,
		})
	}
}

func dollars(cents int) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }
