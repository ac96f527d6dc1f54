package jetstreamprovider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/jetstreamprovider"
)

func newProvider(t *testing.T, cfg jetstreamprovider.Config) *jetstreamprovider.Provider {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testkit.NATSURL()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := jetstreamprovider.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func publishRequest(id int64, key, subject string) providers.Request {
	payload := fmt.Sprintf(`{"subject": %q, "data": {"order": "o-%d", "total": 500}, "headers": {"Content-Type": "application/json"}}`, subject, id)
	return providers.Request{IntentID: id, IdempotencyKey: key, Kind: jetstreamprovider.KindPublish, Payload: json.RawMessage(payload), Attempt: 1}
}

func perform(t *testing.T, p *jetstreamprovider.Provider, req providers.Request) (providers.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Perform(ctx, req)
}

func streamMsgs(t *testing.T, stream jetstream.Stream) uint64 {
	t.Helper()
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestPerformPublishesWithTheKeyAsMsgID(t *testing.T) {
	t.Parallel()
	_, js := testkit.NATS(t)
	stream, prefix := testkit.Stream(t, js, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	name := stream.CachedInfo().Config.Name
	p := newProvider(t, jetstreamprovider.Config{Stream: name})

	if caps := p.Capabilities(); !caps.IdempotencyKeys || caps.KeyWindow != 10*time.Minute || caps.CanReconcile {
		t.Fatalf("Capabilities() = %+v, want keys with the stream's 10m duplicate window, no reconcile", caps)
	}
	if _, err := providers.NewRegistry(p); err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	res, err := perform(t, p, publishRequest(7, "billing:order-7", prefix+".orders"))
	if err != nil {
		t.Fatalf("Perform: %v", err)
	}
	if res.Replayed || res.ProviderRef != name+":1" {
		t.Fatalf("Result = %+v, want ProviderRef %s:1, not replayed", res, name)
	}
	msg, err := stream.GetMsg(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(jetstream.MsgIDHeader); got != "billing:order-7" {
		t.Errorf("Nats-Msg-Id = %q, want the intent's key", got)
	}
	if got := msg.Header.Get(jetstreamprovider.IntentIDHeader); got != "7" {
		t.Errorf("%s = %q, want 7", jetstreamprovider.IntentIDHeader, got)
	}
	if got := msg.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type header = %q, want the payload's header", got)
	}
	if got := string(msg.Data); got != `{"order":"o-7","total":500}` {
		t.Errorf("data = %s, want the payload's data as compact JSON", got)
	}
	if msg.Subject != prefix+".orders" {
		t.Errorf("subject = %q", msg.Subject)
	}
}

func TestPerformSameKeyWithinTheWindowIsReplayed(t *testing.T) {
	t.Parallel()
	_, js := testkit.NATS(t)
	stream, prefix := testkit.Stream(t, js, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	p := newProvider(t, jetstreamprovider.Config{Stream: stream.CachedInfo().Config.Name})

	req := publishRequest(1, "notes:n-1", prefix+".notes")
	first, err := perform(t, p, req)
	if err != nil {
		t.Fatalf("first Perform: %v", err)
	}
	req.Attempt = 2
	second, err := perform(t, p, req)
	if err != nil {
		t.Fatalf("second Perform: %v", err)
	}
	if !second.Replayed || second.ProviderRef != first.ProviderRef {
		t.Fatalf("second Result = %+v, want Replayed with the first's ProviderRef %q", second, first.ProviderRef)
	}
	if n := streamMsgs(t, stream); n != 1 {
		t.Fatalf("stream holds %d messages after two publishes with one key, want 1", n)
	}
	if _, err := perform(t, p, publishRequest(2, "notes:n-2", prefix+".notes")); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, stream); n != 2 {
		t.Fatalf("stream holds %d messages, want 2: another key is another message", n)
	}
}

func TestStreamWithoutDuplicateWindowDeclaresNoKeys(t *testing.T) {
	t.Parallel()
	_, js := testkit.NATS(t)
	// JetStream gives every stream one can publish to a duplicate window
	// (2 minutes when none is set); a mirror has none.
	origin, _ := testkit.Stream(t, js, jetstream.StreamConfig{})
	mirror, _ := testkit.Stream(t, js, jetstream.StreamConfig{Mirror: &jetstream.StreamSource{Name: origin.CachedInfo().Config.Name}})
	if d := mirror.CachedInfo().Config.Duplicates; d != 0 {
		t.Skipf("this server gives mirrors a duplicate window (%s)", d)
	}
	logger, logs := testkit.Logger()
	p := newProvider(t, jetstreamprovider.Config{Stream: mirror.CachedInfo().Config.Name, Logger: logger})
	if caps := p.Capabilities(); caps.IdempotencyKeys || caps.KeyWindow != 0 {
		t.Fatalf("Capabilities() = %+v, want no idempotency keys", caps)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no duplicate window") {
		t.Fatalf("no warning about the missing duplicate window in the logs:\n%s", out)
	}
}

func TestNeitherStreamNorKeyWindowDeclaresNoKeys(t *testing.T) {
	t.Parallel()
	logger, logs := testkit.Logger()
	p := newProvider(t, jetstreamprovider.Config{Logger: logger})
	if caps := p.Capabilities(); caps.IdempotencyKeys {
		t.Fatalf("Capabilities() = %+v, want no idempotency keys", caps)
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("no warning in the logs:\n%s", logs.String())
	}
}

func TestKeyWindowOverridesTheStream(t *testing.T) {
	t.Parallel()
	_, js := testkit.NATS(t)
	stream, _ := testkit.Stream(t, js, jetstream.StreamConfig{Duplicates: time.Hour})
	p := newProvider(t, jetstreamprovider.Config{Stream: stream.CachedInfo().Config.Name, KeyWindow: 30 * time.Second})
	if caps := p.Capabilities(); !caps.IdempotencyKeys || caps.KeyWindow != 30*time.Second {
		t.Fatalf("Capabilities() = %+v, want keys with the 30s override", caps)
	}
}

// The suite (conformance_test.go) checks that Validate names the field;
// here, that data need not be an object.
func TestValidateAcceptsAStringAsData(t *testing.T) {
	t.Parallel()
	p := newProvider(t, jetstreamprovider.Config{KeyWindow: time.Minute})
	if err := p.Validate(jetstreamprovider.KindPublish, json.RawMessage(`{"subject": "a.b", "data": "text", "headers": {"X-Trace": "t"}}`)); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

func TestServerDownIsRetried(t *testing.T) {
	t.Parallel()
	// A server that is not there at all: New does not need it when the key
	// window is configured, and Perform never sends anything.
	p := newProvider(t, jetstreamprovider.Config{URL: "nats://outbox:hunter2-secret@127.0.0.1:1", KeyWindow: time.Minute, Timeout: time.Second})
	_, err := perform(t, p, publishRequest(1, "k-1", "a.b"))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry {
		t.Fatalf("Perform with the server down = %v, want OutcomeRetry", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error leaks the password: %v", err)
	}

	// A server that goes away while the provider is connected.
	_, js := testkit.NATS(t)
	stream, prefix := testkit.Stream(t, js, jetstream.StreamConfig{Duplicates: 10 * time.Minute})
	u, err := url.Parse(testkit.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, u.Host)
	p2 := newProvider(t, jetstreamprovider.Config{URL: "nats://" + px.Addr(), Stream: stream.CachedInfo().Config.Name, Timeout: 500 * time.Millisecond})
	if _, err := perform(t, p2, publishRequest(2, "k-2", prefix+".x")); err != nil {
		t.Fatalf("Perform through the proxy: %v", err)
	}
	px.Close()
	testkit.Eventually(t, 10*time.Second, "Perform to report that it is not connected", func() bool {
		_, err := perform(t, p2, publishRequest(3, "k-3", prefix+".x"))
		got := providers.Classify(err)
		if got == nil || got.Outcome != providers.OutcomeRetry {
			t.Fatalf("Perform with the server gone = %v, want OutcomeRetry", err)
		}
		return got.Code == "not_connected"
	})
}

func TestNewNeedsTheServerToReadTheStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := jetstreamprovider.New(ctx, jetstreamprovider.Config{URL: "nats://user:hunter2-secret@127.0.0.1:1", Stream: "ORDERS", Timeout: time.Second})
	if !errors.Is(err, jetstreamprovider.ErrStreamLookup) {
		t.Fatalf("New with the server down = %v, want ErrStreamLookup", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error leaks the password: %v", err)
	}
	_, err = jetstreamprovider.New(ctx, jetstreamprovider.Config{URL: testkit.NATSURL(), Stream: "NO_SUCH_STREAM_OUTBOX_TEST"})
	if !errors.Is(err, jetstreamprovider.ErrStreamLookup) || !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("New with a missing stream = %v, want ErrStreamLookup wrapping ErrStreamNotFound", err)
	}
}

func TestNoStreamForTheSubject(t *testing.T) {
	t.Parallel()
	_, js := testkit.NATS(t)
	stream, _ := testkit.Stream(t, js, jetstream.StreamConfig{})
	other, otherPrefix := testkit.Stream(t, js, jetstream.StreamConfig{})

	// No stream captures the subject: nothing was stored, retry.
	p := newProvider(t, jetstreamprovider.Config{KeyWindow: time.Minute})
	_, err := perform(t, p, publishRequest(1, "k-1", "outboxtest.nobody.listens"))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry || !strings.Contains(got.Message, "outboxtest.nobody.listens") {
		t.Fatalf("Perform to a subject no stream captures = %v, want OutcomeRetry naming the subject", err)
	}

	// The subject belongs to another stream than Config.Stream: the declared
	// window would not apply. Failed, with the server's message.
	p2 := newProvider(t, jetstreamprovider.Config{Stream: stream.CachedInfo().Config.Name})
	_, err = perform(t, p2, publishRequest(2, "k-2", otherPrefix+".x"))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeFailed || !strings.Contains(got.Message, "expected stream does not match") {
		t.Fatalf("Perform to another stream's subject = %v, want OutcomeFailed with the server's message", err)
	}
	if n := streamMsgs(t, other); n != 0 {
		t.Fatalf("the other stream stored %d messages, want 0", n)
	}
}

func TestNoPubAckIsRetriedWhenKeyedAndAmbiguousWhenNot(t *testing.T) {
	t.Parallel()
	nc, _ := testkit.NATS(t)
	// A plain subscriber that never answers: the request is delivered and
	// no PubAck comes back, as when a stream stores a message and its
	// answer is lost.
	subject := fmt.Sprintf("outboxtest.silent.%d", time.Now().UnixNano())
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	keyed := newProvider(t, jetstreamprovider.Config{KeyWindow: time.Minute, Timeout: 200 * time.Millisecond})
	_, err = perform(t, keyed, publishRequest(1, "k-1", subject))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry {
		t.Fatalf("keyed Perform without a PubAck = %v, want OutcomeRetry", err)
	}
	unkeyed := newProvider(t, jetstreamprovider.Config{Timeout: 200 * time.Millisecond})
	_, err = perform(t, unkeyed, publishRequest(2, "k-2", subject))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeAmbiguous {
		t.Fatalf("unkeyed Perform without a PubAck = %v, want OutcomeAmbiguous", err)
	}
}

func TestRedactAndStringHideSecrets(t *testing.T) {
	t.Parallel()
	cfg := jetstreamprovider.Config{URL: "nats://outbox:hunter2-secret@127.0.0.1:1", KeyWindow: time.Minute}
	p := newProvider(t, cfg)
	for _, s := range []string{cfg.String(), fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg), p.String(), fmt.Sprintf("%v %#v", p, p)} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("printed form leaks the password: %s", s)
		}
	}
	payload := json.RawMessage(`{"subject": "a.b", "data": {"email": "jane@example.com"}, "headers": {"Authorization": "Bearer tok-123", "X-Trace": "t-1"}}`)
	red := string(p.Redact(jetstreamprovider.KindPublish, payload))
	for _, secret := range []string{"jane@example.com", "tok-123"} {
		if strings.Contains(red, secret) {
			t.Errorf("Redact left %q in %s", secret, red)
		}
	}
	if !strings.Contains(red, "a.b") || !strings.Contains(red, "t-1") {
		t.Errorf("Redact hid the subject or a harmless header: %s", red)
	}
	if got := p.Redact(jetstreamprovider.KindPublish, json.RawMessage(`{not json`)); !json.Valid(got) {
		t.Errorf("Redact(unparseable) = %s, want valid JSON", got)
	}
}

func TestNewRejectsBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	cases := map[string]jetstreamprovider.Config{
		"Config.URL":       {},
		"Config.URL ":      {URL: "::not a url"},
		"Config.Stream":    {URL: testkit.NATSURL(), Stream: "has.dot"},
		"Config.KeyWindow": {URL: testkit.NATSURL(), KeyWindow: -time.Second},
		"Config.Timeout":   {URL: testkit.NATSURL(), Timeout: -time.Second},
	}
	for field, cfg := range cases {
		_, err := jetstreamprovider.New(context.Background(), cfg)
		if !errors.Is(err, jetstreamprovider.ErrInvalidConfig) || !strings.Contains(err.Error(), strings.TrimSpace(field)) {
			t.Errorf("New(%v) = %v, want ErrInvalidConfig naming %s", cfg, err, field)
		}
	}
}

