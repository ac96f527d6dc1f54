package intents

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/sethvargo/go-retry"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// BatchHandler handles one new message of a batch given to ConsumeBatch. It
// has the same contract as Handler: it writes through tx, records the
// message's intents with rec (keys are derived from msg as Consume derives
// them), must not commit or roll back tx, and may run more than once when
// Postgres reports a transient error. Every message of the batch shares tx.
type BatchHandler func(ctx context.Context, tx pgx.Tx, msg Message, rec *Recorder) error

// BatchError says which message of a batch failed: its handler returned an
// error or panicked (Err is then a *PanicError), or one of its intents was
// refused. The whole batch was rolled back. It wraps the cause.
type BatchError struct {
	// Index is the message's position in the batch.
	Index   int
	Message Message
	Err     error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("batch message %d (%s/%s): %v", e.Index, e.Message.Consumer, e.Message.ID, e.Err)
}

// Unwrap returns the cause.
func (e *BatchError) Unwrap() error { return e.Err }

// ConsumeBatch processes many messages in one transaction, each exactly once
// per consumer, as Consume processes one: it inserts every message's
// processed marker in one statement and learns from it which messages are
// new, runs handler for each new message in batch order, stores all their
// intents with their dispatch jobs in one statement, and commits. It costs
// three round trips to Postgres however many messages there are, besides
// the handlers' own.
//
// It returns one Result per message, in order. A message already processed
// (by an earlier call, or earlier in this batch: the same consumer and id
// twice) gets Result{Duplicate: true} and its handler does not run.
// Messages may name different consumers.
//
// The batch is atomic. If any handler returns an error or panics, or any
// intent is refused, the whole transaction is rolled back, nothing of any
// message is written, and the error is a *BatchError naming the message. A
// caller that wants the other messages processed regardless can redeliver
// them, or process the batch again one message at a time with Consume. An
// invalid message (an empty id, a bad consumer name) fails the call before
// anything is written, with an error wrapping ErrInvalidMessage and naming
// its index.
//
// Transient Postgres errors rerun the whole transaction, handlers included,
// as Consume does. Batches that share messages, run concurrently, never
// process a message twice: a marker insert waits for the other transaction
// and then finds the conflict. Markers are inserted in a fixed order, so two
// such batches cannot deadlock on each other.
func (c *Client) ConsumeBatch(ctx context.Context, msgs []Message, handler BatchHandler) ([]Result, error) {
	if err := c.checkSchema(ctx); err != nil {
		return nil, err
	}
	if err := validateBatch(msgs, handler); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return []Result{}, nil
	}
	ctx, span := c.startBatch(ctx, msgs)
	var results []Result
	var err error
	defer func() { endSpan(span, err) }()
	backoff := retry.WithMaxRetries(uint64(c.config.MaxTxAttempts-1),
		retry.WithJitterPercent(25, retry.NewExponential(c.config.TxRetryDelay)))
	attempt := 0
	err = retry.Do(ctx, backoff, func(ctx context.Context) error {
		attempt++
		var pi pendingInsert
		var plan batchPlan
		err := c.inTx(ctx, nil, func(tx pgx.Tx, b *pgx.Batch) (bool, error) {
			var err error
			plan, err = c.runBatch(ctx, tx, msgs, handler, &pi)
			if err != nil {
				return false, err
			}
			if pi.len() > 0 {
				c.queueInsert(b, &pi)
			}
			return true, nil
		})
		if err != nil {
			if intentstore.IsTransient(ctx, err) {
				c.config.Logger.WarnContext(ctx, "transient database error; retrying batch",
					"messages", len(msgs), "attempt", attempt, "error", err)
				return retry.RetryableError(err)
			}
			return err
		}
		results = plan.results(&pi)
		return nil
	})
	return results, err
}

