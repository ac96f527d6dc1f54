package brokerloop

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Config configures a Loop. Session, Scrub, Retrying and AlreadyRunning
// are required; New panics without them, since only a consumer's own code
// builds a Config.
type Config struct {
	// Session connects, consumes until ctx ends or the connection is lost,
	// and disconnects. started reports whether consuming began; err says
	// why the session ended and is ignored once ctx has ended.
	Session func(ctx context.Context) (started bool, err error)
	// Backoff paces the reconnects: after the nth failed session in a row
	// (counting from 0) Run waits Backoff.Delay(n).
	Backoff Backoff
	// ResetAfter: a session that started consuming and lasted at least
	// ResetAfter starts the backoff over, so a connection that was healthy
	// for a while reconnects quickly. 0 starts it over after any session
	// that started consuming.
	ResetAfter time.Duration
	// Scrub removes secrets (the URL's password) from a session's error
	// before Retrying sees it. Required, so that no consumer logs a
	// session's error unscrubbed by forgetting to; one whose errors are
	// scrubbed where they are made scrubs again here at no cost.
	Scrub func(error) error
	// Retrying reports, typically by logging, that a session ended and
	// when the next begins.
	Retrying func(ctx context.Context, r Retry)
	// AlreadyRunning is the error Run returns while another Run of the
	// same Loop is running: the consumer's own sentinel.
	AlreadyRunning error
	// Now is the clock that times a session for ResetAfter. Defaults to
	// time.Now.
	Now func() time.Time
	// Sleep waits out a backoff delay and reports whether it completed
	// (false once ctx ended). Defaults to the package's Sleep.
	Sleep func(ctx context.Context, d time.Duration) bool
}

// Retry is a session's end, as Config.Retrying receives it.
type Retry struct {
	// Started reports whether the session got as far as consuming: a lost
	// connection rather than one that could not be set up.
	Started bool
	// Err is why the session ended, scrubbed by Config.Scrub. Never nil.
	Err error
	// Attempt counts the sessions that failed since the backoff last
	// started over, this one included: 1 after the first.
	Attempt int
	// Wait is how long Run waits before the next session.
	Wait time.Duration
}

// errEnded stands in for a session that ended, with ctx still live, and
// gave no reason, so that Retrying always has an error to report.
var errEnded = errors.New("the session ended without an error")

// Loop runs one consumer's sessions with its broker, one at a time, until
// Run's context ends. Create it with New.
type Loop struct {
	cfg     Config
	running atomic.Bool
}

// New returns a Loop for cfg, with its defaults filled in.
func New(cfg *Config) *Loop {
	c := *cfg
	if c.Session == nil || c.Scrub == nil || c.Retrying == nil || c.AlreadyRunning == nil {
		panic("brokerloop: Config.Session, Scrub, Retrying and AlreadyRunning are required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = Sleep
	}
	return &Loop{cfg: c}
}

// Run runs sessions until ctx ends and returns ctx.Err(). A session that
// ends while ctx is live is reported to Config.Retrying and followed,
// after the backoff's delay, by another: Run never returns because the
// broker is unreachable. While one Run is running, another returns
// Config.AlreadyRunning at once; Run may be called again once it returned.
func (l *Loop) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return l.cfg.AlreadyRunning
	}
	defer l.running.Store(false)
	failures := 0
	for {
		began := l.cfg.Now()
		started, err := l.cfg.Session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if started && l.cfg.Now().Sub(began) >= l.cfg.ResetAfter {
			failures = 0
		}
		wait := l.cfg.Backoff.Delay(failures)
		failures++
		if err == nil {
			err = errEnded
		}
		l.cfg.Retrying(ctx, Retry{Started: started, Err: l.cfg.Scrub(err), Attempt: failures, Wait: wait})
		if !l.cfg.Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// Sleep waits d or until ctx ends; it reports whether the wait completed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
