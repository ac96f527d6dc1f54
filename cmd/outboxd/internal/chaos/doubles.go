package chaos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	cryptorand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/sandbox"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/fault"
)

// WirePath is where each double served by ServeDoubles answers with its
// wire log (a JSON array of WireRecord), next to the double's own
// /_double/stats.
const WirePath = "/_chaos/wire"

// DoublesConfig configures ServeDoubles.
type DoublesConfig struct {
	// Seed makes the faults repeatable; the Stripe double draws from Seed,
	// the SendGrid double from Seed+1.
	Seed uint64
	// FaultRate is the share of effect-causing requests (payments, emails)
	// that get a fault, from 0 to 1, split over the kinds by the Share constants.
	FaultRate float64
	// DelayFor is how long a delay fault holds the response after the
	// double acted; the suite makes it longer than the dispatcher's call
	// timeout, so the call times out. Required when FaultRate > 0.
	DelayFor time.Duration
	// HoldFaults keeps the faults off until POST StartPath, so that the
	// suite can first create another deployment's objects in the Stripe
	// double without drawing from the seeded faults.
	HoldFaults bool
	// SendGridTLS serves the SendGrid double over TLS with HTTP/2, with a
	// self-signed certificate (DoublesAddrs.SendGridCertPEM), and adds the
	// stream-reset fault: a share FaultRate × ShareStreamReset of the
	// emails are read and accepted by the double, then their stream is
	// reset (RST_STREAM) instead of answered. The double's records stay
	// readable over plain HTTP at DoublesAddrs.SendGridControlURL.
	SendGridTLS bool
}

// ShareLookupRefused and ShareLookupRateLimited are the shares of
// FaultRate of the doubles' look-ups (Stripe's lists and reads, SendGrid's
// Email Activity) answered 404 and 429.
const (
	ShareLookupRefused     = 0.5
	ShareLookupRateLimited = 0.2
)

// ShareStreamReset is the share of FaultRate by which the SendGrid double,
// when served over HTTP/2, resets an email's stream after accepting it, on
// top of the other faults.
const ShareStreamReset = 0.15

// ResetsPath (GET) on the SendGrid control listener returns ResetStats.
const ResetsPath = "/_chaos/resets"

// ResetStats counts the emails whose stream the SendGrid double reset
// after accepting them, and the emails that arrived over HTTP/2.
type ResetStats struct {
	Resets int `json:"resets"`
	HTTP2  int `json:"http2"`
}

// Control endpoints of the doubles' process, on the Stripe double's
// listener.
const (
	// StartPath (POST) turns the faults on when DoublesConfig.HoldFaults.
	StartPath = "/_chaos/start"
	// StormPath (POST ?for=DURATION) makes the Stripe double answer every
	// payment with a 503 (fault.ErrorBefore, nothing created) for that long;
	// GET returns StormStats.
	StormPath = "/_chaos/storm"
	// PaymentIntentsPath (GET) lists every PaymentIntent the Stripe double
	// holds, as []StripeObject.
	PaymentIntentsPath = "/_chaos/payment_intents"
	// RefundsPath (GET) lists every refund the Stripe double made, as
	// []StripeRefund.
	RefundsPath = "/_chaos/refunds"
)

// StripeRefund is one refund at the Stripe double: whose it is (metadata),
// what it refunded and of which PaymentIntent.
type StripeRefund struct {
	ID            string            `json:"id"`
	PaymentIntent string            `json:"payment_intent"`
	Amount        int64             `json:"amount"`
	Metadata      map[string]string `json:"metadata"`
}

// StormStats counts the 503 storms and the requests they answered.
type StormStats struct {
	Storms   int `json:"storms"`
	Answered int `json:"answered"`
}

// StripeObject is one PaymentIntent at the Stripe double, as the suite
// judges it: whose it is (metadata) and what it charged.
type StripeObject struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
	// AmountReceived is what was charged: captured, for a PaymentIntent
	// authorised with capture_method manual.
	AmountReceived int64             `json:"amount_received"`
	Status         string            `json:"status"`
	Metadata       map[string]string `json:"metadata"`
}

