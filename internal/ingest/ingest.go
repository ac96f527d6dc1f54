// Package ingest records messages given as JSON, the format of
// `outboxd record`'s input lines and of the admin API's POST
// /api/v1/messages. Both doors share it, so they accept, refuse and record
// exactly the same things: each message is recorded as intents.Consume would
// (its processed marker and its intents commit together, a message already
// recorded for its consumer is absorbed as a duplicate), and a message that
// is refused leaves nothing written.
package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/bytecheck"
	"github.com/outboxkit/outbox/providers"
)

// Message is one message in the JSON format:
//
//	{"message_id": "order-42", "consumer": "billing",
//	 "intents": [{"kind": "stripe.payment_intent", "name": "payment",
//	              "payload": {"amount": 500, "currency": "usd"},
//	              "reference": "order-42"}]}
//
// An intent may come after others and belong to an ordering key
// (intents.Intent's After and OrderingKey):
//
//	{"kind": "stripe.refund", "name": "refund", "payload": {"amount": 200},
//	 "after": [{"name": "payment", "fill": {"payment_intent": "provider_ref"}}],
//	 "ordering_key": "cus_42"}
type Message struct {
	MessageID string   `json:"message_id"`
	Consumer  string   `json:"consumer"`
	Intents   []Intent `json:"intents"`
}

