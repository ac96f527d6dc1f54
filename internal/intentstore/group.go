package intentstore

import (
	"context"
	"fmt"
	"sync"
)

// combiner runs the requests of concurrent callers in groups, one group at
// a time, as River's batch completer does for job rows: a caller that finds
// no group in flight runs its request at once, alone; callers that arrive
// while a group is in flight wait, and the first of them then runs all of
// them (up to max) as the next group. So a group never waits for a timer:
// at low load every request runs alone with a single round trip's latency,
// and under load one round trip and one commit serve many requests.
//
// No goroutine of its own runs the groups: the caller at the head of the
// queue does. Every request therefore has a caller blocked in do until its
// result is set, and nothing is left queued when every caller has returned
// (a Dispatcher's Stop waits for its workers, so it waits for their
// settlements too).
type combiner[Req, Res any] struct {
	max int
	// run sets res and err of every call in group. It must not keep them.
	run func(ctx context.Context, group []*call[Req, Res])

	mu    sync.Mutex
	queue []*call[Req, Res]
	busy  bool // a group is in flight; queue[0], if any, leads the next one
}

// call is one caller's request in a combiner.
type call[Req, Res any] struct {
	req Req
	res Res
	err error
	// done receives true when the call must lead the next group, false
	// once res and err are set.
	done chan bool
}

func newCombiner[Req, Res any](maxGroup int, run func(context.Context, []*call[Req, Res])) *combiner[Req, Res] {
	return &combiner[Req, Res]{max: maxGroup, run: run}
}

// do runs req in a group and returns its result. The group runs under the
// context of the caller that leads it; run must not let one caller's
// cancellation fail the others' requests.
func (c *combiner[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	me := &call[Req, Res]{req: req, done: make(chan bool, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, me)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()
	if !lead && !<-me.done {
		return me.res, me.err
	}
	// me is at the head of the queue: while busy, only the leader takes
	// calls off it, and a new leader is always its head.
	c.mu.Lock()
	n := min(len(c.queue), c.max)
	group := make([]*call[Req, Res], n)
	copy(group, c.queue)
	c.queue = append(c.queue[:0:0], c.queue[n:]...)
	c.mu.Unlock()

	c.runGroup(ctx, group)

	c.mu.Lock()
	var next *call[Req, Res]
	if len(c.queue) > 0 {
		next = c.queue[0]
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	if next != nil {
		next.done <- true
	}
	for _, cl := range group[1:] {
		cl.done <- false
	}
	return me.res, me.err
}

// runGroup runs a group, turning a panic into every call's error so that no
// caller waits forever for a group that will not finish.
func (c *combiner[Req, Res]) runGroup(ctx context.Context, group []*call[Req, Res]) {
	defer func() {
		if r := recover(); r != nil {
			for _, cl := range group {
				cl.err = fmt.Errorf("intentstore: group of %d failed: %v", len(group), r)
			}
		}
	}()
	c.run(ctx, group)
}
