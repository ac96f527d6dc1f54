package intents_test

import (
	"context"
	"testing"

	"github.com/outboxkit/outbox/intents"
)

// Consume sends the marker's values as literals in the statement that
// begins its transaction: ids with quotes, backslashes and non-ASCII text
// are stored exactly, and their redelivery is recognised.
func TestConsumeStoresAnyMessageIDExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := []string{`it's`, `back\slash`, `\'; DROP TABLE orders; --`, `E'x'`, "ünï cödé ✓", `''`, `\\`}
	for i, id := range ids {
		msg := intents.Message{Consumer: "orders", ID: id}
		res, err := b.client.Consume(ctx, msg, orderHandler(string(rune('a'+i))))
		if err != nil || res.Duplicate {
			t.Fatalf("Consume(%q) = %+v, %v", id, res, err)
		}
		if want := "orders:" + id + ":payment"; res.Intents[0].Key != want {
			t.Fatalf("key %q, want %q", res.Intents[0].Key, want)
		}
		var stored string
		if err := b.pool.QueryRow(ctx, `SELECT message_id FROM outbox_processed_messages WHERE consumer = 'orders' AND message_id = $1`, id).Scan(&stored); err != nil {
			t.Fatalf("marker for %q: %v", id, err)
		}
		again, err := b.client.Consume(ctx, msg, orderHandler("never"))
		if err != nil || !again.Duplicate {
			t.Fatalf("redelivery of %q = %+v, %v; want a duplicate", id, again, err)
		}
	}
	if got, want := b.counts(t), (counts{markers: len(ids), orders: len(ids), intents: 2 * len(ids), events: 2 * len(ids), queued: 2 * len(ids)}); got != want {
		t.Fatalf("rows = %+v, want %+v", got, want)
	}
}
