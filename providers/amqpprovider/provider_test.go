package amqpprovider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/amqpprovider"
)

func newProvider(t *testing.T, cfg amqpprovider.Config) *amqpprovider.Provider {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testkit.RabbitURL()
	}
	p, err := amqpprovider.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func request(id int64, payload string) providers.Request {
	return providers.Request{IntentID: id, IdempotencyKey: fmt.Sprintf("billing:order-%d", id), Kind: amqpprovider.KindPublish, Payload: json.RawMessage(payload), Attempt: 1}
}

func toQueue(queue string) string {
	return fmt.Sprintf(`{"routing_key":%q,"body":{"order":"42","amount":500}}`, queue)
}

func perform(t *testing.T, p *amqpprovider.Provider, req providers.Request) (providers.Result, *providers.AttemptError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := p.Perform(ctx, req)
	if err == nil {
		return res, nil
	}
	var attemptErr *providers.AttemptError
	if !errors.As(err, &attemptErr) {
		t.Fatalf("Perform returned %T %v, want an *AttemptError", err, err)
	}
	return res, attemptErr
}

func wantOutcome(t *testing.T, attemptErr *providers.AttemptError, outcome providers.Outcome, code string) {
	t.Helper()
	if attemptErr == nil {
		t.Fatalf("Perform succeeded, want %s", outcome)
	}
	if attemptErr.Outcome != outcome || (code != "" && attemptErr.Code != code) {
		t.Fatalf("Perform = %s (code %q): %v; want %s (code %q)", attemptErr.Outcome, attemptErr.Code, attemptErr, outcome, code)
	}
}

func TestPublishIsConfirmedAndCarriesTheKey(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	ex := b.DeclareExchange(testkit.UniqueName(t, "ex"), amqp.ExchangeTopic)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	b.Bind(q, "orders.*", ex)
	p := newProvider(t, amqpprovider.Config{})

	payload := fmt.Sprintf(`{"exchange":%q,"routing_key":"orders.created","body":{"order":"42"},"headers":{"tenant":"acme"}}`, ex)
	res, attemptErr := perform(t, p, request(7, payload))
	if attemptErr != nil {
		t.Fatalf("Perform: %v", attemptErr)
	}
	if res.ProviderRef != "billing:order-7" {
		t.Fatalf("ProviderRef = %q, want the message id", res.ProviderRef)
	}
	d := b.Get(q, 10*time.Second)
	if d.MessageId != "billing:order-7" {
		t.Errorf("message-id = %q, want the idempotency key", d.MessageId)
	}
	if d.Headers[amqpprovider.HeaderIntentID] != int64(7) || d.Headers["tenant"] != "acme" {
		t.Errorf("headers = %v", d.Headers)
	}
	if d.ContentType != "application/json" || d.DeliveryMode != amqp.Persistent || d.RoutingKey != "orders.created" {
		t.Errorf("content-type %q, delivery mode %d, routing key %q", d.ContentType, d.DeliveryMode, d.RoutingKey)
	}
	if string(d.Body) != `{"order":"42"}` {
		t.Errorf("body = %s", d.Body)
	}
}

func TestTextBodyAndTransientDelivery(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	p := newProvider(t, amqpprovider.Config{})
	payload := fmt.Sprintf(`{"routing_key":%q,"body":"plain text","content_type":"text/plain; charset=utf-8","persistent":false}`, q)
	if _, attemptErr := perform(t, p, request(8, payload)); attemptErr != nil {
		t.Fatalf("Perform: %v", attemptErr)
	}
	d := b.Get(q, 10*time.Second)
	if string(d.Body) != "plain text" || d.ContentType != "text/plain; charset=utf-8" || d.DeliveryMode != amqp.Transient {
		t.Fatalf("body %q, content-type %q, delivery mode %d", d.Body, d.ContentType, d.DeliveryMode)
	}
}

