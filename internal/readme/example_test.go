package readme_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/dispatcher"
	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/amqpconsumer"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

// The README's first example: a consumer that stores a note's tag and
// records an email, once however often the broker delivers the event.
func Example_consume() {
	ctx := context.Background()
	pool, cleanup := exampleDatabase()
	defer cleanup()

	// readme:consume begin
	email, err := sendgridprovider.New(sendgridprovider.Config{}) // recording only validates: no key needed
	if err != nil {
		log.Fatal(err)
	}
	registry, err := providers.NewRegistry(email)
	if err != nil {
		log.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		log.Fatal(err)
	}

	// A consumer of NoteCreated: store the tag, notify the author. Once per
	// event, however often the broker delivers it.
	noteID, tag, author := "note-1", "go", "ann@example.com" // from the event
	handle := func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
		if _, err := tx.Exec(ctx, `INSERT INTO note_tags (note_id, tag) VALUES ($1, $2)`, noteID, tag); err != nil {
			return err // rolls back everything: no marker, no tag, no intent
		}
		return rec.Record(intents.Intent{
			Kind:      sendgridprovider.KindEmail,
			Reference: noteID, // an operator finds every effect of this note by it
			Payload: map[string]any{
				"from":    map[string]string{"email": "notes@example.com"},
				"to":      []map[string]string{{"email": author}},
				"subject": "Your note was tagged",
				"text":    "Tags: " + tag,
			},
		})
	}
	for range 2 { // the broker delivers the event twice
		res, err := client.Consume(ctx, intents.Message{Consumer: "tagger", ID: "evt-note-1-created"}, handle)
		if err != nil {
			log.Fatal(err) // nothing was written: leave the message unacked, to be redelivered
		}
		// Ack the delivery now, a duplicate too.
		fmt.Printf("duplicate: %t, intents recorded: %d\n", res.Duplicate, len(res.Intents))
	}
	// readme:consume end

	// readme:state begin
	trail, err := audit.New(pool, registry)
	if err != nil {
		log.Fatal(err)
	}
	page, err := trail.List(ctx, audit.Filter{Reference: noteID})
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range page.Intents { // payloads redacted
		fmt.Printf("%s for %s: %s\n", in.Kind, in.Reference, in.State) // pending until a dispatcher performs it
	}
	// readme:state end

	// Output:
	// duplicate: false, intents recorded: 1
	// duplicate: true, intents recorded: 0
	// sendgrid.email for note-1: pending
}

// runDispatcher is the README's dispatcher in a process of your own.
func runDispatcher(ctx context.Context, pool *pgxpool.Pool, registry *providers.Registry) error {
	// readme:dispatcher begin
	d, err := dispatcher.New(pool, &dispatcher.Config{Providers: registry})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done() // until the process is told to stop

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Stop(shutdownCtx) // waits for attempts in flight to record their outcome
	// readme:dispatcher end
}

func Example_dispatcher() {
	pool, cleanup := exampleDatabase()
	defer cleanup()
	payments, err := stripeprovider.New(stripeprovider.Config{APIKey: "sk_test_example"})
	if err != nil {
		log.Fatal(err)
	}
	registry, err := providers.NewRegistry(payments)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	fmt.Println("stopped:", runDispatcher(ctx, pool, registry))
	// Output:
	// stopped: <nil>
}

// Order is the RabbitMQ example's message body.
type Order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// Payment is the order's Stripe PaymentIntent.
func (o Order) Payment() map[string]any {
	return map[string]any{"amount": o.Amount, "currency": "usd", "metadata": map[string]string{"order_id": o.ID}}
}

// consumeOrders is the README's RabbitMQ consumer. It needs a broker, so
// its example is compiled but not run; intents/amqpconsumer's tests run the
// same against a real RabbitMQ.
func consumeOrders(ctx context.Context, client *intents.Client) error {
	// readme:rabbitmq begin
	c, err := amqpconsumer.New(client, &amqpconsumer.Config{
		URL:                os.Getenv("AMQP_URL"), // holds a password: logged masked
		Queue:              "orders",              // must exist; the consumer declares nothing
		Consumer:           "billing",             // the inbox consumer name
		DeadLetterExchange: "orders.dlx",
		Handler: func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error {
			var order Order
			if err := json.Unmarshal(d.Body, &order); err != nil {
				return err // a malformed body counts toward dead-lettering
			}
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, order.ID, order.Amount); err != nil {
				return err
			}
			return rec.Record(intents.Intent{Kind: stripeprovider.KindPaymentIntent, Reference: order.ID, Payload: order.Payment()})
		},
	})
	if err != nil {
		return err
	}
	return c.Run(ctx) // blocks; returns ctx.Err() after a graceful stop
	// readme:rabbitmq end
}

func Example_rabbitMQConsumer() {
	_ = consumeOrders // needs RabbitMQ at AMQP_URL: compiled, not run
}

// receiveWebhook is the README's webhook receiver.
func receiveWebhook(secret string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// readme:webhook begin
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "cannot read the body", http.StatusBadRequest)
			return
		}
		if err := webhookprovider.Verify(secret, r.Header.Get(webhookprovider.SignatureHeader), body, 0); err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// readme:webhook end
		fmt.Fprintln(w, "accepted")
	}
}

func Example_verifyWebhook() {
	const secret = "whsec_example_0123456789"
	srv := httptest.NewServer(receiveWebhook(secret))
	defer srv.Close()
	body := `{"id": "billing:order-42", "event": "order.paid", "data": {}}`
	for _, signature := range []string{webhookprovider.Sign(secret, time.Now(), []byte(body)), "t=1,v1=forged"} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		req.Header.Set(webhookprovider.SignatureHeader, signature)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	// Output:
	// 200
	// 401
}
