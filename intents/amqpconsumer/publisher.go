package amqpconsumer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// publisher publishes the consumer's republished and dead-lettered copies
// on a confirm-mode channel of its own, one publish at a time, so that a
// basic.return or a close reason belongs to the publish in flight.
type publisher struct {
	conn    *amqp.Connection
	timeout time.Duration

	mu      sync.Mutex
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// publish publishes msg with the mandatory flag and waits for the broker's
// confirm. It fails when the message is nacked, returned as unroutable,
// unconfirmed within the timeout, or the channel closes (a missing
// exchange).
func (p *publisher) publish(exchange, key string, msg amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil || p.ch.IsClosed() {
		ch, err := p.conn.Channel()
		if err != nil {
			return fmt.Errorf("open publishing channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("enable publisher confirms: %w", err)
		}
		p.ch = ch
		p.returns = ch.NotifyReturn(make(chan amqp.Return, 1))
		p.closes = ch.NotifyClose(make(chan *amqp.Error, 1))
	}
	dc, err := p.ch.PublishWithDeferredConfirm(exchange, key, true, false, msg)
	if err != nil {
		p.discard()
		return err
	}
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	select {
	case <-dc.Done():
	case <-timer.C:
		p.discard()
		return fmt.Errorf("no publisher confirm within %s", p.timeout)
	}
	if !dc.Acked() {
		var reason error = errors.New("the broker nacked the message")
		select {
		case e := <-p.closes:
			if e != nil {
				reason = fmt.Errorf("channel closed: %w", e)
			}
		default:
		}
		p.discard()
		return reason
	}
	select {
	case r := <-p.returns:
		return fmt.Errorf("unroutable: exchange %q routed it nowhere for routing key %q (%d %s)", exchange, key, r.ReplyCode, r.ReplyText)
	default:
	}
	return nil
}

// discard drops the channel, whose pending confirms or returns must not be
// taken for a later publish's. Closing waits for the broker, so it runs in
// the background.
func (p *publisher) discard() {
	if ch := p.ch; ch != nil {
		go func() { _ = ch.Close() }()
	}
	p.ch = nil
}

func (p *publisher) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discard()
}
