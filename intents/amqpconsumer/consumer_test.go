package amqpconsumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/amqpconsumer"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers/amqpprovider"
)

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// orderHandler stores the order in the body and records one publish
// intent for its receipt. A body that is not an order is an error.
func orderHandler(calls *atomic.Int64) amqpconsumer.Handler {
	return func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error {
		calls.Add(1)
		var order struct {
			ID     string `json:"id"`
			Amount int    `json:"amount"`
		}
		if err := json.Unmarshal(d.Body, &order); err != nil {
			return fmt.Errorf("malformed order: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, order.ID, order.Amount); err != nil {
			return err
		}
		return rec.Record(intents.Intent{
			Kind:      amqpprovider.KindPublish,
			Reference: order.ID,
			Payload:   map[string]any{"routing_key": "receipts", "body": map[string]any{"order": order.ID}},
		})
	}
}

func TestDuplicateDeliveriesHaveOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	c, _, _ := b.start(amqpconsumer.Config{Handler: orderHandler(&calls)})

	for range 3 {
		b.publish("", b.queue, "order-1", `{"id":"o1","amount":500}`, nil)
	}
	testkit.Eventually(t, 20*time.Second, "three deliveries settled", func() bool {
		s := c.Stats()
		return s.Processed+s.Duplicates == 3
	})
	if s := c.Stats(); s.Processed != 1 || s.Duplicates != 2 {
		t.Fatalf("Stats = %+v, want 1 processed and 2 duplicates", s)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("%d orders stored, want 1", n)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intents WHERE consumer = 'billing' AND message_id = 'order-1'`); n != 1 {
		t.Fatalf("%d intents recorded, want 1", n)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
	testkit.Eventually(t, 20*time.Second, "the queue to empty", func() bool { return b.rabbit.Ready(b.queue) == 0 })
}

func TestAckLostAfterCommitIsAbsorbedAsDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	c, _, _ := b.start(amqpconsumer.Config{Handler: orderHandler(&calls), AMQPConfig: dropFirstAck()})

	b.publish("", b.queue, "order-2", `{"id":"o2","amount":700}`, nil)
	// The first ack dies with the connection after the commit; the broker
	// redelivers on the next connection, and the inbox absorbs it.
	testkit.Eventually(t, 20*time.Second, "the redelivery acked as a duplicate", func() bool { return c.Stats().Duplicates == 1 })
	s := c.Stats()
	if s.Processed != 0 || s.AckFailures != 1 || s.Connections < 2 {
		t.Fatalf("Stats = %+v, want the first ack lost and a reconnect", s)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("%d orders stored, want 1", n)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intents`); n != 1 {
		t.Fatalf("%d intents recorded, want 1", n)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", calls.Load())
	}
	if !strings.Contains(b.logs.String(), "ack lost after commit") {
		t.Errorf("the lost ack was not logged:\n%s", b.logs)
	}
	testkit.Eventually(t, 20*time.Second, "the queue to empty", func() bool { return b.rabbit.Ready(b.queue) == 0 })
}

func TestHandlerErrorsDeadLetterAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := b.rabbit.DeclareExchange(testkit.UniqueName(t, "in"), amqp.ExchangeDirect)
	b.rabbit.Bind(b.queue, "orders.new", in)
	var calls atomic.Int64
	c, _, _ := b.start(amqpconsumer.Config{Handler: orderHandler(&calls), MaxDeliver: 3})

	b.publish(in, "orders.new", "order-3", `{"id": not json`, amqp.Table{"tenant": "acme"})
	d := b.getDeadLetter()
	if calls.Load() != 3 {
		t.Errorf("handler ran %d times, want 3 (MaxDeliver)", calls.Load())
	}
	want := map[string]any{
		amqpconsumer.HeaderDeadLetterReason:   amqpconsumer.ReasonMaxDeliver,
		amqpconsumer.HeaderRedeliveries:       int64(2),
		amqpconsumer.HeaderQueue:              b.queue,
		amqpconsumer.HeaderConsumer:           "billing",
		amqpconsumer.HeaderOriginalExchange:   in,
		amqpconsumer.HeaderOriginalRoutingKey: "orders.new",
		"tenant":                              "acme",
	}
	for k, v := range want {
		if d.Headers[k] != v {
			t.Errorf("dead letter header %s = %#v, want %#v", k, d.Headers[k], v)
		}
	}
	if msg, _ := d.Headers[amqpconsumer.HeaderError].(string); !strings.Contains(msg, "malformed order") {
		t.Errorf("dead letter error header = %q", msg)
	}
	if d.MessageId != "order-3" || string(d.Body) != `{"id": not json` || d.RoutingKey != "orders.new" || d.DeliveryMode != amqp.Persistent {
		t.Errorf("dead letter: id %q, body %q, routing key %q, mode %d", d.MessageId, d.Body, d.RoutingKey, d.DeliveryMode)
	}
	testkit.Eventually(t, 20*time.Second, "the dead-lettered original acked", func() bool { return c.Stats().DeadLettered == 1 })
	if s := c.Stats(); s.Retried != 2 || s.Processed != 0 {
		t.Errorf("Stats = %+v", s)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_processed_messages`) + testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intents`); n != 0 {
		t.Errorf("a failed message left %d rows", n)
	}
	testkit.Eventually(t, 20*time.Second, "the queue to empty", func() bool { return b.rabbit.Ready(b.queue) == 0 })
}

func TestMessageWithoutIDIsDeadLetteredUnprocessed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	c, _, _ := b.start(amqpconsumer.Config{Handler: orderHandler(&calls)})

	b.publish("", b.queue, "", `{"id":"o4","amount":1}`, nil)
	d := b.getDeadLetter()
	if d.Headers[amqpconsumer.HeaderDeadLetterReason] != amqpconsumer.ReasonNoMessageID {
		t.Fatalf("reason = %v", d.Headers[amqpconsumer.HeaderDeadLetterReason])
	}
	b.publish("", b.queue, strings.Repeat("x", intents.MaxMessageIDLength+1), `{"id":"o5","amount":1}`, nil)
	if d := b.getDeadLetter(); d.Headers[amqpconsumer.HeaderDeadLetterReason] != amqpconsumer.ReasonInvalidMessageID {
		t.Fatalf("reason = %v", d.Headers[amqpconsumer.HeaderDeadLetterReason])
	}
	if calls.Load() != 0 {
		t.Fatalf("handler ran %d times for messages without a usable id", calls.Load())
	}
	testkit.Eventually(t, 20*time.Second, "both originals acked", func() bool { return c.Stats().DeadLettered == 2 })
	if s := c.Stats(); s.Refused != 2 {
		t.Fatalf("Stats = %+v", s)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_processed_messages`) + testkit.Count(t, b.pool, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("a refused message left %d rows", n)
	}
	if !strings.Contains(b.logs.String(), "message dead-lettered") {
		t.Errorf("refusal not logged:\n%s", b.logs)
	}
}

func TestFallbackHeaderIsTheMessageID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int64
	inner := orderHandler(&calls)
	handler := func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error {
		if err := d.Ack(false); !errors.Is(err, amqpconsumer.ErrHandlerAck) {
			t.Errorf("a handler's Ack = %v, want ErrHandlerAck", err)
		}
		return inner(ctx, d, tx, rec)
	}
	c, _, _ := b.start(amqpconsumer.Config{Handler: handler, MessageIDHeader: "event-id"})

	b.publish("", b.queue, "", `{"id":"o6","amount":1}`, amqp.Table{"event-id": "evt-6"})
	b.publish("", b.queue, "", `{"id":"o6","amount":1}`, amqp.Table{"event-id": []byte("evt-6")})
	testkit.Eventually(t, 20*time.Second, "both deliveries settled", func() bool {
		s := c.Stats()
		return s.Processed+s.Duplicates == 2
	})
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_processed_messages WHERE message_id = 'evt-6'`); n != 1 {
		t.Fatalf("%d markers for evt-6, want 1", n)
	}
}

