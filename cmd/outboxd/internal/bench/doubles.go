package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// doubles are the Stripe and SendGrid doubles a scenario dispatches to, in
// this process, with a registry of adapters pointed at them.
type doubles struct {
	stripe   *stripedouble.Server
	sendgrid *sendgriddouble.Server
	registry *providers.Registry
	// stripeURL is where the Stripe adapter sends its calls: the double
	// itself, or a front that timestamps arrivals.
	stripeURL string
	front     *http.Server
	arrivals  *arrivals
}

// startDoubles starts both doubles. stripeFaults, when not nil, injects
// faults (a delay) into every payment. With timestamps, calls to the Stripe
// double go through a front that records when each intent's first call
// arrived.
func startDoubles(stripeFaults *fault.Injector, timestamps bool) (*doubles, error) {
	st, err := stripedouble.NewServer(stripedouble.Config{Faults: stripeFaults})
	if err != nil {
		return nil, err
	}
	sg, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	d := &doubles{stripe: st, sendgrid: sg, stripeURL: st.URL()}
	if timestamps {
		d.arrivals = newArrivals()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			d.close()
			return nil, err
		}
		d.front = &http.Server{Handler: d.arrivals.front(st.Handler()), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = d.front.Serve(ln) }()
		d.stripeURL = "http://" + ln.Addr().String()
	}
	// The adapters' default clients, as `outboxd run` uses them: their
	// connection pools are sized for a dispatcher's workers.
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: d.stripeURL})
	if err != nil {
		d.close()
		return nil, err
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: sg.URL()})
	if err != nil {
		d.close()
		return nil, err
	}
	d.registry, err = providers.NewRegistry(sp, gp)
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *doubles) close() {
	if d.front != nil {
		_ = d.front.Close()
	}
	_ = d.stripe.Close()
	_ = d.sendgrid.Close()
}

// duplicates is how many intents either double performed more than once.
func (d *doubles) duplicates() int {
	return d.stripe.DuplicateEffects() + d.sendgrid.DuplicateEffects()
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