// storm answers every effect-causing request with a 503 before the double
// acts while a storm lasts.
type storm struct {
	faults *fault.Injector
	mu     sync.Mutex
	until  time.Time
	stats  StormStats
}

func (st *storm) wrap(next http.Handler, effectPath string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == StormPath && r.Method == http.MethodPost:
			d, err := time.ParseDuration(r.URL.Query().Get("for"))
			if err != nil || d <= 0 || d > time.Minute {
				http.Error(w, "for: a duration up to 1m", http.StatusBadRequest)
				return
			}
			st.mu.Lock()
			st.until = time.Now().Add(d)
			st.stats.Storms++
			st.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		case r.URL.Path == StormPath && r.Method == http.MethodGet:
			st.mu.Lock()
			stats := st.stats
			st.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(stats)
			return
		case r.URL.Path == effectPath && r.Method == http.MethodPost:
			st.mu.Lock()
			on := time.Now().Before(st.until)
			if on {
				st.stats.Answered++
				// Drawn by this very request: the double draws one fault
				// per payment, queued faults first.
				st.faults.Push(fault.Fault{Kind: fault.ErrorBefore, Status: http.StatusServiceUnavailable})
			}
			st.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

// Shares of DoublesConfig.FaultRate by fault kind: lost responses after
// acting, 500s after acting, 429s, delays longer than the call timeout, and
// 500s before acting.
const (
	ShareLoseResponse = 0.25
	ShareErrorAfter   = 0.25
	ShareRateLimit    = 0.25
	ShareDelay        = 0.15
	ShareErrorBefore  = 0.10
)

// DoublesAddrs are the base URLs ServeDoubles listens on. ServeDoubles
// reports them as one JSON line.
type DoublesAddrs struct {
	StripeURL   string `json:"stripe_url"`
	SendGridURL string `json:"sendgrid_url"`
	// SendGridControlURL serves the SendGrid double's records (and its API)
	// over plain HTTP; it is SendGridURL when that is plain HTTP.
	SendGridControlURL string `json:"sendgrid_control_url"`
	// SendGridCertPEM is the self-signed certificate of SendGridURL when it
	// is served over TLS, for the dispatchers to trust (SSL_CERT_FILE).
	SendGridCertPEM string `json:"sendgrid_cert_pem,omitempty"`
}

// WireRecord is one effect-causing request (POST /v1/payment_intents or
// POST /v3/mail/send) as the wire showed it, seen from the provider's side:
// what a client could have learnt from the answer, independently of the
// dispatcher's own bookkeeping.
type WireRecord struct {
	// IntentID is the intent the request was for (Stripe's
	// metadata[intent_id], SendGrid's custom_args.intent_id); 0 if none.
	IntentID int64 `json:"intent_id"`
	// Foreign: the request was the other deployment's (ForeignNamespace
	// in its metadata): its intent id names none of ours.
	Foreign bool `json:"foreign,omitempty"`
	// Start is when the request arrived, End when the handler finished.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Status is the answer's HTTP status, or 0 when none was written.
	Status int `json:"status"`
	// Dropped: the connection was closed without an answer (a lost
	// response).
	Dropped bool `json:"dropped"`
	// ClientGone: the client went away before the answer was complete (its
	// call timed out, or its process died).
	ClientGone bool `json:"client_gone"`
	// Reset: the handler aborted the answer (an HTTP/2 stream reset after
	// the double acted); Dropped is set too.
	Reset bool `json:"reset"`
}

// Ambiguous reports whether a client could not have known from this answer
// whether the provider acted, given its call timeout: a 5xx, no answer at
// all, or an answer that came after the timeout.
func (w WireRecord) Ambiguous(callTimeout time.Duration) bool {
	return w.Status >= 500 || w.Dropped || w.ClientGone || w.Status == 0 || w.End.Sub(w.Start) >= callTimeout
}

// wireLog records WireRecords.
type wireLog struct {
	mu      sync.Mutex
	records []WireRecord
}

func (l *wireLog) add(r WireRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
}

func (l *wireLog) snapshot() []WireRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]WireRecord(nil), l.records...)
}

