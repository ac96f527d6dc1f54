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
	"slices"
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
// transaction, its processed marker and its intents, queued for the
// dispatchers. A message already recorded for its consumer returns
// Result{Duplicate: true} and writes nothing, without validating its
// intents. A refused message returns an *InputError and writes nothing; any
// other error (the database) is returned as is.
func (r *Recorder) Record(ctx context.Context, msg Message) (intents.Result, error) {
	if err := checkIntents(msg); err != nil {
		return intents.Result{}, err
	}
	res, err := r.client.Consume(ctx, intents.Message{Consumer: msg.Consumer, ID: msg.MessageID},
		func(ctx context.Context, tx pgx.Tx, rec *intents.Recorder) error {
			return recordIntents(rec, msg)
		})
	if err != nil {
		return intents.Result{}, r.classify(msg, err)
	}
	r.observe([]intents.Result{res})
	return res, nil
}

// BatchResult is what RecordBatch did with one message: recorded or
// absorbed as a duplicate (Result), or refused (Refused).
type BatchResult struct {
	intents.Result
	// Refused says why the message was refused, as Record would have
	// refused it; nothing of it was written. Nil when it was recorded or is
	// a duplicate.
	Refused *InputError
}

// RecordBatch records msgs as Record records each, but in one transaction
// for them all (intents.Client.ConsumeBatch), and returns one BatchResult
// per message, in order. A message Record would refuse is refused alone:
// its BatchResult holds the *InputError, nothing of it is written, and the
// others are recorded. A message already recorded for its consumer, or
// given earlier in msgs for the same consumer, is a duplicate.
//
// A refusal found in the transaction (a provider's, a key already taken)
// rolls the batch back, and the batch is run again without that message:
// with k messages refused there, k+1 transactions, at most len(msgs). Any
// other error (the database, ctx) is returned as is, with no results; the
// last transaction may or may not have committed, and recording msgs again
// is safe (what was recorded is absorbed as duplicates). The observer is
// told of the intents after the commit.
func (r *Recorder) RecordBatch(ctx context.Context, msgs []Message) ([]BatchResult, error) {
	out := make([]BatchResult, len(msgs))
	pending := make([]int, 0, len(msgs)) // the positions in msgs to record
	for i, m := range msgs {
		if err := checkIntents(m); err != nil {
			out[i].Refused = err
			continue
		}
		pending = append(pending, i)
	}
	// Each rerun leaves one more message out, so this ends after at most
	// len(msgs) reruns.
	for len(pending) > 0 {
		results, err := r.consumeBatch(ctx, msgs, pending)
		var batchErr *intents.BatchError
		if errors.As(err, &batchErr) {
			i := pending[batchErr.Index]
			var inputErr *InputError
			if errors.As(r.classify(msgs[i], batchErr.Err), &inputErr) {
				out[i].Refused = inputErr
				pending = slices.Delete(pending, batchErr.Index, batchErr.Index+1)
				continue
			}
		}
		if err != nil {
			return nil, err
		}
		for j, res := range results {
			out[pending[j]].Result = res
		}
		r.observe(results)
		break
	}
	return out, nil
}

// consumeBatch runs msgs[pending] through ConsumeBatch. A message's handler
// finds the message by its consumer and id: ConsumeBatch runs it for the
// first of the batch's messages that share them, the others being
// duplicates.
func (r *Recorder) consumeBatch(ctx context.Context, msgs []Message, pending []int) ([]intents.Result, error) {
	type key struct{ consumer, id string }
	batch := make([]intents.Message, len(pending))
	byKey := make(map[key]*Message, len(pending))
	for j, i := range pending {
		m := &msgs[i]
		batch[j] = intents.Message{Consumer: m.Consumer, ID: m.MessageID}
		if k := (key{m.Consumer, m.MessageID}); byKey[k] == nil {
			byKey[k] = m
		}
	}
	return r.client.ConsumeBatch(ctx, batch, func(_ context.Context, _ pgx.Tx, m intents.Message, rec *intents.Recorder) error {
		return recordIntents(rec, *byKey[key{m.Consumer, m.ID}])
	})
}

// checkIntents refuses a message without intents, before any transaction.
func checkIntents(msg Message) *InputError {
	if len(msg.Intents) == 0 {
		return &InputError{Field: "intents", Err: errors.New(`"intents" is missing or empty: a message needs at least one intent`)}
	}
	return nil
}

// recordIntents is a message's handler: it records each of its intents.
func recordIntents(rec *intents.Recorder, msg Message) error {
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
}

// observe tells the observer how many intents of each kind were recorded.
func (r *Recorder) observe(results []intents.Result) {
	if r.observer == nil {
		return
	}
	counts := map[string]int{}
	for _, res := range results {
		for _, in := range res.Intents {
			counts[in.Kind]++
		}
	}
	for kind, n := range counts {
		r.observer.IntentsRecorded(kind, n)
	}
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
