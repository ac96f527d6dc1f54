// Package intenttest helps users test their own consumers: it reads back
// what a consumer recorded for a message, so a test can assert "this handler
// recorded a payment and a receipt" without knowing the outbox's tables.
package intenttest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Querier is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx, so a test can
// look inside a transaction it has not committed yet.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const recordedSQL = `
SELECT id, idempotency_key, kind, provider, name, coalesce(consumer, ''), coalesce(message_id, ''),
       coalesce(reference, ''), payload, state, attempt_count, coalesce(provider_ref, ''),
       coalesce(last_error, ''), created_at, updated_at, finished_at
FROM outbox_intents
WHERE consumer = $1 AND message_id = $2
ORDER BY id`

// Recorded returns the intents the consumer recorded for the message, in the
// order they were recorded, with their current state.
func Recorded(ctx context.Context, db Querier, consumer, messageID string) ([]intenttype.Intent, error) {
	rows, err := db.Query(ctx, recordedSQL, consumer, messageID)
	if err != nil {
		return nil, fmt.Errorf("intenttest: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (intenttype.Intent, error) {
		var in intenttype.Intent
		err := row.Scan(&in.ID, &in.IdempotencyKey, &in.Kind, &in.Provider, &in.Name, &in.Consumer, &in.MessageID,
			&in.Reference, &in.Payload, &in.State, &in.AttemptCount, &in.ProviderRef, &in.LastError,
			&in.CreatedAt, &in.UpdatedAt, &in.FinishedAt)
		return in, err
	})
}

// RequireRecorded fails the test unless the consumer recorded, for the
// message, intents of exactly these kinds in this order, and returns them.
func RequireRecorded(t testing.TB, db Querier, consumer, messageID string, kinds ...string) []intenttype.Intent {
	t.Helper()
	recorded, err := Recorded(context.Background(), db, consumer, messageID)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(recorded))
	for i, in := range recorded {
		got[i] = in.Kind
	}
	if !slices.Equal(got, kinds) {
		t.Fatalf("consumer %q recorded %v for message %q, want %v", consumer, got, messageID, kinds)
	}
	return recorded
}
