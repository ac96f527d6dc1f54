// Package sandbox runs the Stripe and SendGrid doubles in this process,
// with the fault injectors a tool gives them, and the provider registry
// whose adapters call them: what the outboxd tools (bench, chaos, demo,
// `outboxd doubles`) run against.
//
// What a tool does with the doubles stays in the tool: which faults to
// inject, what to measure at a front, how to serve them to other processes.
package sandbox

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// DefaultAddr is where a double listens unless told otherwise: a free port
// on loopback.
const DefaultAddr = "127.0.0.1:0"

// The doubles, as DoubleError names them.
const (
	Stripe   = "Stripe"
	SendGrid = "SendGrid"
)

// Config configures Start. The zero value runs both doubles on free
// loopback ports, without faults.
type Config struct {
	// StripeAddr is the address the Stripe double listens on (host:port;
	// port 0 picks a free one). Defaults to DefaultAddr.
	StripeAddr string
	// SendGridAddr is the address the SendGrid double listens on. Defaults
	// to DefaultAddr.
	SendGridAddr string
	// StripeFaults injects faults into the Stripe double's effect-causing
	// requests (payments, captures, cancels, refunds). Defaults to none.
	StripeFaults *fault.Injector
	// StripeLookupFaults injects faults into the Stripe double's reads (the
	// look-ups Reconcile makes). Defaults to none.
	StripeLookupFaults *fault.Injector
	// SendGridFaults injects faults into the SendGrid double's emails.
	// Defaults to none.
	SendGridFaults *fault.Injector
	// SendGridLookupFaults injects faults into the SendGrid double's Email
	// Activity look-ups. Defaults to none.
	SendGridLookupFaults *fault.Injector
	// StripeFront, when set, wraps the Stripe double's handler and serves
	// the result on a loopback listener of its own; the registry's Stripe
	// adapter then calls the front, and StripeURL is the front's. A tool
	// measures or alters the calls there without touching the double.
	// Defaults to none: the adapter calls the double.
	StripeFront func(http.Handler) http.Handler
}

// validate checks cfg once, before anything listens. An injector given for
// two kinds of request would draw for both, so the faults of one would
// depend on the traffic of the other and a seed would not repeat a run.
func (cfg *Config) validate() error {
	seen := map[*fault.Injector]string{}
	for _, f := range []struct {
		name string
		inj  *fault.Injector
	}{
		{"StripeFaults", cfg.StripeFaults},
		{"StripeLookupFaults", cfg.StripeLookupFaults},
		{"SendGridFaults", cfg.SendGridFaults},
		{"SendGridLookupFaults", cfg.SendGridLookupFaults},
	} {
		if f.inj == nil {
			continue
		}
		if other, ok := seen[f.inj]; ok {
			return fmt.Errorf("sandbox: Config.%s is the injector of Config.%s: give each its own", f.name, other)
		}
		seen[f.inj] = f.name
	}
	return nil
}

func (cfg *Config) withDefaults() Config {
	c := *cfg
	if c.StripeAddr == "" {
		c.StripeAddr = DefaultAddr
	}
	if c.SendGridAddr == "" {
		c.SendGridAddr = DefaultAddr
	}
	return c
}

// DoubleError is a double that could not start. Its message is the
// double's own, which names it ("stripedouble: listen on …"); Double
// (Stripe or SendGrid) lets a caller say which setting was wrong.
type DoubleError struct {
	Double string
	Err    error
}

func (e *DoubleError) Error() string { return e.Err.Error() }
func (e *DoubleError) Unwrap() error { return e.Err }

// Sandbox is the running doubles and the registry pointed at them.
type Sandbox struct {
	stripe    *stripedouble.Server
	sendgrid  *sendgriddouble.Server
	registry  *providers.Registry
	front     *http.Server
	stripeURL string
}

