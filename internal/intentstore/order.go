package intentstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Order is how a new intent is ordered among others (docs/DESIGN.md,
// "Ordered intents"): the intents it comes after, by key, and its ordering
// key. The caller (package intents) has validated it: every key names an
// intent stored before this one, or one of the same call listed before it,
// and the predecessors of one call form no cycle.
type Order struct {
	After       []OrderAfter `json:"after,omitempty"`
	OrderingKey string       `json:"ordering_key,omitempty"`
}

// OrderAfter is one predecessor and the payload fields its result fills.
type OrderAfter struct {
	Key string `json:"key"`
	// Fill maps a payload field to the predecessor's result that fills it
	// ("provider_ref").
	Fill map[string]string `json:"fill"`
}

// orderItem is one element of outbox_order_record's items.
type orderItem struct {
	Key string `json:"key"`
	// Actor is who recorded it, for its "recorded" event, which the
	// function writes.
	Actor string `json:"actor"`
	Order
}

// orderBatch gathers the order of an InsertBatch's intents, in the order
// they are added (predecessors of one call first).
type orderBatch struct {
	items []orderItem
}

// add records key's order, if it has one, and reports whether it has.
func (ob *orderBatch) add(key, actor string, o *Order) bool {
	if o == nil || (len(o.After) == 0 && o.OrderingKey == "") {
		return false
	}
	for i := range o.After {
		if o.After[i].Fill == nil {
			o.After[i].Fill = map[string]string{}
		}
	}
	ob.items = append(ob.items, orderItem{Key: key, Actor: actor, Order: *o})
	return true
}

// queueRecordOrder adds to b, after the statement that inserts ib's
// intents, the one that applies their order (see recordOrderSQL); nothing
// when none is ordered.
func (s *Store) queueRecordOrder(b *pgx.Batch, ib *InsertBatch) {
	if len(ib.order.items) == 0 {
		return
	}
	items, err := json.Marshal(predecessorsFirst(ib.order.items))
	if err != nil {
		// Strings and maps of strings always marshal.
		panic(fmt.Sprintf("intentstore: encode order: %v", err))
	}
	b.Queue(recordOrderSQL, s.jobArgs(pgx.NamedArgs{"items": string(items)}))
	// An intent that comes after one already failed or cancelled is
	// recorded cancelled: counted as finished in this transaction.
	keys := make([]string, 0, len(ib.order.items))
	for _, it := range ib.order.items {
		if len(it.Order.After) > 0 {
			keys = append(keys, it.Key)
		}
	}
	if len(keys) > 0 {
		b.Queue(countRecordedFinishedSQL, pgx.NamedArgs{"keys": keys})
	}
	// One recorded cancelled finishes at record: its ordering key's next
	// intent goes, as when a settlement finishes one. Without this, an
	// intent of the same call and key, made to wait behind it, would wait
	// for a head that never settles (a stranded key).
	var keyed []string
	for _, it := range ib.order.items {
		if len(it.Order.After) > 0 && it.Order.OrderingKey != "" {
			keyed = append(keyed, it.Key)
		}
	}
	if len(keyed) > 0 {
		releaseRecordedCancelledQ.queue(b, s.jobArgs(pgx.NamedArgs{"keys": keyed, "notice": s.job.notice}))
	}
}

// predecessorsFirst orders items so that each comes after the items it
// names, otherwise keeping their order: outbox_order_record decides an
// item from its predecessors' states, and numbers the items of an ordering
// key in this order, so a key never makes an intent wait for one that
// comes after it (intents of earlier calls have lower numbers already).
// The caller refused cycles; were there one, its items would keep their
// order.
func predecessorsFirst(items []orderItem) []orderItem {
	at := make(map[string]int, len(items))
	for i, it := range items {
		at[it.Key] = i
	}
	out := make([]orderItem, 0, len(items))
	state := make([]byte, len(items)) // 0 unseen, 1 visiting, 2 placed
	var place func(i int)
	place = func(i int) {
		if state[i] != 0 {
			return
		}
		state[i] = 1
		for _, a := range items[i].After {
			if j, ok := at[a.Key]; ok {
				place(j)
			}
		}
		state[i] = 2
		out = append(out, items[i])
	}
	for i := range items {
		place(i)
	}
	return out
}

// queueOrderSettled adds to b, after a settlement's statements, the
// statement that releases or cancels the intents waiting for its intent if
// it finished it, and inserts the released intents' dispatch jobs (see
// orderSettledSQL); nothing for a settlement that does not finish it. The
// statement reads the intent's state when it runs, so it is right whatever
// the earlier statements did (a guard that no longer held), however many
// settlements share the transaction, and when it is sent again.
func (s *Store) queueOrderSettled(b *pgx.Batch, st Settlement) {
	if st.To.Terminal() {
		s.queueReleaseAfter(b, st.Row.ID)
	}
}

func (s *Store) queueReleaseAfter(b *pgx.Batch, id int64) {
	orderSettledQ.queue(b, s.jobArgs(pgx.NamedArgs{"id": id, "notice": s.job.notice}))
}

// orderSettledTx releases or cancels, in tx, the intents waiting for
// intent id, which an operator's action may have finished.
func (s *Store) orderSettledTx(ctx context.Context, tx pgx.Tx, id int64) error {
	b := &pgx.Batch{}
	s.queueReleaseAfter(b, id)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("intentstore: release the intents after %d: %w", id, err)
	}
	return nil
}

