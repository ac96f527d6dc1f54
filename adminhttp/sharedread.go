package adminhttp

import (
	"context"
	"sync"
	"time"
)

// Counting the intents reads every unfinished one (audit.Store.Stats, and
// the backlog of the activity chart): a millisecond on a quiet outbox, most
// of a second with a backlog of 200,000, and every open dashboard
// refreshes, every monitor polls. The handler's readers share counts
// instead (a sharedRead for each): a count is reused for
// sharedReuseFactor times as long as it took, so that counting never takes
// more than about a tenth of the database's time whatever the number of
// readers, and a fast count is as good as live. Past that, a reader waits
// for a new count, shared with every reader meanwhile; but where the last
// count was slow (sharedSlowCount), the reader is given it at once while
// the new one runs, for as long as it is younger than sharedStaleLimit.
const (
	sharedReuseFactor = 10
	// sharedReuseLimit bounds the reuse of a count that took long.
	sharedReuseLimit = 5 * time.Second
	// sharedSlowCount is the time a count may take for the readers to wait
	// for it: the dashboard's and the API's reads are to answer within
	// 50 ms.
	sharedSlowCount = 25 * time.Millisecond
	// sharedStaleLimit is the oldest count a reader is shown while a new
	// one runs.
	sharedStaleLimit = 15 * time.Second
	// sharedCountTimeout bounds a count no reader waits for any more.
	sharedCountTimeout = time.Minute
)

// sharedRead shares one count among the handler's readers (see
// sharedReuseFactor). It is safe for concurrent use.
type sharedRead[T any] struct {
	count func(context.Context) (T, error)
	now   func() time.Time

	mu   sync.Mutex
	last *counted[T]
	// running is closed when the count in flight ends; nil when none is.
	running chan struct{}
	// runErr is the error of the count that ended last, if it failed.
	runErr error
}

// counted is one count, with when it started and how long it took, by the
// cache's clock.
type counted[T any] struct {
	value T
	at    time.Time
	took  time.Duration
}

// newSharedRead shares count's results, timing them with now: the
// machine's clock, whatever the handler's Config.Now pretends.
func newSharedRead[T any](count func(context.Context) (T, error), now func() time.Time) *sharedRead[T] {
	return &sharedRead[T]{count: count, now: now}
}

// get returns counts no older than sharedStaleLimit, and how old they
// are: reused if still fresh, else the last ones while a new count runs,
// else a new count, waited for.
func (c *sharedRead[T]) get(ctx context.Context) (T, time.Duration, error) {
	c.mu.Lock()
	if l := c.last; l != nil {
		age := c.now().Sub(l.at)
		if age < min(sharedReuseFactor*l.took, sharedReuseLimit) {
			c.mu.Unlock()
			return l.value, age, nil
		}
		if age < sharedStaleLimit && l.took >= sharedSlowCount {
			c.startLocked()
			c.mu.Unlock()
			return l.value, age, nil
		}
	}
	done := c.startLocked()
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		var zero T
		return zero, 0, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runErr != nil {
		var zero T
		return zero, 0, c.runErr
	}
	return c.last.value, c.now().Sub(c.last.at), nil
}

// invalidate makes the next reader wait for a new count: an operator who
// just acted sees the counts after the action.
func (c *sharedRead[T]) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = nil
}

// startLocked starts a count unless one runs, and returns the channel
// closed when the count in flight ends. c.mu must be held.
func (c *sharedRead[T]) startLocked() <-chan struct{} {
	if c.running != nil {
		return c.running
	}
	done := make(chan struct{})
	c.running = done
	go func() {
		// The count serves whoever asks next, not only the request that
		// started it: it outlives that request, within its own bound.
		ctx, cancel := context.WithTimeout(context.Background(), sharedCountTimeout)
		defer cancel()
		at := c.now()
		st, err := c.count(ctx)
		took := c.now().Sub(at)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.runErr = err
		if err == nil {
			c.last = &counted[T]{value: st, at: at, took: took}
		}
		c.running = nil
		close(done)
	}()
	return done
}

// countsChanged is called after an operator's action: the next page or
// API read counts again, so that the operator sees the action counted.
func (h *Handler) countsChanged() {
	h.stats.invalidate()
	h.activity.invalidate()
}