// Intent is one intent of a Message. Payload is validated by the provider
// that performs Kind when the message is recorded.
type Intent struct {
	Kind      string          `json:"kind"`
	Name      string          `json:"name,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	Reference string          `json:"reference,omitempty"`
	// After names the intents it comes after, by name within the message
	// or by key; OrderingKey puts it in a stream (intents.After).
	After       []intents.After `json:"after,omitempty"`
	OrderingKey string          `json:"ordering_key,omitempty"`
}

// MessageBytesPerPayload bounds a message as JSON by the payload limit: a
// message (its envelope and every intent) may take this many times
// intents.Config.MaxPayloadBytes, 1 MiB with the default 64 KiB. The one
// limit a user sets is the payload's; the doors derive theirs from it.
const MessageBytesPerPayload = 16

// MaxMessageBytes is the most one message may take as JSON (an 'outboxd
// record' value, the body of a POST /api/v1/messages) when intents'
// payloads are bounded by maxPayloadBytes.
func MaxMessageBytes(maxPayloadBytes int) int { return MessageBytesPerPayload * maxPayloadBytes }

// ErrInvalidInput is wrapped by every *InputError.
var ErrInvalidInput = errors.New("invalid message")

// InputError is a message that cannot be recorded as given: malformed JSON,
// invalid UTF-8, a NUL or a lone surrogate escape anywhere in it,
// an unknown or missing field, an invalid consumer or message id, or an
// intent its provider refuses. Nothing of the message was written. Its text
// names the offending field and never holds a payload's values beyond what
// the provider's validation quotes.
type InputError struct {
	// Field is the JSON path of the offending field when it is known
	// ("message_id", "intents", "intents[1].payload.amount"), else empty.
	Field string
	// Err is the cause; it may wrap intents.ErrInvalidMessage,
	// intents.ErrInvalidIntent, intents.ErrDuplicateKey or
	// providers.ErrUnknownKind.
	Err error
}

func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap returns the cause and ErrInvalidInput.
func (e *InputError) Unwrap() []error { return []error{e.Err, ErrInvalidInput} }

// Decode parses data, which must hold exactly one JSON object in the
// Message format with no unknown fields and at least one intent, and no
// invalid UTF-8, NUL (raw or \u0000) or lone surrogate escape anywhere.
// Its errors are *InputError.
func Decode(data []byte) (Message, error) {
	// encoding/json would rewrite invalid UTF-8 and lone surrogate escapes
	// to U+FFFD, so two different message ids could become one; the raw
	// bytes are checked first, and such a message is refused whole.
	if err := bytecheck.JSON(data); err != nil {
		var be *bytecheck.Error
		errors.As(err, &be)
		return Message{}, &InputError{Field: be.Path, Err: err}
	}
	var msg Message
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return Message{}, &InputError{Field: decodeField(err), Err: fmt.Errorf("not a message object: %v", err)}
	}
	if dec.More() {
		return Message{}, &InputError{Err: errors.New("more than one JSON value on the line")}
	}
	if len(msg.Intents) == 0 {
		return Message{}, &InputError{Field: "intents", Err: errors.New(`"intents" is missing or empty: a message needs at least one intent`)}
	}
	return msg, nil
}

// decodeField names the field a json decoding error is about, if it says.
func decodeField(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return typeErr.Field
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
	}
	return ""
}

// Observer is told how many intents of each kind a message recorded, after
// the transaction committed (never for a duplicate). dispatcher/metrics
// implements it. It must be safe for concurrent use and must not block.
type Observer interface {
	IntentsRecorded(kind string, n int)
}

// Recorder records messages through an intents.Client. It is safe for
// concurrent use.
type Recorder struct {
	client   *intents.Client
	observer Observer
	kindHint func(kind string) string
}

// WithUnknownKindHint returns a copy of r that ends the error about a kind
// no registered provider performs with hint(kind): what the program's user
// can do about it (the flag that enables the provider that knows it, a
// kind of a similar name). hint returns "" when it has nothing to say.
func (r *Recorder) WithUnknownKindHint(hint func(kind string) string) *Recorder {
	c := *r
	c.kindHint = hint
	return &c
}

// New returns a Recorder that records through client and reports what it
// recorded to observer, which may be nil.
func New(client *intents.Client, observer Observer) *Recorder {
	return &Recorder{client: client, observer: observer}
}

// RecordJSON decodes data with Decode and records it with Record.
func (r *Recorder) RecordJSON(ctx context.Context, data []byte) (intents.Result, error) {
	msg, err := Decode(data)
	if err != nil {
		return intents.Result{}, err
	}
	return r.Record(ctx, msg)
}

// Record records msg exactly as intents.Client.Consume would: in one
// transaction, its processed marker and its intents with their dispatch
// jobs. A message already recorded for its consumer returns
// Result{Duplicate: true} and writes nothing, without validating its
// intents. A refused message returns an *InputError and writes nothing; any
// other error (the database) is returned as is.
func (r *Recorder) Record(ctx context.Context, msg Message) (intents.Result, error) {
	if len(msg.Intents) == 0 {
		return intents.Result{}, &InputError{Field: "intents", Err: errors.New(`"intents" is missing or empty: a message needs at least one intent`)}
	}
	res, err := r.client.Consume(ctx, intents.Message{Consumer: msg.Consumer, ID: msg.MessageID},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			for i, in := range msg.Intents {
				if len(in.Payload) == 0 {
					return &InputError{Field: fmt.Sprintf("intents[%d].payload", i),
						Err: fmt.Errorf("message %q: %w", msg.MessageID, &intents.IntentError{Index: i, Kind: in.Kind, Name: in.Name, Err: errors.New(`"payload" is missing`)})}
				}
				if err := rec.Record(intents.Intent{Kind: in.Kind, Name: in.Name, Payload: in.Payload, Reference: in.Reference,
					After: in.After, OrderingKey: in.OrderingKey}); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return intents.Result{}, r.classify(msg, err)
	}
	if r.observer != nil {
		counts := map[string]int{}
		for _, in := range res.Intents {
			counts[in.Kind]++
		}
		for kind, n := range counts {
			r.observer.IntentsRecorded(kind, n)
		}
	}
	return res, nil
}

func (r *Recorder) hint(kind string) string {
	if r.kindHint == nil {
		return ""
	}
	return r.kindHint(kind)
}

// classify wraps the intents package's errors about the input in an
// *InputError naming the field. An intent's error names its message, so
// that "the 1st intent" says of what.
func (r *Recorder) classify(msg Message, err error) error {
	var inputErr *InputError
	if errors.As(err, &inputErr) {
		return err
	}
	var intentErr *intents.IntentError
	switch {
	case errors.As(err, &intentErr):
		field := fmt.Sprintf("intents[%d]", intentErr.Index)
		var payloadErr *providers.PayloadError
		var bytesErr *bytecheck.Error
		var orderErr *intents.OrderError
		switch {
		case errors.As(err, &orderErr):
			if orderErr.After >= 0 {
				field += fmt.Sprintf(".after[%d]", orderErr.After)
			} else {
				field += ".ordering_key"
			}
		case errors.As(err, &bytesErr):
			field += ".payload"
			if bytesErr.Path != "" {
				field += "." + bytesErr.Path
			}
		case errors.As(err, &payloadErr):
			field += ".payload"
			if payloadErr.Field != "" {
				field += "." + payloadErr.Field
			}
		case errors.Is(err, providers.ErrUnknownKind):
			field += ".kind"
			if hint := r.hint(intentErr.Kind); hint != "" {
				return &InputError{Field: field, Err: fmt.Errorf("message %q: %w; %s", msg.MessageID, err, hint)}
			}
		case errors.Is(err, intents.ErrPayloadTooLarge):
			field += ".payload"
			return &InputError{Field: field, Err: fmt.Errorf("message %q: %w (outboxd's --max-payload-bytes)", msg.MessageID, err)}
		}
		return &InputError{Field: field, Err: fmt.Errorf("message %q: %w", msg.MessageID, err)}
	case errors.Is(err, intents.ErrInvalidMessage):
		field := "message_id"
		if strings.Contains(err.Error(), "consumer") {
			field = "consumer"
		}
		return &InputError{Field: field, Err: err}
	case errors.Is(err, intents.ErrDuplicateKey), errors.Is(err, intents.ErrInvalidIntent):
		return &InputError{Field: "intents", Err: err}
	}
	return err
}
