package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/providers/amqpprovider"
)

// topology is the example's RabbitMQ objects, named after the run id so
// that runs on one broker never collide.
type topology struct {
	url string
	// Exchange is the topic exchange NoteCreated is published to.
	Exchange string `json:"exchange"`
	// Queue is the tagger's queue, bound to Exchange for note.created.
	Queue string `json:"queue"`
	// DeadLetterExchange and DeadLetterQueue receive what the tagger gives
	// up on.
	DeadLetterExchange string `json:"dead_letter_exchange"`
	DeadLetterQueue    string `json:"dead_letter_queue"`
}

func newTopology(amqpURL, runID string) *topology {
	base := "notes." + runID
	return &topology{
		url:                amqpURL,
		Exchange:           base,
		Queue:              base + ".tagger",
		DeadLetterExchange: base + ".dlx",
		DeadLetterQueue:    base + ".tagger.dlq",
	}
}

// dial opens a short-lived connection and channel for administration.
func (t *topology) dial() (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig(t.url, amqp.Config{
		Dial:       amqp.DefaultDial(10 * time.Second),
		Properties: amqp.Table{"connection_name": "notes example topology"},
	})
	if err != nil {
		// The library's errors can quote the URL; say where, redacted.
		return nil, nil, fmt.Errorf("connect to RabbitMQ at %s (set AMQP_URL): %s", amqpprovider.RedactURL(t.url), scrubURL(err, t.url))
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("open a RabbitMQ channel: %w", err)
	}
	return conn, ch, nil
}

// declare creates the exchanges and queues and binds them. Queues are
// durable, as a real service's would be; delete removes them.
func (t *topology) declare() error {
	conn, ch, err := t.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	steps := []struct {
		what string
		do   func() error
	}{
		{"declare exchange " + t.Exchange, func() error {
			return ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
		}},
		{"declare exchange " + t.DeadLetterExchange, func() error {
			return ch.ExchangeDeclare(t.DeadLetterExchange, amqp.ExchangeFanout, true, false, false, false, nil)
		}},
		{"declare queue " + t.Queue, func() error {
			_, err := ch.QueueDeclare(t.Queue, true, false, false, false, nil)
			return err
		}},
		{"declare queue " + t.DeadLetterQueue, func() error {
			_, err := ch.QueueDeclare(t.DeadLetterQueue, true, false, false, false, nil)
			return err
		}},
		{"bind " + t.Queue, func() error { return ch.QueueBind(t.Queue, routingKeyNoteCreated, t.Exchange, false, nil) }},
		{"bind " + t.DeadLetterQueue, func() error { return ch.QueueBind(t.DeadLetterQueue, "", t.DeadLetterExchange, false, nil) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// delete removes the queues and exchanges, with any messages still in
// them. It reports every failure, not only the first.
func (t *topology) delete() error {
	conn, ch, err := t.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	var errs []error
	for _, q := range []string{t.Queue, t.DeadLetterQueue} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, err))
			if ch, err = conn.Channel(); err != nil { // a channel error closes the channel
				return errors.Join(append(errs, err)...)
			}
		}
	}
	for _, x := range []string{t.Exchange, t.DeadLetterExchange} {
		if err := ch.ExchangeDelete(x, false, false); err != nil {
			errs = append(errs, fmt.Errorf("delete exchange %s: %w", x, err))
			if ch, err = conn.Channel(); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	}
	return errors.Join(errs...)
}

// queueExists reports whether the tagger's queue exists (for tests).
func (t *topology) queueExists() (bool, error) {
	conn, ch, err := t.dial()
	if err != nil {
		return false, err
	}
	defer conn.Close()
	_, err = ch.QueueDeclarePassive(t.Queue, true, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return false, nil
	}
	return err == nil, err
}

// publishCopy publishes body to the exchange for note.created with the
// given message-id, as a publisher that retried after a lost confirm (or a
// broker that duplicated a message) would: the same message twice. It
// waits for the broker's confirm.
func (t *topology) publishCopy(ctx context.Context, messageID string, body []byte) error {
	conn, ch, err := t.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("enable publisher confirms: %w", err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, t.Exchange, routingKeyNoteCreated, true, false, amqp.Publishing{
		MessageId:    messageID,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Headers:      amqp.Table{"type": "NoteCreated", "x-notes-example": "duplicate copy"},
		Body:         body,
	})
	if err != nil {
		return fmt.Errorf("publish the duplicate: %w", err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("wait for the duplicate's confirm: %w", err)
	}
	if !acked {
		return errors.New("the broker nacked the duplicate")
	}
	return nil
}

// scrubURL is err's text without the URL's password.
func scrubURL(err error, rawURL string) string {
	msg := err.Error()
	if uri, perr := amqp.ParseURI(rawURL); perr == nil && uri.Password != "" {
		msg = strings.ReplaceAll(msg, uri.Password, "xxxxx")
	}
	return msg
}
