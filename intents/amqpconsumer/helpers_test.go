package amqpconsumer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/amqpconsumer"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
)

func brokerURL() string {
	if v := os.Getenv("TEST_RABBITMQ_URL"); v != "" {
		return v
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// testBundle is one test's database, broker topology and log.
type testBundle struct {
	t      *testing.T
	pool   *pgxpool.Pool
	client *intents.Client
	ch     *amqp.Channel
	chMu   sync.Mutex
	queue  string
	dlx    string
	dlq    string
	logs   *syncBuffer
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
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", brokerURL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{t: t, pool: pool, client: client, ch: ch, logs: &syncBuffer{}}
	b.queue = b.declareQueue(uniqueName(t, "q"))
	b.dlx = b.declareExchange(uniqueName(t, "dlx"), amqp.ExchangeFanout)
	b.dlq = b.declareQueue(uniqueName(t, "dlq"))
	b.bind(b.dlq, "", b.dlx)
	return b
}

func uniqueName(t *testing.T, what string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "outbox-test." + what + "." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(b)
}

func (b *testBundle) declareQueue(name string) string {
	b.t.Helper()
	b.chMu.Lock()
	defer b.chMu.Unlock()
	if _, err := b.ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare queue: %v", err)
	}
	b.t.Cleanup(func() {
		b.chMu.Lock()
		defer b.chMu.Unlock()
		if _, err := b.ch.QueueDelete(name, false, false, false); err != nil {
			b.t.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

func (b *testBundle) declareExchange(name, kind string) string {
	b.t.Helper()
	b.chMu.Lock()
	defer b.chMu.Unlock()
	if err := b.ch.ExchangeDeclare(name, kind, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare exchange: %v", err)
	}
	b.t.Cleanup(func() {
		b.chMu.Lock()
		defer b.chMu.Unlock()
		if err := b.ch.ExchangeDelete(name, false, false); err != nil {
			b.t.Errorf("delete exchange %s: %v", name, err)
		}
	})
	return name
}

func (b *testBundle) bind(queue, key, exchange string) {
	b.t.Helper()
	b.chMu.Lock()
	defer b.chMu.Unlock()
	if err := b.ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		b.t.Fatalf("bind: %v", err)
	}
}

// publish publishes a persistent JSON message through exchange.
func (b *testBundle) publish(exchange, key, messageID, body string, headers amqp.Table) {
	b.t.Helper()
	b.chMu.Lock()
	defer b.chMu.Unlock()
	err := b.ch.PublishWithContext(context.Background(), exchange, key, false, false, amqp.Publishing{
		MessageId: messageID, Headers: headers, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body),
	})
	if err != nil {
		b.t.Fatalf("publish: %v", err)
	}
}

// readyMessages is the number of messages ready in queue.
func (b *testBundle) readyMessages(queue string) int {
	b.t.Helper()
	b.chMu.Lock()
	defer b.chMu.Unlock()
	q, err := b.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		b.t.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

// getDeadLetter waits for a message in the dead-letter queue.
func (b *testBundle) getDeadLetter() amqp.Delivery {
	b.t.Helper()
	var d amqp.Delivery
	waitFor(b.t, "a message in the dead-letter queue", func() bool {
		b.chMu.Lock()
		defer b.chMu.Unlock()
		got, ok, err := b.ch.Get(b.dlq, true)
		if err != nil {
			b.t.Fatalf("get: %v", err)
		}
		d = got
		return ok
	})
	return d
}

func (b *testBundle) count(query string, args ...any) int {
	b.t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		b.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// start runs a Consumer for cfg, filled in with the bundle's defaults,
// until the test ends; cleanup checks that Run returned ctx's error.
func (b *testBundle) start(cfg amqpconsumer.Config) (*amqpconsumer.Consumer, context.CancelFunc, chan error) {
	b.t.Helper()
	if cfg.Client == nil {
		cfg.Client = b.client
	}
	if cfg.URL == "" {
		cfg.URL = brokerURL()
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
	if cfg.ReconnectBackoff == 0 {
		cfg.ReconnectBackoff, cfg.ReconnectBackoffMax = 20*time.Millisecond, 200*time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = newLogger(b.logs)
	}
	c, err := amqpconsumer.New(cfg)
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

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ackDropper wraps the consumer's connection to the broker and drops it
// instead of sending the first basic.ack: the ack is lost after the
// transaction committed, as when a connection dies at the worst moment.
type ackDropper struct {
	net.Conn
	fired *atomic.Bool
}

func (c *ackDropper) Write(p []byte) (int, error) {
	if containsMethod(p, 60, 80) && c.fired.CompareAndSwap(false, true) {
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

// containsMethod reports whether p holds an AMQP method frame of the given
// class and method (basic.ack is 60/80).
func containsMethod(p []byte, class, method uint16) bool {
	for i := 0; i+11 <= len(p); {
		size := int(binary.BigEndian.Uint32(p[i+3:]))
		if p[i] == 1 && binary.BigEndian.Uint16(p[i+7:]) == class && binary.BigEndian.Uint16(p[i+9:]) == method {
			return true
		}
		i += 7 + size + 1
	}
	return false
}

// syncBuffer collects log output from concurrent goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
