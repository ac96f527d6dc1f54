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
)

type order struct {
	id       string
	customer string
	email    string
	amount   int
	card     string
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

// handleOrder is the demo's consumer: it stores the order and records a
// payment and a receipt email, all in the consumer's transaction.
func handleOrder(o *order) intents.Handler {
	return func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, insertOrderSQL, o.id, o.customer, o.email, o.amount); err != nil {
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
		return rec.Record(intents.Intent{
			Kind: sendgridprovider.KindEmail, Name: "receipt", Reference: o.id,
			Payload: map[string]any{
				"from":    map[string]string{"email": "shop@example.com", "name": "Demo Shop"},
				"to":      []map[string]string{{"email": o.email}},
				"subject": "Your receipt for " + o.id,
				"text":    fmt.Sprintf("Thank you! We charged $%d.%02d for %s.", o.amount/100, o.amount%100, o.id),
			},
		})
	}
}
