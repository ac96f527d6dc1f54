package amqpconsumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/internal/brokerloop"
	"github.com/outboxkit/outbox/internal/scrub"
)

// ErrInvalidConfig is wrapped by every error New returns for a Config field
// that is wrong; the message names the field.
var ErrInvalidConfig = errors.New("amqpconsumer: invalid config")

// ErrAlreadyRunning is returned by Run when the Consumer is already running.
var ErrAlreadyRunning = errors.New("amqpconsumer: Run is already running")

// Consumer consumes one queue through the inbox. Create it with New and
// start it with Run.
type Consumer struct {
	client      *intents.Client
	cfg         Config
	amqpConfig  amqp.Config
	redactedURL string
	password    string
	log         *slog.Logger
	loop        *brokerloop.Loop
	stats       counters
}

// New validates cfg, fills in its defaults and returns a Consumer that
// records through client. It does not connect: Run does. Errors wrap
// ErrInvalidConfig, name the offending field and never quote the URL.
func New(client *intents.Client, cfg *Config) (*Consumer, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: the intents client is required", ErrInvalidConfig)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	valid, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	uri, _ := amqp.ParseURI(valid.URL) // validated by withDefaults
	c := &Consumer{client: client, cfg: valid, password: uri.Password, redactedURL: redactURL(valid.URL)}
	if valid.AMQPConfig != nil {
		c.amqpConfig = *valid.AMQPConfig
	}
	props := amqp.NewConnectionProperties()
	for k, v := range c.amqpConfig.Properties {
		props[k] = v
	}
	if _, ok := props["connection_name"]; !ok {
		props["connection_name"] = "outbox amqpconsumer " + valid.Consumer
	}
	c.amqpConfig.Properties = props
	c.log = valid.Logger.With("consumer", valid.Consumer, "queue", valid.Queue)
	c.loop = brokerloop.New(&brokerloop.Config{
		Session: c.session,
		Backoff: brokerloop.Backoff{Base: valid.ReconnectDelay, Max: valid.ReconnectDelayMax, JitterPercent: 20},
		// A session that outlived the longest wait was a healthy one, not
		// a flapping broker's: the next failure starts the backoff over.
		ResetAfter:     valid.ReconnectDelayMax,
		Scrub:          c.scrubErr,
		Retrying:       c.logRetry,
		AlreadyRunning: ErrAlreadyRunning,
	})
	return c, nil
}

// String describes c without the URL's password.
func (c *Consumer) String() string {
	return fmt.Sprintf("amqpconsumer.Consumer{URL:%q Queue:%q Consumer:%q}", c.redactedURL, c.cfg.Queue, c.cfg.Consumer)
}

// Run consumes until ctx ends, then stops consuming, waits for the handlers
// in flight (up to Config.ShutdownGrace), closes the connection and returns
// ctx.Err(). It never returns because the broker is unreachable or the
// connection drops: it logs and reconnects with backoff. A second Run while
// one is running returns ErrAlreadyRunning.
func (c *Consumer) Run(ctx context.Context) error { return c.loop.Run(ctx) }

// logRetry logs a session's end: a lost connection as a warning, a
// consumer that could not start (the broker down, the login refused, the
// queue missing) as an error.
func (c *Consumer) logRetry(ctx context.Context, r brokerloop.Retry) {
	if r.Started {
		c.log.WarnContext(ctx, "rabbitmq connection lost; reconnecting", "url", c.redactedURL, "error", r.Err.Error(), "retry_in", r.Wait)
	} else {
		c.log.ErrorContext(ctx, "rabbitmq consumer cannot start; retrying", "url", c.redactedURL, "error", r.Err.Error(), "retry_in", r.Wait)
	}
}

