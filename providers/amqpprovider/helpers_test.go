package amqpprovider_test

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// brokerURL is the RabbitMQ the tests run against.
func brokerURL() string {
	if v := os.Getenv("TEST_RABBITMQ_URL"); v != "" {
		return v
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// broker is a test's own connection for declaring, inspecting and deleting
// its queues and exchanges.
type broker struct {
	t  *testing.T
	ch *amqp.Channel
	mu sync.Mutex
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", brokerURL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &broker{t: t, ch: ch}
}

func uniqueName(t *testing.T, what string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name())
	return "outbox-test." + what + "." + name + "." + hex.EncodeToString(b)
}

// queue declares a queue deleted when the test ends.
func (b *broker) queue(name string) string {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
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

// exchange declares an exchange deleted when the test ends.
func (b *broker) exchange(name, kind string) string {
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

func (b *broker) bind(queue, key, exchange string) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		b.t.Fatalf("bind: %v", err)
	}
}

// count returns the number of ready messages in queue.
func (b *broker) count(queue string) int {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	q, err := b.ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		b.t.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

// get takes one message from queue, waiting for it up to a deadline.
func (b *broker) get(queue string) amqp.Delivery {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		d, ok, err := b.ch.Get(queue, true)
		b.mu.Unlock()
		if err != nil {
			b.t.Fatalf("get: %v", err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("no message arrived in %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// faultyConn wraps a connection to the broker and acts when the client
// writes a basic.publish frame: it either drops the connection right after
// the publish is written (the confirm is lost) or stalls every read after
// it (the confirm never arrives) until release is closed.
type faultyConn struct {
	net.Conn
	drop    bool
	fired   atomic.Bool
	release chan struct{}
}

func (c *faultyConn) Write(p []byte) (int, error) {
	// Mark before writing, so a confirm racing back is already stalled.
	fire := containsMethod(p, 60, 40) && c.fired.CompareAndSwap(false, true)
	n, err := c.Conn.Write(p)
	if fire && c.drop {
		_ = c.Conn.Close()
	}
	return n, err
}

func (c *faultyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.drop && c.fired.Load() {
		<-c.release
		return 0, io.EOF
	}
	return n, err
}

// faultyDial returns an amqp.Config whose connections are faultyConns.
func faultyDial(t *testing.T, drop bool) *amqp.Config {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	return &amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(5*time.Second)(network, addr)
		if err != nil {
			return nil, err
		}
		return &faultyConn{Conn: c, drop: drop, release: release}, nil
	}}
}

// containsMethod reports whether p holds an AMQP method frame of the given
// class and method (basic.publish is 60/40, basic.ack 60/80).
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