// KnownKeys returns which of keys are stored, as seen by tx (intents
// stored earlier in tx included).
func KnownKeys(ctx context.Context, tx pgx.Tx, keys []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, knownKeysSQL, pgx.NamedArgs{"keys": keys})
	if err != nil {
		return nil, fmt.Errorf("intentstore: look up keys: %w", err)
	}
	known := make(map[string]bool, len(keys))
	var k string
	_, err = pgx.ForEachRow(rows, []any{&k}, func() error {
		known[k] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("intentstore: look up keys: %w", err)
	}
	return known, nil
}

// The statements of ordering. The procedural parts (a chain of
// cancellations, a key's next turn) are the functions of migrations 006 and 008,
// which only this package calls.

// recordOrderSQL applies the order of intents inserted earlier in the same
// transaction (without their events and jobs: see insertIntentsSQL), and
// inserts the dispatch jobs of those that go at once: see
// outbox_order_record in migrations/008_order_record.up.sql.
const recordOrderSQL = `
WITH inserted AS (
    SELECT t.id FROM outbox_order_record(@items::jsonb) AS t(id)
),
` + insertJobsCTE + `
SELECT count(*) FROM inserted`

// orderSettledSQL releases (to pending, with a dispatch job inserted here,
// as insertIntentsSQL inserts it) or cancels the intents waiting for @id,
// if it is finished: see outbox_order_settled in
// migrations/006_ordering.up.sql.
// An intent that has no ordering key and that nothing comes after (most
// intents) skips the function.
const orderSettledSQL = `
WITH inserted AS (
    SELECT t.id
    FROM outbox_intents i, LATERAL outbox_order_settled(i.id, @notice::text) AS t(id)
    WHERE i.id = @id::bigint
      AND (i.ordering_key IS NOT NULL OR EXISTS (SELECT 1 FROM outbox_intent_dependencies d WHERE d.after_id = i.id))
),
` + insertJobsCTE + `
SELECT count(*) FROM inserted`

// releaseRecordedCancelledSQL runs, for the intents of @keys that
// outbox_order_record recorded cancelled and that hold an ordering key,
// what a settlement that finished them would (orderSettledSQL): the next
// of their key is released, its dispatch job inserted.
const releaseRecordedCancelledSQL = `
WITH inserted AS (
    SELECT t.id
    FROM outbox_intents i, LATERAL outbox_order_settled(i.id, @notice::text) AS t(id)
    WHERE i.idempotency_key = ANY(@keys::text[]) AND i.state = 'cancelled' AND i.ordering_key IS NOT NULL
),
` + insertJobsCTE + `
SELECT count(*) FROM inserted`

const knownKeysSQL = `SELECT idempotency_key FROM outbox_intents WHERE idempotency_key = ANY(@keys::text[])`
