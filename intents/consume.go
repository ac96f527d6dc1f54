package intents

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sethvargo/go-retry"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// Message identifies one delivery to one consumer.
type Message struct {
	// Consumer names the consumer handling the message ("billing"). The same
	// message handled by two consumers is processed once by each. 1 to
	// MaxConsumerLength letters, digits, '_', '.' or '-'.
	Consumer string
	// ID is the message's id as the broker or publisher assigned it, the
	// same on every redelivery. 1 to MaxMessageIDLength printable
	// characters.
	ID string
}

func (m Message) validate() error {
	if m.Consumer == "" {
		return fmt.Errorf("%w: consumer name is empty", ErrInvalidMessage)
	}
	if err := checkText("consumer name", m.Consumer); err != nil {
		return err
	}
	if len(m.Consumer) > MaxConsumerLength || !namePattern.MatchString(m.Consumer) {
		return fmt.Errorf("%w: consumer name %q must be 1 to %d letters, digits, '_', '.' or '-'", ErrInvalidMessage, m.Consumer, MaxConsumerLength)
	}
	if m.ID == "" {
		return fmt.Errorf("%w: message id is empty", ErrInvalidMessage)
	}
	if err := checkText("message id", m.ID); err != nil {
		return err
	}
	if len(m.ID) > MaxMessageIDLength || !printable(m.ID) {
		return fmt.Errorf("%w: message id must be 1 to %d printable characters, got %d bytes", ErrInvalidMessage, MaxMessageIDLength, len(m.ID))
	}
	return nil
}

// Handler handles one message. It makes its own writes through tx and
// records intents with rec; it must not commit or roll back tx, and must not
// call external systems itself. Returning an error rolls everything back.
//
// Consume may call a handler more than once for one delivery when Postgres
// reports a transient error; each earlier run was rolled back, so a handler
// that only writes through tx is safe.
type Handler func(ctx context.Context, tx pgx.Tx, rec *Recorder) error

// Result is what Consume did with a message.
type Result struct {
	// Duplicate is true when the message had already been processed by this
	// consumer: the handler did not run and nothing was written.
	Duplicate bool
	// Intents are the intents recorded, in the order the handler recorded
	// them.
	Intents []Recorded
}

// Consume processes msg exactly once per consumer. In one transaction it
// inserts the processed marker, runs handler, and stores the intents the
// handler recorded, queued for the dispatchers. A message already processed
// returns Result{Duplicate: true} and a nil error without running handler.
//
// If handler returns an error or panics (a panic is returned as a
// *PanicError), or an intent is refused (an *IntentError), the transaction
// is rolled back: no marker, no business writes, no intent. The broker may
// then redeliver the message and it will be processed afresh.
//
// Transient Postgres errors rerun the whole transaction, up to
// Config.MaxTxAttempts times with exponential backoff and jitter. A
// connection lost during COMMIT is retried too: if the commit had in fact
// happened, the rerun finds the marker and reports a duplicate.
func (c *Client) Consume(ctx context.Context, msg Message, handler Handler) (Result, error) {
	if err := c.checkSchema(ctx); err != nil {
		return Result{}, err
	}
	if err := msg.validate(); err != nil {
		return Result{}, err
	}
	if handler == nil {
		return Result{}, errors.New("intents: handler is nil")
	}
	ctx, span := c.startConsume(ctx, msg)
	var result Result
	var err error
	defer func() { endSpan(span, err, resultAttrs(result.Duplicate, len(result.Intents))...) }()
	backoff := retry.WithMaxRetries(uint64(c.config.MaxTxAttempts-1),
		retry.WithJitterPercent(25, retry.NewExponential(c.config.TxRetryDelay)))
	attempt := 0
	err = retry.Do(ctx, backoff, func(ctx context.Context) error {
		attempt++
		res, err := c.consumeOnce(ctx, msg, handler)
		if err != nil {
			if intentstore.IsTransient(ctx, err) {
				c.config.Logger.WarnContext(ctx, "transient database error; retrying message",
					"consumer", msg.Consumer, "message_id", msg.ID, "attempt", attempt, "error", err)
				return retry.RetryableError(err)
			}
			return err
		}
		result = res
		return nil
	})
	return result, err
}

