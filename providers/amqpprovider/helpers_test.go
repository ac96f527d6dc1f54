package amqpprovider_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/testkit"
)

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
	fire := testkit.ContainsAMQPMethod(p, 60, 40) && c.fired.CompareAndSwap(false, true)
	n, err := c.Conn.Write(p)
	if fire && c.drop {
		_ = c.Conn.Close()
	}
	return n, err
}

func (c *faultyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.fired.Load() {
		// Anything read once the publish is on its way (its confirm above
		// all) is lost: the client must never see it.
		if c.drop {
			return 0, net.ErrClosed
		}
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
