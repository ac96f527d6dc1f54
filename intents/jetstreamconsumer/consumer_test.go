package jetstreamconsumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/jetstreamconsumer"
	"github.com/outboxkit/outbox/internal/testkit"
)

func TestDuplicatesPastTheWindowHaveOneEffect(t *testing.T) {
	t.Parallel()
	// A 100ms duplicate window: JetStream stores each copy published after
	// it, so all of them reach the consumer.
	b := setup(t, 100*time.Millisecond)
	for range 3 {
		b.publishStoredCopy(t, "order-1")
	}
	b.publish(t, "order-2")

	c, err := jetstreamconsumer.New(b.client, b.config(b.recordingHandler()))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	testkit.Eventually(t, 30*time.Second, "all 4 stored messages to be delivered and acknowledged", b.consumerSettled(t, 4))
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}

	if n := b.effects(t, "order-1"); n != 1 {
		t.Errorf("order-1 delivered 3 times had %d effects, want 1", n)
	}
	if n := b.effects(t, "order-2"); n != 1 {
		t.Errorf("order-2 had %d effects, want 1", n)
	}
	if n := b.intentCount(t); n != 2 {
		t.Errorf("%d intents recorded, want 2", n)
	}
	if n := b.calls.Load(); n != 2 {
		t.Errorf("handler committed %d times, want 2", n)
	}
	if n := b.logs.Count("duplicate delivery acknowledged"); n != 2 {
		t.Errorf("%d duplicates acknowledged, want 2", n)
	}
}

// lostAck is a delivered message whose connection drops after the commit
// and before the ack reaches the server.
type lostAck struct {
	jetstream.Msg
	nc *nats.Conn
}

func (m *lostAck) DoubleAck(ctx context.Context) error {
	m.nc.Close()
	return m.Msg.DoubleAck(ctx)
}

func TestAckLostAfterCommitIsRedeliveredAndAckedAsDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.publish(t, "order-1")
	cfg := b.config(b.recordingHandler())
	cfg.AckWait = 2 * time.Second
	c, err := jetstreamconsumer.New(b.client, cfg)
	if err != nil {
		t.Fatal(err)
	}

	// First delivery, on a connection of its own that is lost after the
	// transaction commits.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.js.CreateOrUpdateConsumer(ctx, b.stream, c.ConsumerConfigForTest()); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(testkit.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, b.stream, b.durable)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	c.HandleForTest(ctx, &lostAck{Msg: msg, nc: nc})
	if n := b.effects(t, "order-1"); n != 1 {
		t.Fatalf("%d effects after the first delivery, want 1 (committed)", n)
	}
	if !strings.Contains(b.logs.String(), "ack failed after the commit") {
		t.Fatalf("the lost ack was not logged:\n%s", b.logs.String())
	}

	// JetStream redelivers after AckWait; Run finds the marker and acks.
	stop := run(t, c)
	testkit.Eventually(t, 30*time.Second, "the redelivery to be acknowledged", b.consumerSettled(t, 1))
	_ = stop()
	serverCons, err := b.js.Consumer(ctx, b.stream, b.durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := serverCons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer < 2 {
		t.Fatalf("the message was delivered %d times, want a redelivery", info.Delivered.Consumer)
	}
	if n := b.effects(t, "order-1"); n != 1 {
		t.Errorf("%d effects after the redelivery, want 1", n)
	}
	if n := b.calls.Load(); n != 1 {
		t.Errorf("handler committed %d times, want 1", n)
	}
	if n := b.intentCount(t); n != 1 {
		t.Errorf("%d intents, want 1", n)
	}
	if !strings.Contains(b.logs.String(), "duplicate delivery acknowledged") {
		t.Errorf("the redelivery was not acknowledged as a duplicate:\n%s", b.logs.String())
	}
}

func TestHandlerErrorIsRedeliveredUpToMaxDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	var failing, flaky atomic.Int64
	record := b.recordingHandler()
	handler := func(ctx context.Context, msg jetstream.Msg, tx pgx.Tx, rec *intents.Recorder) error {
		switch msg.Headers().Get(jetstream.MsgIDHeader) {
		case "always-fails":
			failing.Add(1)
			if _, err := tx.Exec(ctx, `INSERT INTO effects (message_id, subject) VALUES ('always-fails', 'x')`); err != nil {
				return err
			}
			return errors.New("downstream table is locked")
		case "fails-once":
			if flaky.Add(1) == 1 {
				return errors.New("transient")
			}
		}
		return record(ctx, msg, tx, rec)
	}
	cfg := b.config(handler)
	cfg.MaxDeliver = 3
	c, err := jetstreamconsumer.New(b.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.publish(t, "always-fails")
	b.publish(t, "fails-once")
	stop := run(t, c)
	testkit.Eventually(t, 30*time.Second, "both messages to be settled", b.consumerSettled(t, 2))
	_ = stop()

	if n := failing.Load(); n != 3 {
		t.Errorf("the failing handler ran %d times, want MaxDeliver = 3", n)
	}
	if n := b.effects(t, "always-fails"); n != 0 {
		t.Errorf("a failing handler left %d effect rows, want 0 (rolled back)", n)
	}
	if n := flaky.Load(); n != 2 {
		t.Errorf("the flaky message was handled %d times, want 2", n)
	}
	if n := b.effects(t, "fails-once"); n != 1 {
		t.Errorf("the flaky message had %d effects after its redelivery, want 1", n)
	}
	if n := b.logs.Count("handler failed on the last delivery"); n != 1 {
		t.Errorf("%d give-up errors logged, want 1:\n%s", n, b.logs.String())
	}
}