func TestBrokerUnavailableAtStartIsRetriedUntilCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const password = "pa55-w0rd-secret"
	_, cancel, done := b.start(amqpconsumer.Config{
		URL:      "amqp://guest:" + password + "@127.0.0.1:1/",
		Handler:  orderHandler(new(atomic.Int64)),
		Consumer: "billing",
	})
	testkit.Eventually(t, 20*time.Second, "three logged connection attempts", func() bool {
		return strings.Count(b.logs.String(), "rabbitmq consumer cannot start; retrying") >= 3
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		done <- err // for the cleanup's check
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	logs := b.logs.String()
	if strings.Contains(logs, password) {
		t.Fatalf("password in logs:\n%s", logs)
	}
	if !strings.Contains(logs, "127.0.0.1:1") || !strings.Contains(logs, "retry_in=") {
		t.Errorf("log lines do not say where and when:\n%s", logs)
	}
}

func TestShutdownLetsHandlersInFlightFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	inner := orderHandler(&calls)
	handler := func(ctx context.Context, d amqp.Delivery, tx pgx.Tx, rec *intents.Recorder) error {
		close(started)
		<-release
		return inner(ctx, d, tx, rec)
	}
	c, cancel, done := b.start(amqpconsumer.Config{Handler: handler})
	b.publish("", b.queue, "order-7", `{"id":"o7","amount":1}`, nil)
	<-started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v with a handler still running", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		done <- err // for the cleanup's check
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if s := c.Stats(); s.Processed != 1 {
		t.Fatalf("Stats = %+v, want the in-flight message processed and acked", s)
	}
	if n := testkit.Count(t, b.pool, `SELECT count(*) FROM orders`); n != 1 {
		t.Fatalf("%d orders", n)
	}
	if n := b.rabbit.Ready(b.queue); n != 0 {
		t.Fatalf("%d messages back in the queue, want 0 (acked before closing)", n)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := orderHandler(new(atomic.Int64))
	valid := amqpconsumer.Config{URL: testkit.RabbitURL(), Queue: "q", Consumer: "billing", Handler: h, DeadLetterExchange: "dlx"}
	const password = "n0t-in-errors"
	cases := map[string]func(*amqpconsumer.Config){
		"Config.URL":                func(c *amqpconsumer.Config) { c.URL = "" },
		"Config.Queue":              func(c *amqpconsumer.Config) { c.Queue = "" },
		"Config.Handler":            func(c *amqpconsumer.Config) { c.Handler = nil },
		"Config.Consumer":           func(c *amqpconsumer.Config) { c.Consumer = "bad name" },
		"Config.DeadLetterExchange": func(c *amqpconsumer.Config) { c.DeadLetterExchange = "" },
		"Config.MaxDeliver":         func(c *amqpconsumer.Config) { c.MaxDeliver = -2 },
		"Config.Prefetch":           func(c *amqpconsumer.Config) { c.Prefetch = -1 },
		"Config.ShutdownGrace":      func(c *amqpconsumer.Config) { c.ShutdownGrace = -time.Second },
		"Config.ReconnectDelayMax": func(c *amqpconsumer.Config) {
			c.ReconnectDelay, c.ReconnectDelayMax = time.Minute, time.Second
		},
		"Config.AMQPConfig.Recovery": func(c *amqpconsumer.Config) { c.AMQPConfig = &amqp.Config{Recovery: &amqp.Recovery{}} },
		"Config.URL is not":          func(c *amqpconsumer.Config) { c.URL = "amqp://u:" + password + "@ho st/" },
	}
	for field, mutate := range cases {
		cfg := valid
		mutate(&cfg)
		_, err := amqpconsumer.New(b.client, &cfg)
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("New with bad %s = %v, want an error naming it", field, err)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	noLimit := valid
	noLimit.DeadLetterExchange, noLimit.MaxDeliver = "", amqpconsumer.NoDeliverLimit
	if _, err := amqpconsumer.New(nil, &valid); err == nil || !strings.Contains(err.Error(), "client") {
		t.Errorf("New without a client = %v, want an error naming it", err)
	}
	if _, err := amqpconsumer.New(b.client, &noLimit); err != nil {
		t.Errorf("New without a dead-letter exchange and no limit: %v", err)
	}
}
