package jetstreamconsumer

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/internal/brokerloop"
)

// handle processes one delivery: Consume, then ack, nak or term as the
// package doc says. It never returns an error: every outcome is settled
// with the server and logged.
func (c *Consumer) handle(ctx context.Context, msg jetstream.Msg) {
	delivered := uint64(1)
	log := c.log.With("subject", msg.Subject())
	if meta, err := msg.Metadata(); err == nil {
		delivered = meta.NumDelivered
		log = log.With("stream_seq", meta.Sequence.Stream, "delivered", delivered)
	}
	id := msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		log.ErrorContext(ctx, "refused a message without a "+jetstream.MsgIDHeader+" header: terminated, it will not be processed or redelivered")
		c.term(ctx, msg, log)
		return
	}
	log = log.With("message_id", id)

	handlerCtx, cancel := context.WithTimeout(traceContext(context.WithoutCancel(ctx), msg.Headers()), c.cfg.AckWait)
	defer cancel()
	res, err := c.client.Consume(handlerCtx, intents.Message{Consumer: c.cfg.Consumer, ID: id},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return c.cfg.Handler(ctx, msg, tx, rec)
		})
	// Every failure counts: JetStream counts every delivery itself, and
	// enforces the consumer's MaxDeliver whatever Run decides.
	switch brokerloop.Decide(brokerloop.Outcome{Err: err, Delivered: int(delivered), MaxDeliver: c.cfg.MaxDeliver}) {
	case brokerloop.Refuse:
		log.ErrorContext(ctx, "refused a message whose "+jetstream.MsgIDHeader+" is not a valid message id: terminated, it will not be processed or redelivered", "error", err)
		c.term(ctx, msg, log)
	case brokerloop.GiveUp:
		log.ErrorContext(ctx, "handler failed on the last delivery: message terminated, JetStream will not redeliver it",
			"error", err, "max_deliver", c.cfg.MaxDeliver)
		c.term(ctx, msg, log)
	case brokerloop.Redeliver:
		delay := brokerloop.Backoff{Base: c.cfg.RedeliveryDelay, Max: c.cfg.RedeliveryDelayMax}.Delay(int(delivered) - 1)
		log.WarnContext(ctx, "handler failed; nothing was written and the message will be redelivered",
			"error", err, "redeliver_in", delay, "max_deliver", c.cfg.MaxDeliver)
		if err := msg.NakWithDelay(delay); err != nil {
			log.WarnContext(ctx, "nak failed: JetStream will redeliver the message after AckWait", "error", scrubErr(err, c.secrets))
		}
	case brokerloop.Ack:
		c.ack(ctx, msg, res, log)
	}
}

// ack acknowledges a committed or duplicate message and waits for the
// server to confirm it.
func (c *Consumer) ack(ctx context.Context, msg jetstream.Msg, res intents.Result, log *slog.Logger) {
	ackCtx, cancelAck := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.AckTimeout)
	defer cancelAck()
	if err := msg.DoubleAck(ackCtx); err != nil {
		log.WarnContext(ctx, "ack failed after the commit: JetStream will redeliver the message after AckWait and it will be acknowledged as a duplicate",
			"error", scrubErr(err, c.secrets), "duplicate", res.Duplicate)
		return
	}
	if res.Duplicate {
		log.DebugContext(ctx, "duplicate delivery acknowledged with no effect")
	} else {
		log.DebugContext(ctx, "message processed and acknowledged", "intents", len(res.Intents))
	}
}

func (c *Consumer) term(ctx context.Context, msg jetstream.Msg, log *slog.Logger) {
	// Term, not TermWithReason: servers before 2.10.4 ignore a term with a
	// reason, and the message would be redelivered.
	if err := msg.Term(); err != nil {
		log.WarnContext(ctx, "term failed: JetStream will redeliver the message after AckWait and it will be refused again", "error", scrubErr(err, c.secrets))
	}
}