// ConsumeBatchTx is ConsumeBatch inside a transaction the caller holds. It
// does not retry, and does not commit: the markers, the handlers' writes and
// the intents take effect when the caller commits tx. On error the caller
// must roll tx back.
func (c *Client) ConsumeBatchTx(ctx context.Context, tx pgx.Tx, msgs []Message, handler BatchHandler) ([]Result, error) {
	if err := c.checkSchema(ctx); err != nil {
		return nil, err
	}
	if err := validateBatch(msgs, handler); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return []Result{}, nil
	}
	ctx, span := c.startBatch(ctx, msgs)
	var pi pendingInsert
	plan, err := c.runBatch(ctx, tx, msgs, handler, &pi)
	if err == nil && pi.len() > 0 {
		b := &pgx.Batch{}
		c.queueInsert(b, &pi)
		err = mapInsertError(tx.SendBatch(ctx, b).Close())
	}
	endSpan(span, err)
	if err != nil {
		return nil, err
	}
	return plan.results(&pi), nil
}

// startBatch starts the span a batch is processed in; each of its messages
// gets an "outbox.consume" span of its own within it.
func (c *Client) startBatch(ctx context.Context, msgs []Message) (context.Context, trace.Span) {
	return c.tracer.Start(ctx, spanConsumeBatch, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrMessages.Int(len(msgs))))
}

func validateBatch(msgs []Message, handler BatchHandler) error {
	for i, m := range msgs {
		if err := m.validate(); err != nil {
			return fmt.Errorf("intents: batch message %d: %w", i, err)
		}
	}
	if handler == nil {
		return errors.New("intents: handler is nil")
	}
	return nil
}

// batchPlan is what runBatch learned: for each message, whether it is new
// and which of the pending insert's intents are its own.
type batchPlan struct {
	isNew    []bool
	first, n []int // the message's intents are pi's [first, first+n)
}

func (p batchPlan) results(pi *pendingInsert) []Result {
	out := make([]Result, len(p.isNew))
	for i := range out {
		switch {
		case !p.isNew[i]:
			out[i].Duplicate = true
		case p.n[i] > 0:
			out[i].Intents = pi.recorded(p.first[i], p.n[i])
		}
	}
	return out
}

// runBatch inserts the batch's markers, runs the handler for each new
// message and gathers their intents in pi.
func (c *Client) runBatch(ctx context.Context, tx pgx.Tx, msgs []Message, handler BatchHandler, pi *pendingInsert) (batchPlan, error) {
	type key struct{ consumer, id string }
	// The first occurrence of a message stands for it; later ones in the
	// batch are duplicates whatever the database says.
	firstAt := make(map[key]int, len(msgs))
	consumers := make([]string, 0, len(msgs))
	ids := make([]string, 0, len(msgs))
	for i, m := range msgs {
		k := key{m.Consumer, m.ID}
		if _, seen := firstAt[k]; seen {
			continue
		}
		firstAt[k] = i
		consumers = append(consumers, m.Consumer)
		ids = append(ids, m.ID)
	}
	plan := batchPlan{isNew: make([]bool, len(msgs)), first: make([]int, len(msgs)), n: make([]int, len(msgs))}
	err := intentstore.InsertMarkers(ctx, tx, consumers, ids, func(consumer, id string) {
		if i, ok := firstAt[key{consumer, id}]; ok {
			plan.isNew[i] = true
		}
	})
	if err != nil {
		return batchPlan{}, fmt.Errorf("intents: %w", err)
	}
	// Without a tracer provider each message's span would be the batch's
	// non-recording span again (noop.Tracer.Start): the message runs in
	// the batch's context, and no attributes are built for nothing.
	_, untraced := c.tracer.(noop.Tracer)
	pi.batch.Grow(len(msgs))
	for i, m := range msgs {
		mctx, span := ctx, trace.Span(nil)
		if !untraced {
			mctx, span = c.startConsume(ctx, m)
		}
		if !plan.isNew[i] {
			if span != nil {
				endSpan(span, nil, resultAttrs(true, 0)...)
			}
			continue
		}
		prepared, err := c.handle(mctx, tx, m, func(ctx context.Context, tx pgx.Tx, rec *Recorder) error {
			return handler(ctx, tx, m, rec)
		})
		if err != nil {
			if span != nil {
				endSpan(span, err)
			}
			return batchPlan{}, &BatchError{Index: i, Message: m, Err: err}
		}
		plan.first[i], plan.n[i] = pi.len(), len(prepared)
		pi.add(mctx, &msgs[i], prepared, "consumer:"+m.Consumer)
		if span != nil {
			endSpan(span, nil, resultAttrs(false, len(prepared))...)
		}
	}
	return plan, nil
}