// maxLoggedBody bounds how much of a request body the wire log reads to find
// the intent id; the suite's payloads are far smaller.
const maxLoggedBody = 1 << 20

// recordWire wraps a double's handler: POSTs to effectPath are logged with
// the intent id taken from the body by intentID; everything else passes
// through. GET WirePath serves the log.
func recordWire(next http.Handler, effectPaths []string, intentID func([]byte) (int64, bool), wl *wireLog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == WirePath && r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(wl.snapshot())
			return
		}
		if !slices.Contains(effectPaths, r.URL.Path) || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		rec := WireRecord{Start: time.Now()}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxLoggedBody))
		if err != nil {
			rec.End, rec.ClientGone = time.Now(), true
			wl.add(rec)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec.IntentID, rec.Foreign = intentID(body)
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			p := recover()
			rec.End = time.Now()
			rec.Reset = p != nil
			rec.Status, rec.Dropped = sw.status, sw.hijacked || rec.Reset
			rec.ClientGone = !rec.Dropped && r.Context().Err() != nil
			wl.add(rec)
			if p != nil {
				panic(p) // http.ErrAbortHandler: net/http resets the stream
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// stripeIntentID reads the intent id a Stripe request carries, and whether
// it is the other deployment's.
func stripeIntentID(body []byte) (int64, bool) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return 0, false
	}
	id, _ := strconv.ParseInt(form.Get("metadata["+providers.MetadataIntentID+"]"), 10, 64)
	return id, form.Get("metadata["+providers.MetadataNamespace+"]") == ForeignNamespace
}

// sendgridIntentID reads the intent id a SendGrid request carries (the
// other deployment sends none).
func sendgridIntentID(body []byte) (int64, bool) {
	var req struct {
		CustomArgs map[string]string `json:"custom_args"`
	}
	if json.Unmarshal(body, &req) != nil {
		return 0, false
	}
	id, _ := strconv.ParseInt(req.CustomArgs["intent_id"], 10, 64)
	return id, false
}

// statusWriter remembers the status written and whether the connection was
// hijacked (the doubles drop connections that way).
type statusWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("chaos: response writer cannot be hijacked")
	}
	s.hijacked = true
	return hj.Hijack()
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ServeDoubles serves the Stripe and SendGrid doubles with the configured
// faults, each wrapped so that it also keeps a wire log (served at
// WirePath), until ctx ends. ready is called once both listen. The suite runs
// it in a process of its own (outboxd chaos --serve-doubles), so the
// doubles' records outlive every dispatcher the suite kills.
func ServeDoubles(ctx context.Context, cfg DoublesConfig, ready func(DoublesAddrs)) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	faults, err := newInjectors(cfg)
	if err != nil {
		return err
	}
	sb, err := sandbox.Start(&sandbox.Config{
		StripeFaults: faults.stripe, StripeLookupFaults: faults.stripeLookups,
		SendGridFaults: faults.sendgrid, SendGridLookupFaults: faults.sendgridLookups,
	})
	if err != nil {
		return err
	}
	defer sb.Close()
	// The doubles' own listeners go unused: the suite reaches them through
	// the wrapped handlers below.
	var servers []*http.Server
	defer func() {
		for _, srv := range servers {
			_ = srv.Close()
		}
	}()
	addrs, err := serveWrapped(cfg, sb, faults, &servers)
	if err != nil {
		return err
	}
	ready(addrs)
	<-ctx.Done()
	return nil
}

func (cfg DoublesConfig) validate() error {
	if cfg.FaultRate < 0 || cfg.FaultRate > 1 {
		return fmt.Errorf("chaos: DoublesConfig.FaultRate must be between 0 and 1, got %g", cfg.FaultRate)
	}
	if cfg.FaultRate > 0 && cfg.DelayFor <= 0 {
		return errors.New("chaos: DoublesConfig.DelayFor must be positive when FaultRate is")
	}
	return nil
}

