package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// doubles are the sandbox a scenario dispatches to, in this process, and
// with timestamps the arrivals its Stripe front records.
type doubles struct {
	*sandbox.Sandbox
	arrivals *arrivals
}

// startDoubles starts the sandbox. stripeFaults, when not nil, injects
// faults (a delay) into every payment. With timestamps, calls to the Stripe
// double go through a front that records when each intent's first call
// arrived.
func startDoubles(stripeFaults *fault.Injector, timestamps bool) (*doubles, error) {
	d := &doubles{}
	cfg := &sandbox.Config{StripeFaults: stripeFaults}
	if timestamps {
		d.arrivals = newArrivals()
		cfg.StripeFront = d.arrivals.front
	}
	sb, err := sandbox.Start(cfg)
	if err != nil {
		return nil, err
	}
	d.Sandbox = sb
	return d, nil
}

// arrivals records when the first call for each intent reached the Stripe
// double.
type arrivals struct {
	mu    sync.Mutex
	at    map[int64]time.Time
	added chan struct{} // closed and replaced at every new arrival
}

func newArrivals() *arrivals {
	return &arrivals{at: map[int64]time.Time{}, added: make(chan struct{})}
}

// front timestamps a request, passes it on to next unchanged, and records
// its arrival if the double accepted it: a call the double refused is no
// effect, and a system whose calls are refused must not be measured as
// fast.
func (a *arrivals) front(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		id, keyed := int64(0), false
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err == nil {
				r.Body = io.NopCloser(bytes.NewReader(body))
				if form, err := url.ParseQuery(string(body)); err == nil {
					id, err = strconv.ParseInt(form.Get("metadata["+stripeprovider.IntentIDMetadataKey+"]"), 10, 64)
					keyed = err == nil
				}
			}
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		if keyed && sw.status/100 == 2 {
			a.record(id, now)
		}
	})
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (a *arrivals) record(id int64, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, seen := a.at[id]; seen {
		return
	}
	a.at[id] = at
	close(a.added)
	a.added = make(chan struct{})
}

// wait waits until n intents have arrived, or ctx ends.
func (a *arrivals) wait(ctx context.Context, n int) error {
	for {
		a.mu.Lock()
		got, added := len(a.at), a.added
		a.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-added:
		case <-ctx.Done():
			return errors.New("provider calls did not all arrive: " + strconv.Itoa(got) + " of " + strconv.Itoa(n))
		}
	}
}

// waitFor waits until the call for id has arrived, or ctx ends.
func (a *arrivals) waitFor(ctx context.Context, id int64) error {
	for {
		a.mu.Lock()
		_, ok := a.at[id]
		added := a.added
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-added:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (a *arrivals) get(id int64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[id]
	return t, ok
}
