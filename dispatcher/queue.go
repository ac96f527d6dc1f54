package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// The queue is how a dispatcher finds the intents to attempt now: it claims
// them from outbox_intents itself, a batch at a time, in one statement
// committed before any call (intentstore.ClaimQueued), and works each in a
// goroutine of its own. It fetches when it is told that intents were
// queued (LISTEN on intentstore.QueueChannel: recording, a release, a
// resend notify in their commit), when workers free up after a full batch,
// and every Config.FetchPollInterval, the fallback for a missed
// notification. River keeps what needs a later time (a retry after its
// backoff, a take-over, a look-up) and the maintenance.

// maxClaimBatch bounds the intents one claim statement takes.
const maxClaimBatch = 100

// queue is one dispatcher's queue: its fetch loops, its listener and the
// workers they start.
type queue struct {
	d *Dispatcher
	// wake has a value when a fetch is due (a notification, a start).
	wake chan struct{}
	// stopFetching ends the fetch loops and the listener; cancelWork ends
	// the workers' calls and the releases of lost claims, on a hard stop.
	stopFetching context.CancelFunc
	cancelWork   context.CancelFunc
	workCtx      context.Context
	loops        sync.WaitGroup
	// workers and releases are the goroutines Stop waits for: the claimed
	// intents' and the releases of claims whose answer was lost.
	workers sync.WaitGroup
}

// workers bounds how many intents a dispatcher works at once, by the queue
// and by River's dispatch jobs together: a token a worker.
type workers chan struct{}

func newWorkers(n int) workers {
	w := make(workers, n)
	for range n {
		w <- struct{}{}
	}
	return w
}

// acquire takes one token, waiting for a worker to free up, then as many
// more as are free, up to max; 0 when ctx ends first.
func (w workers) acquire(ctx context.Context, max int) int {
	select {
	case <-w:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < max {
		select {
		case <-w:
			n++
		default:
			return n
		}
	}
	return n
}

func (w workers) release(n int) {
	for range n {
		w <- struct{}{}
	}
}

// startQueue starts the fetch loops and, unless Config.PollOnly, the
// listener.
func (d *Dispatcher) startQueue(ctx context.Context) {
	q := &queue{d: d, wake: make(chan struct{}, 1)}
	fetchCtx, stopFetching := context.WithCancel(context.WithoutCancel(ctx))
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	q.stopFetching, q.cancelWork, q.workCtx = stopFetching, cancelWork, workCtx
	q.signal() // intents may have been queued before the start
	if !d.config.PollOnly {
		q.loops.Go(func() { q.listen(fetchCtx) })
	}
	for range d.config.FetchLoops {
		q.loops.Go(func() { q.fetchLoop(fetchCtx, workCtx) })
	}
	d.queue = q
}

// stop stops fetching and waits for the workers to settle what they
// claimed; if ctx ends first, their calls are cancelled (each is then
// classified like any call cut short, and settled) and stop waits for them
// at most grace longer.
func (q *queue) stop(ctx context.Context, grace time.Duration) error {
	q.stopFetching()
	q.loops.Wait()
	done := make(chan struct{})
	go func() { q.workers.Wait(); close(done) }()
	select {
	case <-done:
		q.cancelWork()
		return nil
	case <-ctx.Done():
	}
	q.cancelWork()
	select {
	case <-done:
	case <-time.After(grace):
	}
	return ctx.Err()
}

// signal makes a fetch due, without waiting.
func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// fetchLoop fetches when a fetch is due, and keeps fetching, FetchCooldown
// apart, while its claims find intents: a recorder notifies at most once a
// NotifyCooldown, so intents committed just after a notification are found
// by the fetch after it, not at the next poll.
func (q *queue) fetchLoop(ctx, workCtx context.Context) {
	poll := time.NewTicker(q.d.config.FetchPollInterval)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-poll.C:
		}
		for q.fetch(ctx, workCtx) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(q.d.config.FetchCooldown):
			}
		}
	}
}

// fetch claims as many queued intents as there are free workers (waiting
// for one to free up), starts a worker for each, and reports whether it
// found any: more may be waiting.
func (q *queue) fetch(ctx, workCtx context.Context) bool {
	d := q.d
	n := d.workers.acquire(ctx, maxClaimBatch)
	if n == 0 {
		return false
	}
	batch, err := d.claimQueued(ctx, n)
	d.workers.release(n - len(batch.Claimed))
	if err != nil {
		// It may have committed: what it took goes back to the queue, once
		// the database answers, unless Stop gives up first.
		q.workers.Go(func() { _ = d.releaseUnsent(workCtx, nil, err) })
		return false
	}
	for _, l := range batch.Claimed {
		q.workers.Go(func() {
			defer d.workers.release(1)
			ctx, cancel := context.WithTimeout(workCtx, d.config.jobTimeout())
			defer cancel()
			d.performClaimed(ctx, l)
		})
	}
	return len(batch.Claimed)+batch.HandedOver > 0
}

// claimQueued claims up to n queued intents (intentstore.ClaimQueued). A
// claim whose answer was lost may have committed: the caller releases what
// it took (releaseUnsent).
func (d *Dispatcher) claimQueued(ctx context.Context, n int) (intentstore.ClaimBatch, error) {
	batch, err := d.store.ClaimQueued(ctx, d.rules, n, d.claimTime())
	if err != nil && ctx.Err() == nil {
		d.config.Logger.WarnContext(ctx, "could not claim queued intents; will try again", "error", err)
	}
	return batch, err
}

// performClaimed performs one intent a queue claim holds, and settles its
// outcome.
func (d *Dispatcher) performClaimed(ctx context.Context, l intentstore.Loaded) {
	p, _ := d.config.Providers.ByName(l.Row.Provider) // the claim names only providers served here
	st := step{d: d, row: l.Row, p: p}
	if err := st.perform(ctx, *l.Claim); err != nil {
		d.config.Logger.WarnContext(ctx, "a claimed intent's outcome could not be settled; the sweep takes it over",
			"intent_id", l.Row.ID, "error", err)
	}
}

// listen holds a connection of its own, out of the pool, listening on the
// queue's channel, and makes a fetch due at each notification; when the
// connection fails it connects again, backing off, and makes a fetch due
// (a notification may have been missed meanwhile; polling covers the gap).
func (q *queue) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := q.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		q.d.config.Logger.WarnContext(ctx, "the queue's notifications stopped; listening again", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (q *queue) listenOnce(ctx context.Context) error {
	conn, err := listenConn(ctx, q.d.pool)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var channel string
	if err := conn.QueryRow(ctx, intentstore.QueueChannelSQL).Scan(&channel); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	q.signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		q.signal()
	}
}

// listenConn takes a connection out of pool for good (a LISTEN belongs to
// a session): the pool opens another in its place.
func listenConn(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := c.Hijack()
	if conn == nil {
		return nil, errors.New("dispatcher: could not take a connection out of the pool to listen")
	}
	return conn, nil
}
