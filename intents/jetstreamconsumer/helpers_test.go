package jetstreamconsumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/intents/jetstreamconsumer"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

type testBundle struct {
	pool    *pgxpool.Pool
	client  *intents.Client
	nc      *nats.Conn
	js      jetstream.JetStream
	stream  string
	subject string // "<prefix>.orders", captured by stream
	durable string
	logs    *testkit.SyncBuffer
	logger  *slog.Logger
	calls   atomic.Int64 // handler runs that returned nil
}

// setup gives a test a fresh database with an effects table, and a memory
// stream of its own (with the given duplicate window, 0 for JetStream's
// default) capturing "<prefix>.>", deleted at cleanup.
func setup(t *testing.T, duplicates time.Duration) *testBundle {
	t.Helper()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (message_id text NOT NULL, subject text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	email, err := sendgridprovider.New(sendgridprovider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	registry, err := providers.NewRegistry(email)
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		t.Fatal(err)
	}
	nc, js := testkit.NATS(t)
	stream, prefix := testkit.Stream(t, js, jetstream.StreamConfig{Duplicates: duplicates})
	b := &testBundle{pool: pool, client: client, nc: nc, js: js,
		stream: stream.CachedInfo().Config.Name, subject: prefix + ".orders", durable: "consumer-" + testkit.Suffix()}
	b.logger, b.logs = testkit.Logger()
	return b
}

// recordingHandler stores one effect row and records one email intent per
// message, and counts its successful runs.
func (b *testBundle) recordingHandler() jetstreamconsumer.Handler {
	return func(ctx context.Context, msg jetstream.Msg, tx pgx.Tx, rec *intents.Recorder) error {
		id := msg.Headers().Get(jetstream.MsgIDHeader)
		if _, err := tx.Exec(ctx, `INSERT INTO effects (message_id, subject) VALUES ($1, $2)`, id, msg.Subject()); err != nil {
			return err
		}
		payload := fmt.Sprintf(`{"from": {"email": "shop@example.com"}, "to": [{"email": "buyer@example.com"}], "subject": "Order %s", "text": "Thanks"}`, id)
		if err := rec.Record(intents.Intent{Kind: sendgridprovider.KindEmail, Reference: id, Payload: json.RawMessage(payload)}); err != nil {
			return err
		}
		b.calls.Add(1)
		return nil
	}
}

// config returns a consumer config for the bundle's stream with fast
// redeliveries; the caller sets the handler.
func (b *testBundle) config(h jetstreamconsumer.Handler) *jetstreamconsumer.Config {
	return &jetstreamconsumer.Config{
		URL: testkit.NATSURL(), Stream: b.stream, Durable: b.durable, Handler: h,
		AckWait: 5 * time.Second, RedeliveryDelay: 10 * time.Millisecond, RedeliveryDelayMax: 50 * time.Millisecond,
		ReconnectDelay: 10 * time.Millisecond, ReconnectDelayMax: 100 * time.Millisecond,
		Logger: b.logger,
	}
}

// run starts c.Run; the returned function cancels it and returns Run's
// error, failing the test if Run does not return in time.
func run(t *testing.T, c *jetstreamconsumer.Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30s of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// publish stores a message with the given Nats-Msg-Id (none when empty).
func (b *testBundle) publish(t *testing.T, id string) *jetstream.PubAck {
	t.Helper()
	msg := nats.NewMsg(b.subject)
	msg.Data = []byte(`{"order": "` + id + `"}`)
	if id != "" {
		msg.Header.Set(jetstream.MsgIDHeader, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatalf("publish %q: %v", id, err)
	}
	return ack
}

// publishStoredCopy publishes id until the stream stores a new copy, which
// happens once the stream's duplicate window has passed since the last.
func (b *testBundle) publishStoredCopy(t *testing.T, id string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the stream to store another copy of "+id, func() bool {
		return !b.publish(t, id).Duplicate
	})
}

// consumerSettled reports whether the durable consumer has delivered the
// stream's first n messages and holds nothing pending or unacknowledged.
func (b *testBundle) consumerSettled(t *testing.T, n uint64) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons, err := b.js.Consumer(ctx, b.stream, b.durable)
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return false
		}
		return info.Delivered.Stream >= n && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	}
}

// effects counts the effect rows for a message id.
func (b *testBundle) effects(t *testing.T, id string) int {
	t.Helper()
	return testkit.Count(t, b.pool, `SELECT count(*) FROM effects WHERE message_id = $1`, id)
}

// intentCount counts the recorded intents.
func (b *testBundle) intentCount(t *testing.T) int {
	t.Helper()
	return testkit.Count(t, b.pool, `SELECT count(*) FROM outbox_intents`)
}

// newClientWithoutDB returns an intents client over a pool that never
// connects (pgxpool connects lazily), for tests that never reach Postgres.
func newClientWithoutDB(t *testing.T) *intents.Client {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	registry, err := providers.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	client, err := intents.NewClient(pool, &intents.Config{Providers: registry})
	if err != nil {
		t.Fatal(err)
	}
	return client
}
