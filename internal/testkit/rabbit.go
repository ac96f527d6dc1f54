package testkit

import (
	"context"
	"encoding/binary"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultRabbitURL is the RabbitMQ tests use when TEST_RABBITMQ_URL is unset.
const DefaultRabbitURL = "amqp://guest:guest@127.0.0.1:5672/"

// RabbitURL is the RabbitMQ tests run against: TEST_RABBITMQ_URL, or
// DefaultRabbitURL when that is unset or empty.
func RabbitURL() string {
	if v := os.Getenv("TEST_RABBITMQ_URL"); v != "" {
		return v
	}
	return DefaultRabbitURL
}

// UniqueName returns a RabbitMQ queue or exchange name unique to this test
// and run: "outbox-test.<what>.<test name>.<random hex>", with "/" and " "
// in the test name replaced.
func UniqueName(t testing.TB, what string) string {
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "outbox-test." + what + "." + name + "." + Suffix()
}

// RabbitBroker is a test's own connection to RabbitMQ for declaring,
// inspecting and deleting its queues and exchanges. Its methods are safe
// for concurrent use and fail the test on any error.
type RabbitBroker struct {
	t  testing.TB
	mu sync.Mutex // serialises use of ch, which is not safe for concurrent use
	ch *amqp.Channel
}

// Rabbit connects to RabbitURL and opens a channel; the connection is
// closed when the test ends.
func Rabbit(t testing.TB) *RabbitBroker {
	t.Helper()
	url := RabbitURL()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s (set TEST_RABBITMQ_URL): %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &RabbitBroker{t: t, ch: ch}
}

// DeclareQueue declares a non-durable classic queue called name and
// deletes it when the test ends (a failed delete is a test error). It
// returns name.
func (b *RabbitBroker) DeclareQueue(name string) string {
	b.t.Helper()
	return b.DeclareQueueWith(name, nil)
}

// DeclareQueueWith is DeclareQueue with the queue's arguments (x-max-length,
// x-overflow, ...).
func (b *RabbitBroker) DeclareQueueWith(name string, args amqp.Table) string {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		b.t.Fatalf("declare queue: %v", err)
	}
	b.t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, err := b.ch.QueueDelete(name, false, false, false); err != nil {
			b.t.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// DeclareExchange declares a non-durable exchange of kind (amqp.ExchangeDirect,
// amqp.ExchangeFanout, ...) called name and deletes it when the test ends
// (a failed delete is a test error). It returns name.
func (b *RabbitBroker) DeclareExchange(name, kind string) string {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ch.ExchangeDeclare(name, kind, false, false, false, false, nil); err != nil {
		b.t.Fatalf("declare exchange: %v", err)
	}
	b.t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.ch.ExchangeDelete(name, false, false); err != nil {
			b.t.Errorf("delete exchange %s: %v", name, err)
		}
	})
	return name
}

// Bind binds queue to exchange with routing key key.
func (b *RabbitBroker) Bind(queue, key, exchange string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		b.t.Fatalf("bind: %v", err)
	}
}

// Publish publishes msg to exchange ("" for the default exchange) with
// routing key key, unmandatory and without waiting for a confirm.
func (b *RabbitBroker) Publish(exchange, key string, msg amqp.Publishing) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ch.PublishWithContext(context.Background(), exchange, key, false, false, msg); err != nil {
		b.t.Fatalf("publish: %v", err)
	}
}

// Ready returns the number of messages ready for delivery in queue.
func (b *RabbitBroker) Ready(queue string) int {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	q, err := b.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		b.t.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

// Get takes one message from queue (auto-acknowledged), polling until one
// arrives; it fails the test if none does within timeout.
func (b *RabbitBroker) Get(queue string, timeout time.Duration) amqp.Delivery {
	b.t.Helper()
	var d amqp.Delivery
	Eventually(b.t, timeout, "a message in "+queue, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		got, ok, err := b.ch.Get(queue, true)
		if err != nil {
			b.t.Fatalf("get: %v", err)
		}
		d = got
		return ok
	})
	return d
}

// ContainsAMQPMethod reports whether p, bytes written to or read from an
// AMQP 0-9-1 connection, holds a method frame of the given class and
// method (basic.publish is 60/40, basic.ack 60/80). Fault-injecting
// net.Conn wrappers use it to act on a particular frame.
func ContainsAMQPMethod(p []byte, class, method uint16) bool {
	for i := 0; i+11 <= len(p); {
		size := int(binary.BigEndian.Uint32(p[i+3:]))
		if p[i] == 1 && binary.BigEndian.Uint16(p[i+7:]) == class && binary.BigEndian.Uint16(p[i+9:]) == method {
			return true
		}
		i += 7 + size + 1
	}
	return false
}