func TestUnroutableFails(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	ex := b.DeclareExchange(testkit.UniqueName(t, "ex"), amqp.ExchangeDirect)
	p := newProvider(t, amqpprovider.Config{})

	_, attemptErr := perform(t, p, request(1, fmt.Sprintf(`{"exchange":%q,"routing_key":"nobody","body":{}}`, ex)))
	wantOutcome(t, attemptErr, providers.OutcomeFailed, "unroutable")
	// The default exchange with no such queue is unroutable too.
	_, attemptErr = perform(t, p, request(2, toQueue(testkit.UniqueName(t, "missing"))))
	wantOutcome(t, attemptErr, providers.OutcomeFailed, "unroutable")

	// The channel stays clean: the next publish is confirmed as itself.
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	if _, attemptErr := perform(t, p, request(3, toQueue(q))); attemptErr != nil {
		t.Fatalf("Perform after unroutable: %v", attemptErr)
	}
	if d := b.Get(q, 10*time.Second); d.MessageId != "billing:order-3" {
		t.Fatalf("got message %q", d.MessageId)
	}
}

func TestMissingExchangeFails(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	p := newProvider(t, amqpprovider.Config{})
	_, attemptErr := perform(t, p, request(1, `{"exchange":"`+testkit.UniqueName(t, "nope")+`","routing_key":"k","body":{}}`))
	wantOutcome(t, attemptErr, providers.OutcomeFailed, "not_found")

	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	if _, attemptErr := perform(t, p, request(2, toQueue(q))); attemptErr != nil {
		t.Fatalf("Perform after a channel error: %v", attemptErr)
	}
}

func TestBrokerDownIsRetriedAndThePasswordHidden(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-pa55"
	logs := &syncWriter{}
	p := newProvider(t, amqpprovider.Config{
		URL:    "amqp://app:" + password + "@127.0.0.1:1/",
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	_, attemptErr := perform(t, p, request(1, toQueue("q")))
	wantOutcome(t, attemptErr, providers.OutcomeRetry, "")
	if !strings.Contains(attemptErr.Error(), "not published") {
		t.Errorf("error %q does not say the message was not published", attemptErr)
	}
	for _, s := range []string{attemptErr.Error(), attemptErr.Message, fmt.Sprint(p), fmt.Sprintf("%#v", p), logs.String()} {
		if strings.Contains(s, password) {
			t.Errorf("password leaked in %q", s)
		}
	}
	if !strings.Contains(fmt.Sprint(p), "127.0.0.1:1") {
		t.Errorf("String() = %s, want the host kept", p)
	}
}

func TestConnectionLostBeforeConfirmIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	p := newProvider(t, amqpprovider.Config{AMQPConfig: faultyDial(t, true)})

	_, attemptErr := perform(t, p, request(1, toQueue(q)))
	wantOutcome(t, attemptErr, providers.OutcomeAmbiguous, "")
}

func TestReconnectsAfterTheConnectionIsLost(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	var mu sync.Mutex
	var conns []net.Conn
	cfg := &amqp.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(5*time.Second)(network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c, nil
	}}
	p := newProvider(t, amqpprovider.Config{AMQPConfig: cfg})
	if _, attemptErr := perform(t, p, request(1, toQueue(q))); attemptErr != nil {
		t.Fatalf("first Perform: %v", attemptErr)
	}
	mu.Lock()
	_ = conns[0].Close() // the broker goes away between attempts
	mu.Unlock()

	// The cut is noticed by the reader; an attempt racing it may be
	// refused (retry) or lost (ambiguous), never wrongly succeed or fail.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, attemptErr := perform(t, p, request(2, toQueue(q)))
		if attemptErr == nil {
			break
		}
		if attemptErr.Outcome == providers.OutcomeFailed {
			t.Fatalf("Perform after reconnect failed: %v", attemptErr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("never reconnected: %v", attemptErr)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 2 {
		t.Fatalf("dialled %d connections, want 2", len(conns))
	}
}

func TestConfirmTimeoutIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	p := newProvider(t, amqpprovider.Config{AMQPConfig: faultyDial(t, false), ConfirmTimeout: 300 * time.Millisecond})
	_, attemptErr := perform(t, p, request(1, toQueue(q)))
	wantOutcome(t, attemptErr, providers.OutcomeAmbiguous, "confirm_timeout")
}

func TestContextEndedBeforePublishIsRetried(t *testing.T) {
	t.Parallel()
	p := newProvider(t, amqpprovider.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.Perform(ctx, request(1, toQueue("q")))
	wantOutcome(t, providers.Classify(err), providers.OutcomeRetry, "")
}

func TestClosedProviderRetries(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	p := newProvider(t, amqpprovider.Config{})
	if _, attemptErr := perform(t, p, request(1, toQueue(q))); attemptErr != nil {
		t.Fatalf("Perform: %v", attemptErr)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err := p.Perform(context.Background(), request(2, toQueue(q)))
	if !errors.Is(err, amqpprovider.ErrClosed) || providers.Classify(err).Outcome != providers.OutcomeRetry {
		t.Fatalf("Perform after Close = %v, want retry wrapping ErrClosed", err)
	}
}

func TestConcurrentPublishes(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	q := b.DeclareQueue(testkit.UniqueName(t, "q"))
	p := newProvider(t, amqpprovider.Config{})
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := p.Perform(context.Background(), request(int64(i), toQueue(q))); err != nil {
				errs <- err
			}
		})
	}
	testkit.WaitWithin(t, &wg, time.Minute)
	close(errs)
	for err := range errs {
		t.Errorf("Perform: %v", err)
	}
	if got := b.Ready(q); got != n {
		t.Fatalf("queue holds %d messages, want %d", got, n)
	}
}

