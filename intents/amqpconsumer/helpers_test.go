package amqpconsumer_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/amqpconsumer"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
)

// testBundle is one test's database, broker topology and log.
type testBundle struct {
	t      *testing.T
	pool   *pgxpool.Pool
	client *intents.Client
	rabbit *testkit.RabbitBroker
	queue  string
	dlx    string
	dlq    string
	logs   *testkit.SyncBuffer
}

// setup gives a test a fresh database with an orders table, and its own
// queue, dead-letter exchange and dead-letter queue, deleted at cleanup.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, amount int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	publisher, err := amqpprovider.New(amqpprovider.Config{}) // validates only
	if err != nil {
		t.Fatal(err)
	}
	registry, err := providers.NewRegistry(publisher)
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		t.Fatal(err)
	}
	rabbit := testkit.Rabbit(t)
	b := &testBundle{t: t, pool: pool, client: client, rabbit: rabbit, logs: &testkit.SyncBuffer{}}
	b.queue = rabbit.DeclareQueue(testkit.UniqueName(t, "q"))
	b.dlx = rabbit.DeclareExchange(testkit.UniqueName(t, "dlx"), amqp.ExchangeFanout)
	b.dlq = rabbit.DeclareQueue(testkit.UniqueName(t, "dlq"))
	rabbit.Bind(b.dlq, "", b.dlx)
	return b
}

// publish publishes a persistent JSON message through exchange.
func (b *testBundle) publish(exchange, key, messageID, body string, headers amqp.Table) {
	b.t.Helper()
	b.rabbit.Publish(exchange, key, amqp.Publishing{
		MessageId: messageID, Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body),
	})
}

// getDeadLetter waits for a message in the dead-letter queue.
func (b *testBundle) getDeadLetter() amqp.Delivery {
	b.t.Helper()
	return b.rabbit.Get(b.dlq, 20*time.Second)
}

// start runs a Consumer for cfg, filled in with the bundle's defaults,
// until the test ends; cleanup checks that Run returned ctx's error.
func (b *testBundle) start(cfg amqpconsumer.Config) (*amqpconsumer.Consumer, context.CancelFunc, chan error) {
	b.t.Helper()
	return b.startWith(b.client, cfg)
}

// startWith is start with a client of the test's own.
func (b *testBundle) startWith(client *intents.Client, cfg amqpconsumer.Config) (*amqpconsumer.Consumer, context.CancelFunc, chan error) {
	b.t.Helper()
	if cfg.URL == "" {
		cfg.URL = testkit.RabbitURL()
	}
	if cfg.Queue == "" {
		cfg.Queue = b.queue
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "billing"
	}
	if cfg.DeadLetterExchange == "" {
		cfg.DeadLetterExchange = b.dlx
	}
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay, cfg.ReconnectDelayMax = 20*time.Millisecond, 200*time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = newLogger(b.logs)
	}
	c, err := amqpconsumer.New(client, &cfg)
	if err != nil {
		b.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	b.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				b.t.Errorf("Run = %v, want context.Canceled", err)
			}
			done <- err
		case <-time.After(30 * time.Second):
			b.t.Error("Run did not return after its context ended")
		}
	})
	return c, cancel, done
}

// ackDropper wraps the consumer's connection to the broker and drops it
// instead of sending the first basic.ack: the ack is lost after the
// transaction committed, as when a connection dies at the worst moment.
type ackDropper struct {
	net.Conn
	fired *atomic.Bool
}

func (c *ackDropper) Write(p []byte) (int, error) {
	if testkit.ContainsAMQPMethod(p, 60, 80) && c.fired.CompareAndSwap(false, true) {
		_ = c.Conn.Close()
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// dropFirstAck returns an amqp.Config whose first acknowledgement is lost.
func dropFirstAck() *amqp.Config {
	fired := &atomic.Bool{}
	return &amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(5*time.Second)(network, addr)
		if err != nil {
			return nil, err
		}
		return &ackDropper{Conn: c, fired: fired}, nil
	}}
}