func TestMessageWithoutMsgIDIsNotProcessed(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	c, err := jetstreamconsumer.New(b.client, b.config(b.recordingHandler()))
	if err != nil {
		t.Fatal(err)
	}
	b.publish(t, "")
	b.publish(t, strings.Repeat("x", intents.MaxMessageIDLength+1))
	b.publish(t, "order-1")
	stop := run(t, c)
	testkit.Eventually(t, 30*time.Second, "all three messages to be settled", b.consumerSettled(t, 3))
	_ = stop()
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("handler committed %d times, want 1: only the message with a valid id is processed", n)
	}
	if n := b.logs.Count("refused a message without a Nats-Msg-Id"); n != 1 {
		t.Errorf("%d refusals of a message without an id logged, want 1", n)
	}
	if n := b.logs.Count("is not a valid message id"); n != 1 {
		t.Errorf("%d refusals of an invalid id logged, want 1", n)
	}
}

func TestBadURLRetriesUntilTheContextEnds(t *testing.T) {
	t.Parallel()
	logger, logs := testkit.Logger()
	c, err := jetstreamconsumer.New(newClientWithoutDB(t), &jetstreamconsumer.Config{
		URL: "nats://outbox:hunter2-secret@127.0.0.1:1", Stream: "ORDERS", Durable: "billing",
		Handler:        func(context.Context, jetstream.Msg, pgx.Tx, *intents.Recorder) error { return nil },
		ReconnectDelay: 5 * time.Millisecond, ReconnectDelayMax: 20 * time.Millisecond, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	testkit.Eventually(t, 20*time.Second, "three retries to be logged", func() bool { return logs.Count("retrying") >= 3 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Fatalf("logs leak the password:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "127.0.0.1:1") {
		t.Fatalf("logs do not name the server:\n%s", logs.String())
	}
}

func TestMissingStreamAtStartIsWaitedFor(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	ctx := context.Background()
	// Consume a stream that does not exist yet.
	cfg := b.config(b.recordingHandler())
	cfg.Stream = b.stream + "_LATE"
	c, err := jetstreamconsumer.New(b.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	testkit.Eventually(t, 20*time.Second, "a retry to be logged", func() bool { return b.logs.Count("retrying") >= 1 })
	if err := b.js.DeleteStream(ctx, b.stream); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{b.subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.js.DeleteStream(context.Background(), cfg.Stream) })
	b.stream = cfg.Stream
	b.publish(t, "order-1")
	testkit.Eventually(t, 30*time.Second, "the message to be processed", b.consumerSettled(t, 1))
	_ = stop()
	if n := b.effects(t, "order-1"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

func TestShutdownWaitsForHandlersInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	started, release := make(chan struct{}), make(chan struct{})
	record := b.recordingHandler()
	c, err := jetstreamconsumer.New(b.client, b.config(func(ctx context.Context, msg jetstream.Msg, tx pgx.Tx, rec *intents.Recorder) error {
		close(started)
		<-release
		return record(ctx, msg, tx, rec)
	}))
	if err != nil {
		t.Fatal(err)
	}
	b.publish(t, "order-1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not start")
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while a handler was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after the handler finished")
	}
	if n := b.effects(t, "order-1"); n != 1 {
		t.Fatalf("%d effects, want 1: the handler in flight commits", n)
	}
	testkit.Eventually(t, 10*time.Second, "the message to be acknowledged", b.consumerSettled(t, 1))
}

func TestNewRejectsBadConfigNamingTheField(t *testing.T) {
	t.Parallel()
	client := newClientWithoutDB(t)
	h := func(context.Context, jetstream.Msg, pgx.Tx, *intents.Recorder) error { return nil }
	valid := func() jetstreamconsumer.Config {
		return jetstreamconsumer.Config{URL: testkit.NATSURL(), Stream: "ORDERS", Durable: "billing", Handler: h}
	}
	cases := map[string]func(*jetstreamconsumer.Config){
		"Config.URL":                func(c *jetstreamconsumer.Config) { c.URL = "" },
		"Config.Stream":             func(c *jetstreamconsumer.Config) { c.Stream = "" },
		"Config.Durable":            func(c *jetstreamconsumer.Config) { c.Durable = "a.b" },
		"Config.Consumer":           func(c *jetstreamconsumer.Config) { c.Consumer = "has space" },
		"Config.Handler":            func(c *jetstreamconsumer.Config) { c.Handler = nil },
		"Config.MaxDeliver":         func(c *jetstreamconsumer.Config) { c.MaxDeliver = -1 },
		"Config.AckWait":            func(c *jetstreamconsumer.Config) { c.AckWait = -time.Second },
		"Config.RedeliveryDelayMax": func(c *jetstreamconsumer.Config) { c.RedeliveryDelay = time.Hour },
		"Config.FilterSubject":      func(c *jetstreamconsumer.Config) { c.FilterSubject = "a b" },
	}
	for field, mutate := range cases {
		cfg := valid()
		mutate(&cfg)
		_, err := jetstreamconsumer.New(client, &cfg)
		if !errors.Is(err, jetstreamconsumer.ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig naming the field", field, err)
		}
	}
	cfg := valid()
	if _, err := jetstreamconsumer.New(nil, &cfg); !errors.Is(err, jetstreamconsumer.ErrInvalidConfig) {
		t.Errorf("New(nil client) = %v, want ErrInvalidConfig", err)
	}
	if _, err := jetstreamconsumer.New(client, nil); !errors.Is(err, jetstreamconsumer.ErrInvalidConfig) {
		t.Errorf("New(nil config) = %v, want ErrInvalidConfig", err)
	}
	cfg.URL = "nats://outbox:hunter2-secret@127.0.0.1:4222"
	if s := cfg.String(); strings.Contains(s, "hunter2") {
		t.Errorf("Config.String leaks the password: %s", s)
	}
}