// The suite (conformance_test.go) checks that Validate names the field;
// here, that it takes every body shape Publish documents, and that Perform
// refuses what Validate refuses.
func TestValidateAcceptsEveryBodyShape(t *testing.T) {
	t.Parallel()
	p := newProvider(t, amqpprovider.Config{})
	for _, ok := range []string{
		`{"routing_key":"k","body":{"a":[1,2]}}`,
		`{"routing_key":"k","body":"text","content_type":"text/plain"}`,
		`{"routing_key":"k","body":[1],"content_type":"application/vnd.acme+json"}`,
		`{"exchange":"ex","routing_key":"k","body":1,"headers":{"a":"b"},"persistent":false}`,
	} {
		if err := p.Validate(amqpprovider.KindPublish, json.RawMessage(ok)); err != nil {
			t.Errorf("Validate(%s) = %v", ok, err)
		}
	}
	// Perform refuses what Validate refuses, without publishing.
	_, attemptErr := perform(t, p, request(1, `{"body":{}}`))
	wantOutcome(t, attemptErr, providers.OutcomeFailed, "")
}

func TestRedactHidesSensitiveValues(t *testing.T) {
	t.Parallel()
	p := newProvider(t, amqpprovider.Config{})
	payload := `{"exchange":"ex","routing_key":"users.created","body":{"user":{"id":"u1","email":"jane@example.com","profile":[{"phone":"+15550100"}]},"plan":"pro"},
		"headers":{"authorization":"Bearer abc123","x-session-token":"tok_42","trace-id":"t-1"}}`
	redacted := string(p.Redact(amqpprovider.KindPublish, json.RawMessage(payload)))
	for _, secret := range []string{"Bearer abc123", "tok_42", "jane@example.com", "+15550100"} {
		if strings.Contains(redacted, secret) {
			t.Errorf("Redact left %q in %s", secret, redacted)
		}
	}
	for _, kept := range []string{"t-1", "u1", "pro", "users.created"} {
		if !strings.Contains(redacted, kept) {
			t.Errorf("Redact removed %q: %s", kept, redacted)
		}
	}
	text := string(p.Redact(amqpprovider.KindPublish, json.RawMessage(`{"routing_key":"k","body":"call 555-0100","content_type":"text/plain"}`)))
	if strings.Contains(text, "555-0100") || !json.Valid([]byte(text)) {
		t.Errorf("Redact(text body) = %s", text)
	}
	if garbage := p.Redact(amqpprovider.KindPublish, json.RawMessage(`{not json`)); !json.Valid(garbage) {
		t.Errorf("Redact(garbage) = %s", garbage)
	}
}

