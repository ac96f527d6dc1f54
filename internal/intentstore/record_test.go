package intentstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/intentstore"
)

// A batch statement gives back each intent's id in the order the intents
// were added, whatever order their keys sort in, and each intent gets its
// own "recorded" event (with its own actor) and one dispatch job.
func TestInsertTxReturnsEachIntentsIDInTheOrderAdded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, store := newStore(t)
	var ib intentstore.InsertBatch
	ib.Grow(2)
	keys := []string{"zeta:m9", "alpha:m1", "mid:m5", "alpha:m0"}
	for i, k := range keys {
		ib.Add(intentstore.NewIntent{Key: k, Kind: "sendgrid.email", Provider: "sendgrid", Payload: []byte(fmt.Sprintf(`{"n": %d}`, i)),
			Consumer: "c" + fmt.Sprint(i), MessageID: k, Actor: fmt.Sprintf("consumer:c%d", i)})
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.InsertTx(ctx, tx, &ib) }); err != nil {
		t.Fatal(err)
	}
	if len(ib.IDs) != len(keys) {
		t.Fatalf("%d ids for %d intents", len(ib.IDs), len(keys))
	}
	for i, id := range ib.IDs {
		var key, actor string
		var n, jobs int
		var queued bool
		err := pool.QueryRow(ctx, `
SELECT i.idempotency_key, (i.payload->>'n')::int, e.actor, i.queued,
       (SELECT count(*) FROM river_job j WHERE j.args->>'intent_id' = i.id::text)
FROM outbox_intents i JOIN outbox_intent_events e ON e.intent_id = i.id
WHERE i.id = $1`, id).Scan(&key, &n, &actor, &queued, &jobs)
		if err != nil {
			t.Fatalf("intent %d (id %d): %v", i, id, err)
		}
		if key != keys[i] || n != i || actor != fmt.Sprintf("consumer:c%d", i) || !queued || jobs != 0 {
			t.Errorf("IDs[%d] = %d holds key %q, payload n %d, actor %q, queued %v, %d jobs; want %q, %d, consumer:c%d, queued, no job",
				i, id, key, n, actor, queued, jobs, keys[i], i, i)
		}
	}
}