// session consumes over one connection until ctx ends or the connection,
// channel or consumer is lost. connected reports whether consuming started.
func (c *Consumer) session(ctx context.Context) (connected bool, err error) {
	conn, err := amqp.DialConfig(c.cfg.URL, c.amqpConfig)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.CloseDeadline(time.Now().Add(c.cfg.PublishTimeout)) }()
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(c.cfg.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("set prefetch: %w", err)
	}
	tag := consumerTag(c.cfg.Consumer)
	deliveries, err := ch.Consume(c.cfg.Queue, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume queue %q: %w", c.cfg.Queue, err)
	}
	c.stats.connections.Add(1)
	c.log.InfoContext(ctx, "consuming from rabbitmq", "url", c.redactedURL, "prefetch", c.cfg.Prefetch, "concurrency", c.cfg.Concurrency)

	s := &session{conn: conn, pub: &publisher{conn: conn, timeout: c.cfg.PublishTimeout}}
	defer s.pub.close()
	handlerCtx, release := graceContext(ctx, c.cfg.ShutdownGrace, func() { _ = ch.Cancel(tag, false) })
	defer release()

	brokerloop.Work(c.cfg.Concurrency, func() (amqp.Delivery, bool) {
		select {
		case <-ctx.Done():
			return amqp.Delivery{}, false
		case d, ok := <-deliveries:
			// A delivery taken as ctx ends is left unacked: the broker
			// requeues it when the connection closes.
			return d, ok && ctx.Err() == nil
		}
	}, func(d amqp.Delivery) { c.handle(ctx, handlerCtx, s, d) })
	if ctx.Err() != nil {
		return true, nil
	}
	select {
	case e := <-connClosed:
		if e != nil {
			return true, e
		}
	default:
	}
	return true, errors.New("the channel was closed or the broker cancelled the consumer (was the queue deleted?)")
}

// graceContext returns the context handlers run on: it outlives ctx by
// grace, so that a shutdown lets the handlers in flight commit and ack.
// When ctx ends, stopping runs (to stop new deliveries) and the grace
// starts. release cancels the handlers' context and stops the grace timer.
func graceContext(ctx context.Context, grace time.Duration, stopping func()) (handlerCtx context.Context, release func()) {
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	var mu sync.Mutex
	var timer *time.Timer
	stopShutdown := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(grace, cancelHandlers)
		mu.Unlock()
		stopping()
	})
	return handlerCtx, func() {
		stopShutdown()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancelHandlers()
	}
}

// session is what handlers share over one connection.
type session struct {
	conn *amqp.Connection
	pub  *publisher
}

func consumerTag(consumer string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "outbox-" + consumer + "-" + hex.EncodeToString(b)
}

// scrubErr is err with the URL's password masked as url.Redacted masks it
// in the logged URL, in case the error quoted it; the chain stays intact.
func (c *Consumer) scrubErr(err error) error {
	if c.password == "" {
		return err
	}
	msg := err.Error()
	clean := strings.ReplaceAll(msg, c.password, "xxxxx")
	if clean == msg {
		return err
	}
	return &scrub.Error{Msg: clean, Err: err}
}

func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[invalid URL]"
	}
	return u.Redacted()
}

// Stats counts what a Consumer did since it was created.
type Stats struct {
	// Processed counts messages committed by the handler and acked.
	Processed int64
	// Duplicates counts redeliveries of processed messages, acked with no
	// effect.
	Duplicates int64
	// Retried counts failed messages republished for another delivery.
	Retried int64
	// DeadLettered counts messages published to the dead-letter exchange,
	// for any reason.
	DeadLettered int64
	// Refused counts messages never processed because they had no usable
	// id (dead-lettered or rejected).
	Refused int64
	// Requeued counts messages nacked back to the queue uncounted: their
	// transaction failed outside the handler, a republish or dead-letter
	// publish failed, or a shutdown cut their handler short.
	Requeued int64
	// AckFailures counts acknowledgements that could not be sent (the
	// connection was lost); the broker redelivers those messages.
	AckFailures int64
	// Connections counts the connections on which consuming started.
	Connections int64
}

type counters struct {
	processed, duplicates, retried, deadLettered, refused, requeued, ackFailures, connections atomic.Int64
}

// Stats returns the consumer's counters. It is safe to call at any time.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Processed: s.processed.Load(), Duplicates: s.duplicates.Load(), Retried: s.retried.Load(),
		DeadLettered: s.deadLettered.Load(), Refused: s.refused.Load(), Requeued: s.requeued.Load(),
		AckFailures: s.ackFailures.Load(), Connections: s.connections.Load(),
	}
}
