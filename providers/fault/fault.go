// Package fault injects the failures real providers show into the provider
// test doubles: slow responses, errors before and after acting, lost
// responses and rate limits. A double asks its Injector for the fault to
// apply to each effect-causing request and interprets it the way its real
// counterpart would (Stripe saves a 500 under the idempotency key, SendGrid
// saves nothing).
package fault

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Kind names a fault.
type Kind string

const (
	// None: the request is handled normally.
	None Kind = ""
	// Delay: the request is performed, then the response is held back for
	// Fault.Delay. A client that times out meanwhile cannot know whether the
	// provider acted.
	Delay Kind = "delay"
	// ErrorBefore: the provider answers Fault.Status (500 by default)
	// without acting.
	ErrorBefore Kind = "error_before"
	// ErrorAfter: the provider acts, then answers Fault.Status (500 by
	// default).
	ErrorAfter Kind = "error_after"
	// LoseResponse: the provider acts, then the connection is dropped before
	// any response is written (the lost ACK).
	LoseResponse Kind = "lose_response"
	// RateLimit: the provider answers 429 without acting, asking the client
	// to wait Fault.RetryAfter (1s by default).
	RateLimit Kind = "rate_limit"
	// BadReference: the provider acts and answers success with a reference
	// a text column refuses (invalid UTF-8) and longer than any real one,
	// where its protocol lets it (SendGrid's X-Message-Id header; JSON
	// cannot carry invalid UTF-8, so the Stripe double answers as usual).
	BadReference Kind = "bad_reference"
)

// BadReferenceValue returns what a BadReference fault answers as the
// reference: not UTF-8, and 5 kB.
func BadReferenceValue() string { return "msg-\xff\xfe-" + strings.Repeat("r", 5000) }

// Kinds lists every fault kind, in a fixed order, for reports.
var Kinds = []Kind{Delay, ErrorBefore, ErrorAfter, LoseResponse, RateLimit, BadReference}

// Fault is one injected failure.
type Fault struct {
	Kind Kind
	// Status is the HTTP status for ErrorBefore and ErrorAfter; 0 means 500.
	Status int
	// Delay is how long Delay holds the response back.
	Delay time.Duration
	// RetryAfter is what RateLimit asks the client to wait; 0 means 1s.
	RetryAfter time.Duration
}

// StatusOr500 returns f.Status, or 500 when it is unset.
func (f Fault) StatusOr500() int {
	if f.Status == 0 {
		return http.StatusInternalServerError
	}
	return f.Status
}

// RetryAfterOrDefault returns f.RetryAfter, or one second when it is unset.
func (f Fault) RetryAfterOrDefault() time.Duration {
	if f.RetryAfter <= 0 {
		return time.Second
	}
	return f.RetryAfter
}

// Rates are the probabilities, each from 0 to 1, that a request not covered
// by a queued fault gets each fault. They are drawn in the order of the
// fields; their sum should not exceed 1.
type Rates struct {
	LoseResponse float64
	ErrorAfter   float64
	ErrorBefore  float64
	RateLimit    float64
	Delay        float64
	// DelayFor is the delay of a Delay fault drawn by rate.
	DelayFor time.Duration
	// RetryAfter is the wait asked by a RateLimit fault drawn by rate.
	RetryAfter time.Duration
	// Status is the status of an ErrorBefore or ErrorAfter fault drawn by
	// rate; 0 means 500.
	Status int
}

// Injector hands out faults: first those queued with Push, in order, then
// faults drawn at the configured Rates from a seeded source, so a run can be
// repeated. It is safe for concurrent use. The zero value injects nothing;
// use New for a seeded one.
type Injector struct {
	mu       sync.Mutex
	queue    []Fault
	rates    Rates
	rnd      *rand.Rand
	injected map[Kind]int
}

// New returns an Injector that draws random faults from seed.
func New(seed uint64) *Injector {
	return &Injector{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), injected: map[Kind]int{}}
}

// Push queues faults for the next requests, one each, in order.
func (i *Injector) Push(faults ...Fault) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.queue = append(i.queue, faults...)
}

// Clear drops the faults queued by Push and not yet handed out.
func (i *Injector) Clear() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.queue = nil
}

// SetRates sets the random fault rates. It fails when a rate is outside
// [0, 1] or the rates add up to more than 1.
func (i *Injector) SetRates(r Rates) error {
	sum := 0.0
	for _, p := range []float64{r.LoseResponse, r.ErrorAfter, r.ErrorBefore, r.RateLimit, r.Delay} {
		if p < 0 || p > 1 {
			return errors.New("fault: every rate must be between 0 and 1")
		}
		sum += p
	}
	if sum > 1 {
		return errors.New("fault: rates add up to more than 1")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.rnd == nil {
		i.rnd = rand.New(rand.NewPCG(1, 2))
	}
	i.rates = r
	return nil
}

// Next returns the fault for the next request and counts it.
func (i *Injector) Next() Fault {
	i.mu.Lock()
	defer i.mu.Unlock()
	f := i.nextLocked()
	if f.Kind != None {
		if i.injected == nil {
			i.injected = map[Kind]int{}
		}
		i.injected[f.Kind]++
	}
	return f
}

func (i *Injector) nextLocked() Fault {
	if len(i.queue) > 0 {
		f := i.queue[0]
		i.queue = i.queue[1:]
		return f
	}
	if i.rnd == nil {
		return Fault{}
	}
	draw := i.rnd.Float64()
	r := i.rates
	for _, c := range []struct {
		p float64
		f Fault
	}{
		{r.LoseResponse, Fault{Kind: LoseResponse}},
		{r.ErrorAfter, Fault{Kind: ErrorAfter, Status: r.Status}},
		{r.ErrorBefore, Fault{Kind: ErrorBefore, Status: r.Status}},
		{r.RateLimit, Fault{Kind: RateLimit, RetryAfter: r.RetryAfter}},
		{r.Delay, Fault{Kind: Delay, Delay: r.DelayFor}},
	} {
		if draw < c.p {
			return c.f
		}
		draw -= c.p
	}
	return Fault{}
}

// Injected returns how many faults of each kind have been handed out.
func (i *Injector) Injected() map[Kind]int {
	i.mu.Lock()
	defer i.mu.Unlock()
	out := make(map[Kind]int, len(i.injected))
	for k, v := range i.injected {
		out[k] = v
	}
	return out
}

// DropConnection closes the client's connection without writing a response,
// the way a provider whose response is lost in the network looks to the
// client. The handler must not write to w afterwards.
func DropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		// HTTP/2 and recorders cannot be hijacked; aborting the handler is
		// the closest equivalent net/http offers.
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// ApplyToRead applies the part of f every double's reads share, and reports
// whether the request is answered: None is not; a Delay is waited out (or
// until the client gives up) and is not; a LoseResponse drops the
// connection and is. The caller answers the other kinds as its provider
// words them.
func ApplyToRead(w http.ResponseWriter, r *http.Request, f Fault) (answered bool) {
	switch f.Kind {
	case Delay:
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
		}
	case LoseResponse:
		DropConnection(w)
		return true
	}
	return false
}
