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
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

// Example_program is the README's program, from a database to an effect
// performed and read back, in one process. Its regions are the README's Go
// blocks, in this order, and TestREADMEGoBlocksRunTogether builds and runs
// them as one main package.
func Example_program() {
	done := exampleEnvironment() // DATABASE_URL: an empty database; SENDGRID_*: a double
	defer done()

	// readme:connect begin
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// River's tables and the outbox's, as `outboxd migrate` makes them; a
	// no-op when they are current.
	if _, err := migrations.New(pool, nil).Up(ctx); err != nil {
		log.Fatal(err)
	}
	// The service's own table, written in the transaction that records its
	// intents.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS note_tags (note_id text, tag text)`); err != nil {
		log.Fatal(err)
	}
	// readme:connect end

	// readme:providers begin
	// The key from the environment; SENDGRID_API_BASE points the adapter at
	// `outboxd doubles` instead of SendGrid.
	email, err := sendgridprovider.New(sendgridprovider.Config{
		APIKey: os.Getenv("SENDGRID_API_KEY"), BaseURL: os.Getenv("SENDGRID_API_BASE")})
	if err != nil {
		log.Fatal(err)
	}
	registry, err := providers.NewRegistry(email) // every provider your intents use
	if err != nil {
		log.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		log.Fatal(err)
	}
	// readme:providers end

	// readme:consume begin
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

	// readme:dispatcher begin
	d, err := dispatcher.New(pool, &dispatcher.Config{Providers: registry})
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(stopCtx); err != nil { // waits for attempts in flight to record their outcome
			log.Print(err)
		}
	}()
	// readme:dispatcher end

	// readme:state begin
	trail, err := audit.New(pool, registry)
	if err != nil {
		log.Fatal(err)
	}
	for { // as a service shows "pending" until the dispatcher performed it
		page, err := trail.List(ctx, audit.Filter{Reference: noteID})
		if err != nil {
			log.Fatal(err)
		}
		in := page.Intents[0] // payloads redacted
		if in.State != intenttype.StatePending && in.State != intenttype.StateDispatching {
			fmt.Printf("%s for %s: %s\n", in.Kind, in.Reference, in.State)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// readme:state end

	// Output:
	// duplicate: false, intents recorded: 1
	// duplicate: true, intents recorded: 0
	// sendgrid.email for note-1: succeeded
}

// runDispatcher is the dispatcher in a service of your own, until its
// process is told to stop (docs/library.md).
func runDispatcher(ctx context.Context, pool *pgxpool.Pool, registry *providers.Registry) error {
	// readme:service begin
	d, err := dispatcher.New(pool, &dispatcher.Config{Providers: registry})
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done() // until the process is told to stop (signal.NotifyContext)

	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Stop(shutdownCtx) // waits for attempts in flight to record their outcome
	// readme:service end
}

func Example_dispatcherInAService() {
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
