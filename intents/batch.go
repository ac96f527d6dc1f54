package intents

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// BatchError says which message of a batch failed, and so made the whole
// batch fail: the message is invalid (Err wraps ErrInvalidMessage), its
// handler returned an error or panicked (Err is then a *PanicError), its
// handler returned nil over a statement of its that failed (Err wraps
// pgx.ErrTxCommitRollback), or one of its intents was refused, whether
// when recorded (an *IntentError) or when stored (a *DuplicateKeyError: its
// key is taken). Nothing of the batch was written. It wraps the cause.
type BatchError struct {
	// Index is the message's position in the batch, from 0; its text
	// counts as people do (the batch's 1st message).
	Index   int
	Message Message
	Err     error
}

func (e *BatchError) Error() string {
	if errors.Is(e.Err, ErrInvalidMessage) {
		// Its consumer or id is what is wrong: not quoted.
		return fmt.Sprintf("the batch's %s message: %v", ordinal(e.Index+1), e.Err)
	}
	return fmt.Sprintf("the batch's %s message (%s/%s): %v", ordinal(e.Index+1), e.Message.Consumer, e.Message.ID, e.Err)
}

// Unwrap returns the cause.
func (e *BatchError) Unwrap() error { return e.Err }

// ConsumeBatch processes many messages in one transaction, each exactly once
// per consumer, as Consume processes one: it inserts every message's
// processed marker in one statement and learns from it which messages are
// new, runs handler for each new message in batch order, stores all their
// intents, queued for the dispatchers, in one statement, and commits. It costs
// two round trips to Postgres however many messages there are, besides the
// handlers' own: BEGIN with the markers, then the intents with COMMIT
// (ConsumeBatchTx: one for the markers, one for the intents).
//
// It returns one Result per message, in order. A message already processed
// (by an earlier call, or earlier in this batch: the same consumer and id
// twice) gets Result{Duplicate: true} and its handler does not run.
// Messages may name different consumers.
//
// The batch is atomic. If any message fails, the whole transaction is
// rolled back, nothing of any message is written, and the error is a
// *BatchError naming the first message found failing: an invalid message
// (an empty id, a bad consumer name: found before anything is sent), a
// handler that returns an error, panics, or returns nil over a statement
// that failed, an intent refused when recorded, or one whose key is taken
// when stored (by an intent recorded before, or by one a handler stored
// earlier in the transaction with RecordTx). A caller that wants the other
// messages processed regardless can leave that message out and process the
// rest again, redeliver them, or process them one at a time with Consume.
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
		plan, err := c.batchOnce(ctx, msgs, handler, &pi)
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
	markers := newMarkerPlan(msgs)
	err := intentstore.InsertMarkers(ctx, tx, markers.consumers, markers.ids, markers.inserted)
	var plan batchPlan
	if err != nil {
		err = fmt.Errorf("intents: %w", err)
	} else {
		plan, err = c.runHandlers(ctx, tx, msgs, handler, markers, &pi)
	}
	if err == nil && pi.len() > 0 {
		b := &pgx.Batch{}
		if err = c.queueInsert(ctx, tx, b, &pi); err == nil {
			err = plan.insertError(msgs, &pi, intentstore.MapInsertError(tx.SendBatch(ctx, b).Close()))
		}
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
			return &BatchError{Index: i, Message: m, Err: err}
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

// insertError names the message whose intent the intents' statement
// refused, err being that statement's error (MapInsertError's): a key
// already taken, by an intent stored before or by one a handler stored
// earlier in the transaction, is the key of one pending intent (the keys
// of a batch are distinct: a message is handled once, and keys derived
// from different messages differ), and so of one message. Anything else
// is the database's, returned as is.
func (p batchPlan) insertError(msgs []Message, pi *pendingInsert, err error) error {
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) {
		return err
	}
	j := slices.IndexFunc(pi.recs, func(r Recorded) bool { return r.Key == dup.Key })
	for i := range msgs {
		if p.isNew[i] && j >= p.first[i] && j < p.first[i]+p.n[i] {
			return &BatchError{Index: i, Message: msgs[i], Err: err}
		}
	}
	return err
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

// markerPlan is the markers a batch inserts, one per distinct message
// (the first occurrence stands for it; later ones are duplicates whatever
// the database says), and, once inserted, which messages were new.
type markerPlan struct {
	firstAt        map[markerKey]int
	consumers, ids []string
	isNew          []bool
}

type markerKey struct{ consumer, id string }

func newMarkerPlan(msgs []Message) *markerPlan {
	p := &markerPlan{firstAt: make(map[markerKey]int, len(msgs)), consumers: make([]string, 0, len(msgs)),
		ids: make([]string, 0, len(msgs)), isNew: make([]bool, len(msgs))}
	for i, m := range msgs {
		k := markerKey{m.Consumer, m.ID}
		if _, seen := p.firstAt[k]; seen {
			continue
		}
		p.firstAt[k] = i
		p.consumers = append(p.consumers, m.Consumer)
		p.ids = append(p.ids, m.ID)
	}
	return p
}

// inserted records that the marker of (consumer, id) was new.
func (p *markerPlan) inserted(consumer, id string) {
	if i, ok := p.firstAt[markerKey{consumer, id}]; ok {
		p.isNew[i] = true
	}
}

// batchOnce runs one attempt at a batch in a transaction of its own, in
// two round trips besides the handlers' own: BEGIN and the markers' insert
// in one batch (pgx's Batch.BeginTx), then the intents' statement with
// COMMIT in another. Otherwise it is inTx: on any error, or a COMMIT that
// finds the transaction failed, everything is rolled back.
func (c *Client) batchOnce(ctx context.Context, msgs []Message, handler BatchHandler, pi *pendingInsert) (batchPlan, error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return batchPlan{}, fmt.Errorf("intents: begin: %w", err)
	}
	// A connection left inside a transaction (a lost connection, a failed
	// rollback) is closed by Release, never reused.
	defer conn.Release()
	defer func() {
		// COMMIT may have gone in the batch, behind pgx's back: roll back
		// only what is still open or failed.
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	markers := newMarkerPlan(msgs)
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	intentstore.QueueInsertMarkers(first, markers.consumers, markers.ids, markers.inserted)
	br := conn.Conn().SendBatch(ctx, first)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		return batchPlan{}, fmt.Errorf("intents: begin batch: %w", err)
	}
	plan, err := c.runHandlers(ctx, tx, msgs, handler, markers, pi)
	if err != nil {
		return batchPlan{}, err
	}
	if pi.len() == 0 {
		if err := tx.Commit(ctx); err != nil {
			return batchPlan{}, fmt.Errorf("intents: commit: %w", err)
		}
		return plan, nil
	}
	last := &pgx.Batch{}
	if err := c.queueInsert(ctx, tx, last, pi); err != nil {
		return batchPlan{}, err
	}
	last.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			// The transaction had failed already (a handler ignored an
			// error): COMMIT rolled it back.
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	if err := tx.SendBatch(ctx, last).Close(); err != nil {
		return batchPlan{}, plan.insertError(msgs, pi, intentstore.MapInsertError(err))
	}
	return plan, nil
}

// errHandlerIgnoredFailure is a batch handler's nil over a transaction one
// of its statements failed: the batch can only roll back.
var errHandlerIgnoredFailure = fmt.Errorf("the handler returned nil after a statement of its failed, so the transaction can only roll back: %w", pgx.ErrTxCommitRollback)

// runHandlers runs the handler for each new message of the batch, once its
// markers are inserted, and gathers their intents in pi.
func (c *Client) runHandlers(ctx context.Context, tx pgx.Tx, msgs []Message, handler BatchHandler, markers *markerPlan, pi *pendingInsert) (batchPlan, error) {
	plan := batchPlan{isNew: markers.isNew, first: make([]int, len(msgs)), n: make([]int, len(msgs))}
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
			if err := handler(ctx, tx, m, rec); err != nil {
				return err
			}
			if tx.Conn().PgConn().TxStatus() == 'E' {
				// Known here without a round trip; COMMIT would only say
				// that some message failed.
				return errHandlerIgnoredFailure
			}
			return nil
		}, pi.holds)
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
