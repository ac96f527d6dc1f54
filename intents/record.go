package intents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/internal/tracing"
	"github.com/outboxkit/outbox/providers"
)

// Limits on names and ids, checked before anything is written.
const (
	MaxConsumerLength  = 100
	MaxMessageIDLength = 200
	MaxNameLength      = 64
	MaxReferenceLength = 200
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Intent is an external effect to record.
type Intent struct {
	// Kind names what to do and so which provider does it
	// ("stripe.payment_intent", "sendgrid.email"). Required.
	Kind string
	// Name tells apart the intents one message records ("payment",
	// "receipt"). Required, and distinct, when a message records several;
	// letters, digits, '_', '.' and '-' only.
	Name string
	// Payload is the provider's input: a json.RawMessage, a []byte of JSON,
	// or any value encoding/json can marshal. It is validated by the provider
	// before anything is written.
	Payload any
	// Reference is an optional business reference (an order id) an operator
	// can search by.
	Reference string
	// Key is the idempotency key for RecordTx; when empty there, a random
	// key is generated. Consume derives keys from the message and refuses an
	// intent with Key set.
	Key string
	// After lists the intents this one comes after: it is performed only
	// once each of them succeeded, and may take values from their results
	// (see After). Names and keys that name no intent, an intent that comes
	// after itself, and intents of one call that come after each other in a
	// circle are refused with an *OrderError.
	After []After
	// OrderingKey puts the intent in a stream (a customer, an order): the
	// intents that share an ordering key are performed one at a time, in
	// the order their transactions recorded them, each once the previous
	// one finished, whatever its outcome. An in_doubt one holds the stream
	// until an operator resolves it. At most MaxOrderingKeyLength printable
	// characters; empty: no stream.
	OrderingKey string
}

// Recorded describes one stored intent.
type Recorded struct {
	ID   int64
	Key  string
	Kind string
	Name string
}

// Recorder collects the intents a handler records. Its methods are not safe
// for concurrent use.
type Recorder struct {
	client  *Client
	pending []preparedIntent
	err     error
}

// Record validates an intent and queues it to be written when the handler
// returns nil. A refused intent fails the whole transaction even if the
// handler ignores the error, so nothing is ever half-recorded.
func (r *Recorder) Record(in Intent) error {
	if r.err != nil {
		return r.err
	}
	if in.Key != "" {
		r.err = &IntentError{Index: len(r.pending), Kind: in.Kind, Name: in.Name, Err: errors.New("an explicit Key cannot be set in a consumer: keys are derived from the message (use Name to tell intents apart)")}
		return r.err
	}
	p, err := r.client.prepare(len(r.pending), in)
	if err != nil {
		r.err = err
		return err
	}
	r.pending = append(r.pending, p)
	return nil
}

type preparedIntent struct {
	index     int
	kind      string
	name      string
	provider  providers.Provider
	payload   []byte
	reference string
	key       string
	// after and orderingKey are the intent's order as recorded; order, the
	// same resolved to keys (resolveOrder).
	after       []After
	orderingKey string
	order       *intentstore.Order
}

func (c *Client) prepare(index int, in Intent) (preparedIntent, error) {
	fail := func(err error) (preparedIntent, error) {
		return preparedIntent{}, &IntentError{Index: index, Kind: in.Kind, Name: in.Name, Err: err}
	}
	if in.Kind == "" {
		return fail(errors.New("kind is required"))
	}
	if in.Name != "" && (len(in.Name) > MaxNameLength || !namePattern.MatchString(in.Name)) {
		return fail(fmt.Errorf("name %q must be 1 to %d letters, digits, '_', '.' or '-'", in.Name, MaxNameLength))
	}
	if len(in.Reference) > MaxReferenceLength || !printable(in.Reference) {
		return fail(fmt.Errorf("reference must be at most %d printable characters", MaxReferenceLength))
	}
	payload, err := encodePayload(in.Payload)
	if err != nil {
		return fail(err)
	}
	if len(payload) > c.config.MaxPayloadBytes {
		return fail(fmt.Errorf("%w: %d bytes, the limit is %d", ErrPayloadTooLarge, len(payload), c.config.MaxPayloadBytes))
	}
	toValidate, err := c.checkOrder(in, payload)
	if err != nil {
		return fail(err)
	}
	p, err := c.config.Providers.Validate(in.Kind, toValidate)
	if err != nil {
		return fail(err)
	}
	return preparedIntent{index: index, kind: in.Kind, name: in.Name, provider: p, payload: payload, reference: in.Reference, key: in.Key,
		after: in.After, orderingKey: in.OrderingKey}, nil
}

func encodePayload(v any) ([]byte, error) {
	var raw []byte
	switch p := v.(type) {
	case nil:
		return nil, errors.New("payload is required")
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("payload cannot be encoded as JSON: %w", err)
		}
		raw = b
	}
	if err := checkPayload(v, raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// RecordTx records intents in a transaction the caller holds, outside any
// message consumer: the outbox half of "create a note and publish
// NoteCreated". Each intent's Key is used as its idempotency key; an empty
// Key gets a random one, fixed from then on, so retries of the effect are
// still deduplicated by the provider. Nothing is dispatched until tx
// commits, and nothing remains if it rolls back. On error the caller must
// roll tx back.
func (c *Client) RecordTx(ctx context.Context, tx pgx.Tx, intents ...Intent) ([]Recorded, error) {
	if err := c.checkSchema(ctx); err != nil {
		return nil, err
	}
	if len(intents) == 0 {
		return nil, nil
	}
	prepared := make([]preparedIntent, 0, len(intents))
	for i, in := range intents {
		p, err := c.prepare(i, in)
		if err != nil {
			return nil, err
		}
		if p.key == "" {
			p.key = randomKey()
		}
		if err := checkKey(p); err != nil {
			return nil, err
		}
		prepared = append(prepared, p)
	}
	if err := resolveOrder(ctx, tx, prepared, nil); err != nil {
		return nil, err
	}
	return c.insert(ctx, tx, nil, prepared, "recorder")
}

// deriveKeys gives each intent of a message its key
// (intenttype.MessageKey), as the package documentation describes.
func deriveKeys(msg Message, prepared []preparedIntent) error {
	if len(prepared) == 1 {
		prepared[0].key = intenttype.MessageKey(msg.Consumer, msg.ID, "")
		return nil
	}
	seen := make(map[string]bool, len(prepared))
	for i := range prepared {
		p := &prepared[i]
		if p.name == "" {
			return &IntentError{Index: p.index, Kind: p.kind, Err: errors.New("a message that records several intents must name each one")}
		}
		if seen[p.name] {
			return &IntentError{Index: p.index, Kind: p.kind, Name: p.name, Err: errors.New("name is used by another intent of this message")}
		}
		seen[p.name] = true
		p.key = intenttype.MessageKey(msg.Consumer, msg.ID, p.name)
	}
	return nil
}

// checkKey checks an explicit key (RecordTx). The key the provider is sent
// is derived from it at dispatch and fitted to the provider's limit
// (intenttype.ProviderKey), so only the outbox's own limit applies here.
func checkKey(p preparedIntent) error {
	if len(p.key) > intenttype.MaxKeyLength || !printable(p.key) || p.key == "" {
		return &IntentError{Index: p.index, Kind: p.kind, Name: p.name,
			Err: fmt.Errorf("idempotency key must be 1 to %d printable characters, got %d bytes", intenttype.MaxKeyLength, len(p.key))}
	}
	return nil
}

// pendingInsert gathers the intents one statement stores, possibly from
// several messages.
type pendingInsert struct {
	batch intentstore.InsertBatch
	// recs describe the intents, their ids filled from batch.IDs once the
	// batch has run.
	recs []Recorded
}

func (pi *pendingInsert) len() int { return len(pi.recs) }

// holds reports whether pi holds an intent with this key. It is asked only
// about the keys an ordered intent names, so a linear scan costs nothing
// to the batches that order nothing.
func (pi *pendingInsert) holds(key string) bool {
	return slices.ContainsFunc(pi.recs, func(r Recorded) bool { return r.Key == key })
}

// add appends the prepared intents of one message (nil outside a consumer),
// with the trace context of the span in ctx.
func (pi *pendingInsert) add(ctx context.Context, msg *Message, prepared []preparedIntent, actor string) {
	traceParent, traceState := tracing.Inject(ctx)
	for i := range prepared {
		p := &prepared[i]
		in := intentstore.NewIntent{Key: p.key, Kind: p.kind, Provider: p.provider.Name(), Name: p.name,
			Payload: p.payload, Reference: p.reference, Actor: actor, TraceParent: traceParent, TraceState: traceState, Order: p.order}
		if msg != nil {
			in.Consumer, in.MessageID = msg.Consumer, msg.ID
		}
		pi.batch.Add(in)
		pi.recs = append(pi.recs, Recorded{Key: p.key, Kind: p.kind, Name: p.name})
	}
}

// recorded describes the intents from the from-th on, once the batch ran.
func (pi *pendingInsert) recorded(from, n int) []Recorded {
	out := make([]Recorded, n)
	for i := range out {
		out[i] = pi.recs[from+i]
		out[i].ID = pi.batch.IDs[from+i]
	}
	return out
}

// queueInsert adds to b the statement that stores pi's intents, queued,
// with their events (intentstore.Store.QueueInsert), once the
// stored intents they come after are locked and read in tx: all of them at
// once, in id order, so that two recorders, or a recorder and a group of
// settlements, cannot wait on each other's locks in a cycle.
func (c *Client) queueInsert(ctx context.Context, tx pgx.Tx, b *pgx.Batch, pi *pendingInsert) error {
	if err := pi.batch.LockPredecessors(ctx, tx); err != nil {
		return fmt.Errorf("intents: %w", err)
	}
	c.store.QueueInsert(b, &pi.batch)
	return nil
}

// insert writes the intents, queued, with their "recorded" events in tx,
// in one round trip.
func (c *Client) insert(ctx context.Context, tx pgx.Tx, msg *Message, prepared []preparedIntent, actor string) ([]Recorded, error) {
	var pi pendingInsert
	pi.add(ctx, msg, prepared, actor)
	if err := c.store.InsertTx(ctx, tx, &pi.batch); err != nil {
		return nil, intentstore.MapInsertError(err)
	}
	return pi.recorded(0, pi.len()), nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func randomKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "outbox-" + hex.EncodeToString(b)
}
