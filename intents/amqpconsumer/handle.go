package amqpconsumer

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strconv"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/internal/brokerloop"
)

// Headers the consumer sets on the copies it republishes and dead-letters.
const (
	// HeaderRedeliveries says how many times the message was delivered
	// again after its handler failed (an AMQP long integer; absent on a
	// first delivery). On a dead-lettered copy it is the count at the last
	// delivery, so the handler ran HeaderRedeliveries+1 times.
	HeaderRedeliveries = "x-outbox-redeliveries"
	// HeaderDeadLetterReason says why a message was dead-lettered: one of
	// the Reason constants.
	HeaderDeadLetterReason = "x-outbox-dead-letter-reason"
	// HeaderError holds the last handler error (at most 1024 bytes) of a
	// dead-lettered message, or what is wrong with its id.
	HeaderError = "x-outbox-error"
	// HeaderQueue and HeaderConsumer name the queue and the intents
	// consumer that gave up on a dead-lettered message.
	HeaderQueue    = "x-outbox-queue"
	HeaderConsumer = "x-outbox-consumer"
	// HeaderOriginalExchange and HeaderOriginalRoutingKey keep where a
	// message was first published, since a republished copy goes through
	// the default exchange.
	HeaderOriginalExchange   = "x-outbox-original-exchange"
	HeaderOriginalRoutingKey = "x-outbox-original-routing-key"
)

// Values of HeaderDeadLetterReason.
const (
	// ReasonMaxDeliver: the handler failed Config.MaxDeliver times.
	ReasonMaxDeliver = "max-deliver"
	// ReasonNoMessageID: neither the message-id property nor
	// Config.MessageIDHeader was set.
	ReasonNoMessageID = "no-message-id"
	// ReasonInvalidMessageID: the id is longer than
	// intents.MaxMessageIDLength or not printable.
	ReasonInvalidMessageID = "invalid-message-id"
)

// maxErrorHeader bounds HeaderError.
const maxErrorHeader = 1024

// ErrHandlerAck is returned by the Acknowledger of the Delivery a Handler
// receives: the consumer acknowledges after the commit, never the handler.
var ErrHandlerAck = errors.New("amqpconsumer: a handler must not acknowledge its delivery; the consumer does after the commit")

type refusingAcknowledger struct{}

func (refusingAcknowledger) Ack(uint64, bool) error        { return ErrHandlerAck }
func (refusingAcknowledger) Nack(uint64, bool, bool) error { return ErrHandlerAck }
func (refusingAcknowledger) Reject(uint64, bool) error     { return ErrHandlerAck }

// handle runs one delivery through the inbox and settles it. ctx is Run's
// context; hctx, the handlers', outlives it by the shutdown grace.
func (c *Consumer) handle(ctx, hctx context.Context, s *session, d amqp.Delivery) {
	id := c.messageID(d)
	if id == "" {
		c.refuse(ctx, s, d, ReasonNoMessageID, "no message-id property and no "+c.cfg.MessageIDHeader+" header")
		return
	}
	log := c.log.With("message_id", id, "delivery_tag", d.DeliveryTag)
	forHandler := d
	forHandler.Acknowledger = refusingAcknowledger{}
	var handlerErr error
	res, err := c.client.Consume(traceContext(hctx, d.Headers), intents.Message{Consumer: c.cfg.Consumer, ID: id},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			handlerErr = c.cfg.Handler(ctx, forHandler, tx, rec)
			return handlerErr
		})
	switch brokerloop.Decide(brokerloop.Outcome{
		Err: err, Delivered: redeliveries(d) + 1, MaxDeliver: c.cfg.MaxDeliver,
		// The consumer counts deliveries itself (HeaderRedeliveries), and
		// only the message's own failures: not a shutdown's, nor the
		// database's.
		Uncounted: hctx.Err() != nil || (handlerErr == nil && !messageFault(err)),
	}) {
	case brokerloop.Ack:
		c.ack(ctx, d, res, log)
	case brokerloop.Refuse:
		c.refuse(ctx, s, d, ReasonInvalidMessageID, err.Error())
	case brokerloop.Requeue:
		if hctx.Err() != nil {
			// The shutdown grace ran out: rolled back, not the message's fault.
			c.requeue(ctx, d, false)
			log.WarnContext(ctx, "handler cut short by shutdown; message requeued", "error", err)
			return
		}
		log.WarnContext(ctx, "transaction failed outside the handler; message requeued", "error", err, "retry_in", c.cfg.ReconnectDelay)
		c.requeue(ctx, d, true)
	case brokerloop.GiveUp:
		c.deadLetter(ctx, s, d, ReasonMaxDeliver, err.Error())
	case brokerloop.Redeliver:
		c.republish(ctx, s, d, log, err)
	}
}

// ack acknowledges a committed or duplicate delivery and counts it.
func (c *Consumer) ack(ctx context.Context, d amqp.Delivery, res intents.Result, log *slog.Logger) {
	if err := d.Ack(false); err != nil {
		c.stats.ackFailures.Add(1)
		log.WarnContext(ctx, "ack lost after commit; the broker will redeliver and the redelivery is acked as a duplicate", "error", err)
		return
	}
	if res.Duplicate {
		c.stats.duplicates.Add(1)
		log.DebugContext(ctx, "duplicate delivery acked with no effect")
	} else {
		c.stats.processed.Add(1)
	}
}