// Start validates cfg, starts both doubles and builds the registry whose
// adapters call them. A nil cfg is the zero Config. On error nothing is left
// running; a double that could not listen is a *DoubleError.
func Start(cfg *Config) (*Sandbox, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	s, err := startDoubles(c)
	if err != nil {
		return nil, err
	}
	if c.StripeFront != nil {
		if err := s.serveFront(c.StripeFront); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	if s.registry, err = NewRegistry(s.stripeURL, s.sendgrid.URL()); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

func startDoubles(c Config) (*Sandbox, error) {
	st, err := stripedouble.NewServer(stripedouble.Config{Addr: c.StripeAddr, Faults: c.StripeFaults, LookupFaults: c.StripeLookupFaults})
	if err != nil {
		return nil, &DoubleError{Double: Stripe, Err: err}
	}
	sg, err := sendgriddouble.NewServer(sendgriddouble.Config{Addr: c.SendGridAddr, Faults: c.SendGridFaults, LookupFaults: c.SendGridLookupFaults})
	if err != nil {
		_ = st.Close()
		return nil, &DoubleError{Double: SendGrid, Err: err}
	}
	return &Sandbox{stripe: st, sendgrid: sg, stripeURL: st.URL()}, nil
}

func (s *Sandbox) serveFront(wrap func(http.Handler) http.Handler) error {
	ln, err := net.Listen("tcp", DefaultAddr)
	if err != nil {
		return fmt.Errorf("sandbox: listen for the Stripe front: %w", err)
	}
	s.front = &http.Server{Handler: wrap(s.stripe.Handler()), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.front.Serve(ln) }()
	s.stripeURL = "http://" + ln.Addr().String()
	return nil
}

// NewRegistry returns the Stripe and SendGrid adapters with the doubles'
// keys, calling the given base URLs: where a sandbox's doubles listen, in
// this process or another. The adapters keep their default HTTP clients,
// as `outboxd run` does: their connection pools are sized for a
// dispatcher's workers.
func NewRegistry(stripeURL, sendgridURL string) (*providers.Registry, error) {
	sp, err := stripeprovider.New(stripeprovider.Config{APIKey: stripedouble.DefaultAPIKey, BaseURL: stripeURL})
	if err != nil {
		return nil, err
	}
	gp, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: sendgridURL})
	if err != nil {
		return nil, err
	}
	return providers.NewRegistry(sp, gp)
}

// Stripe is the Stripe double.
func (s *Sandbox) Stripe() *stripedouble.Server { return s.stripe }

// SendGrid is the SendGrid double.
func (s *Sandbox) SendGrid() *sendgriddouble.Server { return s.sendgrid }

// Registry holds the Stripe and SendGrid adapters pointed at the doubles
// (the Stripe one at the front, if any).
func (s *Sandbox) Registry() *providers.Registry { return s.registry }

// StripeURL is where the registry's Stripe adapter sends its calls: the
// front when Config.StripeFront is set, the double otherwise.
func (s *Sandbox) StripeURL() string { return s.stripeURL }

// DuplicateEffects is how many intents either double performed more than
// once.
func (s *Sandbox) DuplicateEffects() int {
	return s.stripe.DuplicateEffects() + s.sendgrid.DuplicateEffects()
}

// Close stops the front and both doubles, dropping open connections at
// once: a request still held by a delay fault is cut, as a provider
// restarting would cut it. It stops them all even when one fails, and
// returns the first failure, the Stripe double's before the SendGrid
// double's.
func (s *Sandbox) Close() error {
	var frontErr error
	if s.front != nil {
		frontErr = s.front.Close()
	}
	stripeErr, sendgridErr := s.stripe.Close(), s.sendgrid.Close()
	switch {
	case stripeErr != nil:
		return fmt.Errorf("stop the Stripe double: %w", stripeErr)
	case sendgridErr != nil:
		return fmt.Errorf("stop the SendGrid double: %w", sendgridErr)
	case frontErr != nil:
		return fmt.Errorf("stop the Stripe front: %w", frontErr)
	}
	return nil
}