// consumeOnce runs one attempt at msg in its own transaction, in two
// round trips besides the handler's own: BEGIN with the marker, then the
// intents' statement with COMMIT.
func (c *Client) consumeOnce(ctx context.Context, msg Message, handler Handler) (Result, error) {
	var res Result
	var pi pendingInsert
	err := c.inTx(ctx, &msg, func(tx pgx.Tx, b *pgx.Batch) (bool, error) {
		prepared, err := c.handle(ctx, tx, msg, handler, nil)
		if err != nil {
			return false, err
		}
		if len(prepared) > 0 {
			pi.add(ctx, &msg, prepared, "consumer:"+msg.Consumer)
			if err := c.queueInsert(ctx, tx, b, &pi); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	if errors.Is(err, errDuplicateMarker) {
		return Result{Duplicate: true}, nil
	}
	if err != nil {
		return Result{}, err
	}
	if pi.len() > 0 {
		res.Intents = pi.recorded(0, pi.len())
	}
	return res, nil
}

// errDuplicateMarker is inTx's report that the message's marker exists.
var errDuplicateMarker = errors.New("processed marker exists")

// inTx runs fn in a transaction on a connection of its own. With marker,
// the transaction begins by inserting the message's processed marker (a
// parameterised statement, like all of this package's SQL), and a message
// already processed returns errDuplicateMarker without running fn. fn makes its writes through tx and
// queues its last statements in b; when it returns commit, b is sent with
// COMMIT in one round trip. Otherwise, or on any error, the transaction is
// rolled back.
func (c *Client) inTx(ctx context.Context, marker *Message, fn func(tx pgx.Tx, b *pgx.Batch) (commit bool, err error)) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("intents: begin: %w", err)
	}
	// A connection left inside a transaction (a lost connection, a failed
	// rollback) is closed by Release, never reused.
	defer conn.Release()
	rollback := func() {
		// COMMIT may have gone in the batch, behind pgx's back: roll back
		// only what is still open or failed.
		if conn.Conn().PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}
	defer rollback()
	// BEGIN and the marker go in one batch (pgx's Batch.BeginTx): one
	// round trip.
	first := &pgx.Batch{}
	first.BeginTx(pgx.TxOptions{})
	isNew := true
	if marker != nil {
		intentstore.QueueInsertMarker(first, marker.Consumer, marker.ID, &isNew)
	}
	br := conn.Conn().SendBatch(ctx, first)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		return fmt.Errorf("intents: begin with the processed marker: %w", err)
	}
	if !isNew {
		// Another transaction holds or held the marker; a concurrent one
		// was waited for until it committed.
		return errDuplicateMarker
	}
	b := &pgx.Batch{}
	commit, err := fn(tx, b)
	if err != nil || !commit {
		return err
	}
	if b.Len() == 0 {
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("intents: commit: %w", err)
		}
		return nil
	}
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != "COMMIT" {
			// The transaction had failed already (a handler ignored an
			// error): COMMIT rolled it back.
			return pgx.ErrTxCommitRollback
		}
		return nil
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return intentstore.MapInsertError(err)
	}
	return nil
}

// ConsumeTx is Consume inside a transaction the caller holds. It does not
// retry, and does not commit: the marker, the handler's writes and the
// intents take effect when the caller commits tx. On a duplicate it writes
// nothing and tx stays usable. On error the caller must roll tx back.
func (c *Client) ConsumeTx(ctx context.Context, tx pgx.Tx, msg Message, handler Handler) (Result, error) {
	if err := c.checkSchema(ctx); err != nil {
		return Result{}, err
	}
	if err := msg.validate(); err != nil {
		return Result{}, err
	}
	if handler == nil {
		return Result{}, errors.New("intents: handler is nil")
	}
	ctx, span := c.startConsume(ctx, msg)
	res, err := c.consumeTx(ctx, tx, msg, handler)
	endSpan(span, err, resultAttrs(res.Duplicate, len(res.Intents))...)
	return res, err
}

func (c *Client) consumeTx(ctx context.Context, tx pgx.Tx, msg Message, handler Handler) (Result, error) {
	dup, prepared, err := c.runConsumer(ctx, tx, msg, handler)
	if err != nil || dup || len(prepared) == 0 {
		return Result{Duplicate: dup}, err
	}
	recorded, err := c.insert(ctx, tx, &msg, prepared, "consumer:"+msg.Consumer)
	if err != nil {
		return Result{}, err
	}
	return Result{Intents: recorded}, nil
}

// runConsumer inserts msg's processed marker and, when it is new, runs the
// handler and returns the intents it recorded, validated and keyed, for the
// caller to store.
func (c *Client) runConsumer(ctx context.Context, tx pgx.Tx, msg Message, handler Handler) (duplicate bool, prepared []preparedIntent, err error) {
	isNew, err := intentstore.InsertMarker(ctx, tx, msg.Consumer, msg.ID)
	if err != nil {
		return false, nil, fmt.Errorf("intents: %w", err)
	}
	if !isNew {
		return true, nil, nil
	}
	prepared, err = c.handle(ctx, tx, msg, handler, nil)
	return false, prepared, err
}

// handle runs handler for a new message and returns the intents it
// recorded, with keys derived from msg. earlier is resolveOrder's: the
// keys of intents recorded earlier in tx and not written yet, or nil.
func (c *Client) handle(ctx context.Context, tx pgx.Tx, msg Message, handler Handler, earlier func(key string) bool) ([]preparedIntent, error) {
	rec := &Recorder{client: c}
	if err := runHandler(ctx, tx, rec, handler); err != nil {
		return nil, err
	}
	if rec.err != nil {
		return nil, rec.err
	}
	if len(rec.pending) == 0 {
		return nil, nil
	}
	if err := deriveKeys(msg, rec.pending); err != nil {
		return nil, err
	}
	if err := resolveOrder(ctx, tx, rec.pending, earlier); err != nil {
		return nil, err
	}
	return rec.pending, nil
}

func runHandler(ctx context.Context, tx pgx.Tx, rec *Recorder, handler Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return handler(ctx, tx, rec)
}
