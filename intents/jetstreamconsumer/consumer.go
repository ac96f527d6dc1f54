package jetstreamconsumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/internal/brokerloop"
)

// ErrAlreadyRunning is returned by Run when the Consumer is already running.
var ErrAlreadyRunning = errors.New("jetstreamconsumer: Run is already running")

// handBackWait bounds how long Run, on its way out, waits for buffered
// messages to hand back to JetStream.
const handBackWait = time.Second

// Consumer feeds a durable JetStream pull consumer into
// intents.Client.Consume. Create it with New and start it with Run.
type Consumer struct {
	client  *intents.Client
	cfg     *Config
	log     *slog.Logger
	secrets []string
	loop    *brokerloop.Loop
}

// New validates cfg and returns a Consumer that records through client. It
// does no I/O: Run connects. Errors wrap ErrInvalidConfig and name the
// field.
func New(client *intents.Client, cfg *Config) (*Consumer, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: the intents client is required", ErrInvalidConfig)
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cons := &Consumer{
		client:  client,
		cfg:     c,
		secrets: secretsIn(c.URL),
		log: c.Logger.With("component", "jetstreamconsumer", "server", redactURL(c.URL),
			"stream", c.Stream, "durable", c.Durable, "consumer", c.Consumer),
	}
	cons.loop = brokerloop.New(&brokerloop.Config{
		Session: cons.session,
		Backoff: cons.reconnectBackoff(),
		// A session that got as far as pulling worked: the failure that
		// ended it is a new one, retried from ReconnectDelay.
		ResetAfter: 0,
		Scrub:      func(err error) error { return scrubErr(err, cons.secrets) },
		Retrying: func(ctx context.Context, r brokerloop.Retry) {
			cons.log.WarnContext(ctx, "cannot consume from JetStream; retrying", "error", r.Err, "attempt", r.Attempt, "retry_in", r.Wait)
		},
		AlreadyRunning: ErrAlreadyRunning,
	})
	return cons, nil
}

// Run consumes until ctx ends, then waits for the handlers in flight to
// finish (each is bounded by AckWait), hands the messages fetched but not
// started back to JetStream, closes its connection and returns ctx's
// error. It connects on its own: a server that is down, a stream that does
// not exist yet or a consumer that cannot be created is logged and retried
// with backoff, never returned. Run may not be called again while it runs
// (ErrAlreadyRunning); it may be called again after it returns.
func (c *Consumer) Run(ctx context.Context) error { return c.loop.Run(ctx) }

// reconnectBackoff paces both Run's reconnects and nats.go's own, alike.
func (c *Consumer) reconnectBackoff() brokerloop.Backoff {
	return brokerloop.Backoff{Base: c.cfg.ReconnectDelay, Max: c.cfg.ReconnectDelayMax}
}

// session connects, sets the durable consumer up and pulls until ctx ends
// or the pull stops for good (the consumer was deleted, the connection
// closed). pulled reports whether it got as far as pulling.
func (c *Consumer) session(ctx context.Context) (pulled bool, err error) {
	nc, err := c.connect()
	if err != nil {
		return false, fmt.Errorf("connect to %s: %w", redactURL(c.cfg.URL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false, scrubErr(err, c.secrets)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, c.consumerConfig())
	if err != nil {
		return false, fmt.Errorf("create or update durable consumer %q on stream %q: %w", c.cfg.Durable, c.cfg.Stream, scrubErr(err, c.secrets))
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(c.cfg.Batch))
	if err != nil {
		return false, fmt.Errorf("pull from durable consumer %q: %w", c.cfg.Durable, scrubErr(err, c.secrets))
	}
	c.log.InfoContext(ctx, "consuming", "filter_subject", c.cfg.FilterSubject, "concurrency", c.cfg.Concurrency,
		"max_deliver", c.cfg.MaxDeliver, "ack_wait", c.cfg.AckWait)

	pullCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	brokerloop.Work(c.cfg.Concurrency, func() (jetstream.Msg, bool) {
		msg, err := it.Next(jetstream.NextContext(pullCtx))
		if err != nil {
			if pullCtx.Err() == nil {
				// One worker's pull failing ends the session for all.
				stop(fmt.Errorf("pull from durable consumer %q: %w", c.cfg.Durable, scrubErr(err, c.secrets)))
			}
			return nil, false
		}
		return msg, true
	}, func(msg jetstream.Msg) { c.handle(ctx, msg) })
	c.handBack(ctx, it)
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	return true, context.Cause(pullCtx)
}

// connect opens a connection that reconnects forever with the configured
// backoff and never buffers acks while disconnected.
func (c *Consumer) connect() (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("outbox jetstream consumer " + c.cfg.Durable),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			return c.reconnectBackoff().Delay(attempts - 1)
		}),
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.log.Warn("disconnected from NATS; reconnecting", "error", scrubErr(err, c.secrets))
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { c.log.Info("reconnected to NATS") }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.log.Warn("NATS connection error", "error", scrubErr(err, c.secrets))
		}),
	}
	nc, err := nats.Connect(c.cfg.URL, append(opts, c.cfg.Options...)...)
	return nc, scrubErr(err, c.secrets)
}

func (c *Consumer) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.cfg.Durable,
		FilterSubject: c.cfg.FilterSubject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxDeliver:    c.cfg.MaxDeliver,
	}
}

// handBack negatively acknowledges the messages fetched but not started,
// so that JetStream redelivers them at once instead of after AckWait.
func (c *Consumer) handBack(ctx context.Context, it jetstream.MessagesContext) {
	it.Drain()
	handed := 0
	deadline := time.Now().Add(handBackWait)
	for time.Now().Before(deadline) {
		msg, err := it.Next(jetstream.NextMaxWait(time.Until(deadline)))
		if err != nil {
			break
		}
		if msg.Nak() == nil {
			handed++
		}
	}
	it.Stop()
	if handed > 0 {
		c.log.InfoContext(ctx, "handed unstarted messages back to JetStream", "messages", handed)
	}
}
