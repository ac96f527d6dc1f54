package testkit

import (
	"sync"
	"time"
)

// Clock is a clock a test moves forward, for the Now a component takes:
// stopped at an instant (NewClock), or real time plus an offset
// (NewRunningClock), for components that also wait on real timers. Safe
// for concurrent use.
type Clock struct {
	mu      sync.Mutex
	running bool
	at      time.Time     // stopped: the instant
	offset  time.Duration // running: ahead of real time by
}

// NewClock returns a clock stopped at at.
func NewClock(at time.Time) *Clock { return &Clock{at: at} }

// NewRunningClock returns a clock that runs with real time, ahead of it by
// what Advance added.
func NewRunningClock() *Clock { return &Clock{running: true} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return time.Now().Add(c.offset)
	}
	return c.at
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(d)
	c.offset += d
}