// injectors are the doubles' fault injectors, for effects and for
// look-ups, and the switch that turns their rates on.
type injectors struct {
	stripe, sendgrid               *fault.Injector
	stripeLookups, sendgridLookups *fault.Injector
	rates, lookupRates             fault.Rates
	on                             atomic.Bool
	once                           sync.Once
}

// newInjectors draws each injector from a seed of its own and turns the
// faults on, unless cfg.HoldFaults: then their rates are only checked, and
// startOnce turns them on.
func newInjectors(cfg DoublesConfig) (*injectors, error) {
	in := &injectors{
		stripe: fault.New(cfg.Seed), sendgrid: fault.New(cfg.Seed + 1),
		stripeLookups: fault.New(cfg.Seed + 2), sendgridLookups: fault.New(cfg.Seed + 3),
		rates: fault.Rates{
			LoseResponse: cfg.FaultRate * ShareLoseResponse,
			ErrorAfter:   cfg.FaultRate * ShareErrorAfter,
			ErrorBefore:  cfg.FaultRate * ShareErrorBefore,
			RateLimit:    cfg.FaultRate * ShareRateLimit,
			Delay:        cfg.FaultRate * ShareDelay,
			DelayFor:     cfg.DelayFor,
			RetryAfter:   time.Second,
		},
		// Look-ups are refused too (DESIGN.md, invariant 12): a 404, as
		// Stripe answers a PaymentIntent of another account or mode and
		// SendGrid an unknown resource, and 429s; neither proves anything.
		lookupRates: fault.Rates{ErrorBefore: cfg.FaultRate * ShareLookupRefused, Status: http.StatusNotFound,
			RateLimit: cfg.FaultRate * ShareLookupRateLimited, RetryAfter: time.Second},
	}
	if cfg.HoldFaults {
		if err := fault.New(0).SetRates(in.rates); err != nil {
			return nil, fmt.Errorf("chaos: fault rates: %w", err)
		}
		return in, nil
	}
	return in, in.start()
}

// start sets the injectors' rates. on reports, from then, that the faults
// are on.
func (in *injectors) start() error {
	for _, f := range []*fault.Injector{in.stripe, in.sendgrid} {
		if err := f.SetRates(in.rates); err != nil {
			return fmt.Errorf("chaos: fault rates: %w", err)
		}
	}
	in.on.Store(true)
	for _, f := range []*fault.Injector{in.stripeLookups, in.sendgridLookups} {
		if err := f.SetRates(in.lookupRates); err != nil {
			return fmt.Errorf("chaos: look-up fault rates: %w", err)
		}
	}
	return nil
}

// startOnce is start the first time it is called, and nothing after.
func (in *injectors) startOnce() error {
	var err error
	in.once.Do(func() { err = in.start() })
	return err
}

// serveWrapped serves the doubles' handlers, wrapped with the wire logs,
// the Stripe double's control endpoints and storms, and the SendGrid
// double's stream resets, on listeners of their own (appended to servers),
// and returns where.
func serveWrapped(cfg DoublesConfig, sb *sandbox.Sandbox, faults *injectors, servers *[]*http.Server) (DoublesAddrs, error) {
	var stripeWire, sendgridWire wireLog
	stripeSrv, stripeURL, err := serve(recordWire(stripeControl(sb, faults), []string{"/v1/payment_intents", "/v1/refunds"}, stripeIntentID, &stripeWire))
	if err != nil {
		return DoublesAddrs{}, err
	}
	*servers = append(*servers, stripeSrv)
	rs := &resetter{rnd: rand.New(rand.NewPCG(cfg.Seed+2, 7))}
	if cfg.SendGridTLS {
		rs.rate = cfg.FaultRate * ShareStreamReset
	}
	sendgridHandler := recordWire(rs.wrap(sb.SendGrid().Handler(), "/v3/mail/send", &faults.on), []string{"/v3/mail/send"}, sendgridIntentID, &sendgridWire)
	sendgridSrv, sendgridURL, err := serve(sendgridHandler)
	if err != nil {
		return DoublesAddrs{}, err
	}
	*servers = append(*servers, sendgridSrv)
	addrs := DoublesAddrs{StripeURL: stripeURL, SendGridURL: sendgridURL, SendGridControlURL: sendgridURL}
	if cfg.SendGridTLS {
		tlsSrv, tlsURL, certPEM, err := serveTLS(sendgridHandler)
		if err != nil {
			return DoublesAddrs{}, err
		}
		*servers = append(*servers, tlsSrv)
		addrs.SendGridURL, addrs.SendGridCertPEM = tlsURL, certPEM
	}
	return addrs, nil
}

