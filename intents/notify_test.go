package intents_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/internal/intentstore"
)

// Recording wakes listening dispatchers: a notification on the queue's
// channel (intentstore.QueueChannel, in the current schema), sent when the
// transaction commits.
func TestConsumeNotifiesDispatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN "public.`+intentstore.QueueChannel+`"`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Consume(ctx, intents.Message{Consumer: "orders", ID: "m1"}, orderHandler("order-1")); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := conn.Conn().WaitForNotification(waitCtx); err != nil {
		t.Fatalf("no notification: %v", err)
	}
}