// A request already written when the connection closes may have been
// stored: nats.go answers it ErrConnectionClosed, as it answers one never
// sent, so the answer proves nothing (DESIGN.md, invariant 13). Without a
// duplicate window it is ambiguous, never retried.
func TestConnectionClosedAfterTheRequestWasWrittenIsAmbiguous(t *testing.T) {
	t.Parallel()
	nc, _ := testkit.NATS(t)
	subject := fmt.Sprintf("outboxtest.closing.%d", time.Now().UnixNano())
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, jetstreamprovider.Config{Timeout: 10 * time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := perform(t, p, publishRequest(1, "k-1", subject))
		done <- err
	}()
	// The request reached the server (a subscriber got it); then the
	// provider's connection closes before any answer.
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the request never arrived: %v", err)
	}
	p.Close()
	err = <-done
	got := providers.Classify(err)
	if got == nil || got.Outcome != providers.OutcomeAmbiguous || !got.MayHaveActed() {
		t.Fatalf("Perform whose connection closed after the request was written = %v, want OutcomeAmbiguous", err)
	}
	// Once closed, a publish is refused before anything is written.
	_, err = perform(t, p, publishRequest(2, "k-2", subject))
	if got := providers.Classify(err); got == nil || got.Outcome != providers.OutcomeRetry || !got.DidNotAct {
		t.Fatalf("Perform on a closed connection = %v, want OutcomeRetry, DidNotAct", err)
	}
}