// stripeControl is the Stripe double's handler, with storms, and the
// control endpoints of the doubles' process: StartPath, PaymentIntentsPath
// and RefundsPath.
func stripeControl(sb *sandbox.Sandbox, faults *injectors) http.Handler {
	stripe := sb.Stripe()
	st := &storm{faults: faults.stripe}
	control := http.NewServeMux()
	control.Handle("/", st.wrap(stripe.Handler(), "/v1/payment_intents"))
	control.HandleFunc("POST "+StartPath, func(w http.ResponseWriter, r *http.Request) {
		if err := faults.startOnce(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	control.HandleFunc("GET "+PaymentIntentsPath, func(w http.ResponseWriter, r *http.Request) {
		pis := stripe.PaymentIntents()
		out := make([]StripeObject, len(pis))
		for i, pi := range pis {
			out[i] = StripeObject{ID: pi.ID, Amount: pi.Amount, AmountReceived: pi.AmountReceived, Status: pi.Status, Metadata: pi.Metadata}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	control.HandleFunc("GET "+RefundsPath, func(w http.ResponseWriter, r *http.Request) {
		rfs := stripe.Refunds()
		out := make([]StripeRefund, len(rfs))
		for i, rf := range rfs {
			out[i] = StripeRefund{ID: rf.ID, PaymentIntent: rf.PaymentIntent, Amount: rf.Amount, Metadata: rf.Metadata}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	return control
}

func serve(h http.Handler) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("chaos: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Dropped connections are deliberate.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

// resetter resets the stream of a share of the emails after the double
// accepted them: the handler runs against a buffer, then panics with
// http.ErrAbortHandler, which net/http's HTTP/2 server turns into
// RST_STREAM (over HTTP/1, a closed connection: a client that speaks only
// HTTP/1 to SendGrid meets the same fault as a lost response). Only once
// the faults are on.
type resetter struct {
	rate  float64
	mu    sync.Mutex
	rnd   *rand.Rand
	stats ResetStats
}

func (rs *resetter) wrap(next http.Handler, effectPath string, faultsOn *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ResetsPath && r.Method == http.MethodGet {
			rs.mu.Lock()
			st := rs.stats
			rs.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st)
			return
		}
		if r.URL.Path != effectPath || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		rs.mu.Lock()
		if r.ProtoMajor == 2 {
			rs.stats.HTTP2++
		}
		reset := rs.rate > 0 && rs.rnd.Float64() < rs.rate && faultsOn.Load()
		if reset {
			rs.stats.Resets++
		}
		rs.mu.Unlock()
		if !reset {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(&discardWriter{h: http.Header{}}, r)
		panic(http.ErrAbortHandler)
	})
}

// discardWriter is a ResponseWriter whose answer goes nowhere.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

// serveTLS serves h over TLS (HTTP/2 and HTTP/1.1) on loopback with a fresh
// self-signed certificate, and returns the server, its URL and the
// certificate in PEM.
func serveTLS(h http.Handler) (*http.Server, string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), cryptorand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "chaos sendgrid double"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(cryptorand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, "", "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", "", fmt.Errorf("chaos: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
			NextProtos:   []string{"h2", "http/1.1"},
		},
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return srv, "https://" + ln.Addr().String(), string(certPEM), nil
}
