package intentstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// combiner runs the requests of concurrent callers in groups, as River's
// batch completer does for job rows: a caller that finds fewer than lanes
// groups in flight runs its request at once, alone; callers that arrive
// while every lane is busy wait, and the next lane to free up runs them
// together (up to max) as one group. So a group never waits for a timer:
// at low load every request runs alone with a single round trip's latency,
// and under load one round trip and one commit serve many requests. More
// than one lane keeps a group's work from being serialised on a single
// database backend when the server is short of CPU.
//
// No goroutine of its own runs the groups: a waiting caller does, handed
// its group by the caller whose group finished. Every request therefore has
// a caller blocked in do until its result is set, and nothing is left
// queued when every caller has returned (a Dispatcher's Stop waits for its
// workers, so it waits for their settlements too).
type combiner[Req, Res any] struct {
	max, lanes int
	// run sets res and err of every call in group. It must not keep them.
	run func(ctx context.Context, group []*call[Req, Res])

	mu       sync.Mutex
	queue    []*call[Req, Res]
	inFlight int // groups running; the queue is empty while fewer than lanes
}

// call is one caller's request in a combiner.
type call[Req, Res any] struct {
	req Req
	res Res
	err error
	// done receives the group the call must run, itself first, or nil
	// once res and err are set.
	done chan []*call[Req, Res]
}

func newCombiner[Req, Res any](maxGroup, lanes int, run func(context.Context, []*call[Req, Res])) *combiner[Req, Res] {
	return &combiner[Req, Res]{max: maxGroup, lanes: lanes, run: run}
}

// do runs req in a group and returns its result. The group runs under the
// context of the caller that leads it; run must not let one caller's
// cancellation fail the others' requests.
func (c *combiner[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	me := &call[Req, Res]{req: req, done: make(chan []*call[Req, Res], 1)}
	var group []*call[Req, Res]
	c.mu.Lock()
	if c.inFlight < c.lanes {
		c.inFlight++
		group = []*call[Req, Res]{me}
	} else {
		c.queue = append(c.queue, me)
	}
	c.mu.Unlock()
	if group == nil {
		if group = <-me.done; group == nil {
			return me.res, me.err
		}
	}
	c.runGroup(ctx, group)
	// Hand the lane to the next group, if any, before telling this
	// group's callers: the next commit starts as soon as possible.
	c.mu.Lock()
	var next []*call[Req, Res]
	if n := min(len(c.queue), c.max); n > 0 {
		next = make([]*call[Req, Res], n)
		copy(next, c.queue)
		c.queue = append(c.queue[:0:0], c.queue[n:]...)
	} else {
		c.inFlight--
	}
	c.mu.Unlock()
	if next != nil {
		next[0].done <- next
	}
	for _, cl := range group {
		if cl != me {
			cl.done <- nil
		}
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

// runOrdered is what every group run shares. A group of one runs alone.
// A larger one runs together, in intent id order, so that two groups, or a
// group and an operator's action, cannot wait on each other's row locks in
// a cycle (the sort is stable: two requests for one intent keep the order
// they came in); together sets every call's result once its transaction
// committed, or returns its error. A transient error that outlasted
// together's own retries fails every call: one by one would not fare
// better, only take len(group) times longer. Any other error falls back to
// each request alone, so one bad request cannot hold back the rest.
func runOrdered[Req, Res any](ctx context.Context, group []*call[Req, Res], what string, id func(Req) int64,
	alone func(context.Context, Req) (Res, error), together func(context.Context, []*call[Req, Res]) error) {
	if len(group) == 1 {
		group[0].res, group[0].err = alone(ctx, group[0].req)
		return
	}
	sorted := slices.Clone(group)
	slices.SortStableFunc(sorted, func(a, b *call[Req, Res]) int { return cmp.Compare(id(a.req), id(b.req)) })
	err := together(ctx, sorted)
	if err == nil {
		return
	}
	if IsTransient(ctx, err) {
		for _, cl := range group {
			cl.err = fmt.Errorf("intentstore: %s intent %d: %w", what, id(cl.req), err)
		}
		return
	}
	for _, cl := range sorted {
		cl.res, cl.err = alone(ctx, cl.req)
	}
}