func TestDeclarationAndConfig(t *testing.T) {
	t.Parallel()
	p := newProvider(t, amqpprovider.Config{})
	if _, err := providers.NewRegistry(p); err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	caps := p.Capabilities()
	if caps.IdempotencyKeys || caps.CanReconcile || caps.MaxKeyLength != amqpprovider.MaxKeyLength {
		t.Fatalf("Capabilities = %+v", caps)
	}
	if _, _, err := p.Reconcile(context.Background(), request(1, `{}`)); !errors.Is(err, providers.ErrReconcileUnsupported) {
		t.Fatalf("Reconcile = %v", err)
	}

	const password = "hunter2-secret"
	for _, cfg := range []amqpprovider.Config{
		{URL: "http://u:" + password + "@host/"},
		{URL: "amqp://u:" + password + "@ho st/"},
		{URL: "amqp://localhost/", ConfirmTimeout: -1},
		{URL: "amqp://localhost/", DialTimeout: -1},
		{URL: "amqp://localhost/", AMQPConfig: &amqp.Config{Recovery: &amqp.Recovery{}}},
	} {
		_, err := amqpprovider.New(cfg)
		if err == nil || !strings.Contains(err.Error(), "Config.") {
			t.Errorf("New(%v) = %v, want an error naming the field", cfg, err)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("New's error leaks the password: %v", err)
		}
	}
	cfg := amqpprovider.Config{URL: "amqp://u:" + password + "@host/"}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%#v", cfg), amqpprovider.RedactURL(cfg.URL)} {
		if strings.Contains(s, password) {
			t.Errorf("%q leaks the password", s)
		}
	}

	empty, err := amqpprovider.New(amqpprovider.Config{})
	if err != nil {
		t.Fatalf("New without URL: %v", err)
	}
	_, err = empty.Perform(context.Background(), request(1, toQueue("q")))
	wantOutcome(t, providers.Classify(err), providers.OutcomeFailed, "")
}

// syncWriter serialises writes from concurrent loggers.
type syncWriter struct {
	mu sync.Mutex
	w  bytes.Buffer
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A basic.nack says one queue refused the message, not that none took it:
// routed to two queues, one full with reject-publish, the other holds it.
// The publish is ambiguous, never retried (DESIGN.md, invariant 13).
func TestNackAfterAPartialDeliveryIsAmbiguous(t *testing.T) {
	t.Parallel()
	b := testkit.Rabbit(t)
	ex := b.DeclareExchange(testkit.UniqueName(t, "fanout"), amqp.ExchangeFanout)
	took := b.DeclareQueue(testkit.UniqueName(t, "took"))
	full := b.DeclareQueueWith(testkit.UniqueName(t, "full"), amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	b.Bind(took, "", ex)
	b.Bind(full, "", ex)
	p := newProvider(t, amqpprovider.Config{})

	_, attemptErr := perform(t, p, request(1, fmt.Sprintf(`{"exchange":%q,"routing_key":"any","body":{}}`, ex)))
	wantOutcome(t, attemptErr, providers.OutcomeAmbiguous, "nack")
	if !attemptErr.MayHaveActed() {
		t.Fatal("a nack after a partial delivery is DidNotAct")
	}
	if d := b.Get(took, 10*time.Second); d.MessageId != "billing:order-1" {
		t.Fatalf("the other queue got %q, want the message", d.MessageId)
	}
}
