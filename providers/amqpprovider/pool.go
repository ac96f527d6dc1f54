package amqpprovider

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// connection is one AMQP connection and whether the broker has blocked it.
type connection struct {
	c *amqp.Connection

	mu            sync.Mutex
	blocked       bool
	blockedReason string
}

func (c *connection) isBlocked() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocked, c.blockedReason
}

// pubChannel is a confirm-mode channel with at most one publish in flight,
// so that a basic.return or a close reason belongs to that publish.
type pubChannel struct {
	conn    *connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// acquire returns an idle channel on the current connection, or opens one,
// connecting first when there is no live connection.
func (p *Provider) acquire(ctx context.Context) (*pubChannel, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	for len(p.idle) > 0 {
		pc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if pc.conn == p.conn && !pc.ch.IsClosed() && !pc.conn.c.IsClosed() {
			p.mu.Unlock()
			return pc, nil
		}
		go func() { _ = pc.ch.Close() }()
	}
	conn := p.conn
	p.mu.Unlock()

	if conn == nil || conn.c.IsClosed() {
		var err error
		if conn, err = p.connect(ctx); err != nil {
			return nil, err
		}
	}
	ch, err := conn.c.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return &pubChannel{
		conn:    conn,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// connect dials a new connection unless another caller just did.
func (p *Provider) connect(ctx context.Context) (*connection, error) {
	p.dialMu.Lock()
	defer p.dialMu.Unlock()
	p.mu.Lock()
	current, closed := p.conn, p.closed
	p.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if current != nil && !current.c.IsClosed() {
		return current, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := amqp.DialConfig(p.url, p.amqpConfig)
	if err != nil {
		return nil, err
	}
	conn := &connection{c: c}
	blocks := c.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() {
		for b := range blocks {
			conn.mu.Lock()
			conn.blocked, conn.blockedReason = b.Active, b.Reason
			conn.mu.Unlock()
			if b.Active {
				p.log.Warn("rabbitmq is blocking publishers", "url", p.redactedURL, "reason", b.Reason)
			}
		}
	}()
	closes := c.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		if err := <-closes; err != nil {
			p.log.Warn("rabbitmq publishing connection lost; the next publish reconnects", "url", p.redactedURL, "error", p.scrub(err.Error()))
		}
	}()

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return nil, ErrClosed
	}
	p.conn = conn
	p.log.Info("connected to rabbitmq for publishing", "url", p.redactedURL)
	return conn, nil
}

// release returns a channel to the pool when healthy is true and it is
// still usable; otherwise it closes it, discarding any stale confirm or
// return that might otherwise be taken for the next publish's.
func (p *Provider) release(pc *pubChannel, healthy bool) {
	p.mu.Lock()
	keep := healthy && !p.closed && pc.conn == p.conn && !pc.ch.IsClosed() && len(p.idle) < maxIdleChannels
	if keep {
		p.idle = append(p.idle, pc)
	}
	p.mu.Unlock()
	if !keep {
		// Closing waits for the broker's close-ok, which a broken
		// connection never sends: never make the caller wait for it.
		go func() { _ = pc.ch.Close() }()
	}
}

// abandon stops using conn, which failed to confirm a publish in time and
// may be dead without knowing it: the next publish dials afresh. conn is
// closed in the background, bounded by the confirm timeout.
func (p *Provider) abandon(conn *connection) {
	p.mu.Lock()
	if p.conn == conn {
		p.conn = nil
	}
	p.mu.Unlock()
	go func() { _ = conn.c.CloseDeadline(time.Now().Add(p.confirmTimeout)) }()
}

// connLost reports whether pc's connection is closed.
func (p *Provider) connLost(pc *pubChannel) bool { return pc.conn.c.IsClosed() }

// Close closes the connection. Perform calls in flight end as their
// connection closes (ambiguous if a publish was awaiting its confirm);
// later calls return OutcomeRetry wrapping ErrClosed. Close is idempotent.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	idle, conn := p.idle, p.conn
	p.idle, p.conn = nil, nil
	p.mu.Unlock()
	for _, pc := range idle {
		go func() { _ = pc.ch.Close() }()
	}
	if conn != nil && !conn.c.IsClosed() {
		return conn.c.CloseDeadline(time.Now().Add(p.confirmTimeout))
	}
	return nil
}