// messageFault reports whether err, returned by Consume, was caused by the
// message's handling rather than by the database.
func messageFault(err error) bool {
	var panicErr *intents.PanicError
	return errors.As(err, &panicErr) || errors.Is(err, intents.ErrInvalidIntent) || errors.Is(err, intents.ErrDuplicateKey)
}

// messageID is the message-id property, or the fallback header's string
// value, or "".
func (c *Consumer) messageID(d amqp.Delivery) string {
	if d.MessageId != "" {
		return d.MessageId
	}
	switch v := d.Headers[c.cfg.MessageIDHeader].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// republish puts a failed message with deliveries left back at the end of
// the queue, its count incremented: RabbitMQ's own requeue would neither
// count it nor let the messages behind it go first.
func (c *Consumer) republish(ctx context.Context, s *session, d amqp.Delivery, log *slog.Logger, cause error) {
	n := redeliveries(d)
	if c.cfg.MaxDeliver == NoDeliverLimit {
		// Nothing will stop a message that always fails: pace it.
		brokerloop.Sleep(ctx, c.cfg.ReconnectDelay)
	}
	headers := cloneHeaders(d)
	headers[HeaderRedeliveries] = int64(n + 1)
	if _, ok := headers[HeaderOriginalExchange]; !ok {
		headers[HeaderOriginalExchange] = d.Exchange
		headers[HeaderOriginalRoutingKey] = d.RoutingKey
	}
	if err := s.pub.publish("", c.cfg.Queue, copyOf(d, headers)); err != nil {
		log.ErrorContext(ctx, "handler failed and the message could not be republished; requeued uncounted", "error", cause, "publish_error", err)
		c.requeue(ctx, d, true)
		return
	}
	if err := d.Ack(false); err != nil {
		// The copy is queued and the original comes back too: the inbox
		// absorbs whichever succeeds second.
		c.stats.ackFailures.Add(1)
	}
	c.stats.retried.Add(1)
	log.WarnContext(ctx, "handler failed; message requeued", "error", cause, "failures", n+1, "max_deliver", c.cfg.MaxDeliver)
}

// refuse dead-letters, or rejects, a message that cannot be processed.
func (c *Consumer) refuse(ctx context.Context, s *session, d amqp.Delivery, reason, detail string) {
	c.stats.refused.Add(1)
	if c.cfg.DeadLetterExchange == "" {
		_ = d.Reject(false)
		c.log.ErrorContext(ctx, "message refused and rejected without requeue: it has no usable id", "reason", reason, "detail", detail, "delivery_tag", d.DeliveryTag)
		return
	}
	c.deadLetter(ctx, s, d, reason, detail)
}

// deadLetter publishes d to the dead-letter exchange and acks it, or
// requeues it if the publish is not confirmed.
func (c *Consumer) deadLetter(ctx context.Context, s *session, d amqp.Delivery, reason, detail string) {
	headers := cloneHeaders(d)
	if len(detail) > maxErrorHeader {
		detail = detail[:maxErrorHeader]
	}
	headers[HeaderDeadLetterReason] = reason
	headers[HeaderError] = detail
	headers[HeaderQueue] = c.cfg.Queue
	headers[HeaderConsumer] = c.cfg.Consumer
	headers[HeaderRedeliveries] = int64(redeliveries(d))
	routingKey := d.RoutingKey
	if rk, ok := headers[HeaderOriginalRoutingKey].(string); ok {
		routingKey = rk
	}
	log := c.log.With("message_id", d.MessageId, "delivery_tag", d.DeliveryTag, "reason", reason)
	if err := s.pub.publish(c.cfg.DeadLetterExchange, routingKey, copyOf(d, headers)); err != nil {
		log.ErrorContext(ctx, "cannot dead-letter the message; requeued", "dead_letter_exchange", c.cfg.DeadLetterExchange, "error", err)
		c.requeue(ctx, d, true)
		return
	}
	if err := d.Ack(false); err != nil {
		c.stats.ackFailures.Add(1)
	}
	c.stats.deadLettered.Add(1)
	log.ErrorContext(ctx, "message dead-lettered", "dead_letter_exchange", c.cfg.DeadLetterExchange, "detail", detail)
}

// requeue nacks d back to the queue, after a pause when pause is true and
// Run is not stopping.
func (c *Consumer) requeue(ctx context.Context, d amqp.Delivery, pause bool) {
	if pause {
		brokerloop.Sleep(ctx, c.cfg.ReconnectDelay)
	}
	c.stats.requeued.Add(1)
	_ = d.Nack(false, true)
}

// redeliveries reads HeaderRedeliveries; absent or unreadable is 0.
func redeliveries(d amqp.Delivery) int {
	var n int64
	switch v := d.Headers[HeaderRedeliveries].(type) {
	case int64:
		n = v
	case int32:
		n = int64(v)
	case int16:
		n = int64(v)
	case int8:
		n = int64(v)
	case int:
		n = int64(v)
	case uint8:
		n = int64(v)
	case uint16:
		n = int64(v)
	case uint32:
		n = int64(v)
	case string:
		n, _ = strconv.ParseInt(v, 10, 64)
	}
	if n < 0 {
		return 0
	}
	return int(n)
}

func cloneHeaders(d amqp.Delivery) amqp.Table {
	h := amqp.Table{}
	maps.Copy(h, d.Headers)
	return h
}

// copyOf is d as a new publishing with the given headers.
func copyOf(d amqp.Delivery, headers amqp.Table) amqp.Publishing {
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    d.DeliveryMode,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		Expiration:      d.Expiration,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}
