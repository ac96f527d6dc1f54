package intentstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outboxkit/outbox/intents/intenttype"
)

// NewIntent is one intent to store, validated and keyed by the caller.
type NewIntent struct {
	Key       string
	Kind      string
	Provider  string
	Name      string
	Payload   []byte
	Reference string
	// Consumer and MessageID name the message that recorded it; empty
	// outside a consumer.
	Consumer  string
	MessageID string
	// Actor is the "recorded" event's actor.
	Actor string
	// TraceParent and TraceState are the W3C trace context of the span
	// that recorded it (internal/tracing.Inject); empty: none, stored as
	// NULL.
	TraceParent string
	TraceState  string
	// Order is how it is ordered among others (order.go); nil: not.
	Order *Order
}

// InsertBatch gathers the intents one statement stores, possibly from
// several messages. After the batch it was queued in has run, IDs holds the
// stored intents' ids in order.
type InsertBatch struct {
	keys, kinds, providers, names, payloads, actors []string
	refs, consumers, messageIDs                     []*string
	traceParents, traceStates                       []*string
	orders                                          []*Order // nil: not ordered
	anyOrdered                                      bool
	IDs                                             []int64
}

// Len is how many intents the batch holds.
func (ib *InsertBatch) Len() int { return len(ib.keys) }

// Grow makes room for n more intents, so that adding a batch's intents one
// by one does not reallocate its columns as they grow.
func (ib *InsertBatch) Grow(n int) {
	for _, col := range []*[]string{&ib.keys, &ib.kinds, &ib.providers, &ib.names, &ib.payloads, &ib.actors} {
		*col = slices.Grow(*col, n)
	}
	for _, col := range []*[]*string{&ib.refs, &ib.consumers, &ib.messageIDs, &ib.traceParents, &ib.traceStates} {
		*col = slices.Grow(*col, n)
	}
}

// Add appends an intent.
func (ib *InsertBatch) Add(in NewIntent) {
	ib.keys = append(ib.keys, in.Key)
	ib.kinds = append(ib.kinds, in.Kind)
	ib.providers = append(ib.providers, in.Provider)
	ib.names = append(ib.names, in.Name)
	ib.payloads = append(ib.payloads, string(in.Payload))
	ib.actors = append(ib.actors, in.Actor)
	ib.refs = append(ib.refs, nullString(in.Reference))
	ib.consumers = append(ib.consumers, nullString(in.Consumer))
	ib.messageIDs = append(ib.messageIDs, nullString(in.MessageID))
	ib.traceParents = append(ib.traceParents, nullString(in.TraceParent))
	ib.traceStates = append(ib.traceStates, nullString(in.TraceState))
	o := in.Order
	if o != nil && len(o.After) == 0 && o.OrderingKey == "" {
		o = nil
	}
	ib.orders = append(ib.orders, o)
	ib.anyOrdered = ib.anyOrdered || o != nil
}

// InsertMarker inserts a processed marker in tx and reports whether it is
// new (false: the message was processed already, or a concurrent
// transaction held the marker and committed).
func InsertMarker(ctx context.Context, tx pgx.Tx, consumer, messageID string) (bool, error) {
	tag, err := tx.Exec(ctx, insertMarkerSQL, pgx.NamedArgs{"consumer": consumer, "message_id": messageID})
	if err != nil {
		return false, fmt.Errorf("intentstore: insert processed marker: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// QueueInsertMarker adds InsertMarker's statement to b: once b has run,
// *isNew says whether the marker was new. Queued behind b.BeginTx, the
// transaction's BEGIN and its marker cost one round trip.
func QueueInsertMarker(b *pgx.Batch, consumer, messageID string, isNew *bool) {
	insertMarkerQ.queue(b, pgx.NamedArgs{"consumer": consumer, "message_id": messageID}).Exec(func(tag pgconn.CommandTag) error {
		*isNew = tag.RowsAffected() == 1
		return nil
	})
}

// InsertMarkers inserts the markers of a batch of messages in tx, in a
// deadlock-free order, and calls inserted with each one that was new.
func InsertMarkers(ctx context.Context, tx pgx.Tx, consumers, messageIDs []string, inserted func(consumer, messageID string)) error {
	b := &pgx.Batch{}
	QueueInsertMarkers(b, consumers, messageIDs, inserted)
	return tx.SendBatch(ctx, b).Close()
}

// QueueInsertMarkers adds InsertMarkers' statement to b: once b has run,
// inserted has been called with each marker that was new. Queued behind
// b.BeginTx, the transaction's BEGIN and its markers cost one round trip.
func QueueInsertMarkers(b *pgx.Batch, consumers, messageIDs []string, inserted func(consumer, messageID string)) {
	insertMarkersQ.queue(b, pgx.NamedArgs{"consumers": consumers, "message_ids": messageIDs}).Query(func(rows pgx.Rows) error {
		var c, m string
		_, err := pgx.ForEachRow(rows, []any{&c, &m}, func() error {
			inserted(c, m)
			return nil
		})
		if err != nil {
			return fmt.Errorf("intentstore: insert processed markers: %w", err)
		}
		return nil
	})
}

// QueueInsert adds to b the statement that stores ib's intents, queued
// (see ClaimQueued), and a notification to wake dispatchers when one is
// due. An ordered intent gets its "recorded" event, saying what it waits
// for; a plain one needs none (insertIntentsSQL). Sent with the transaction's COMMIT in one
// batch, the whole write costs one round trip; nothing is dispatched before
// that commit, and nothing remains if the transaction rolls back. The
// stored predecessors of ib's ordered intents must have been locked and
// read in the same transaction first (ib.LockPredecessors).
func (s *Store) QueueInsert(b *pgx.Batch, ib *InsertBatch) {
	if ib.anyOrdered {
		s.queueInsertOrdered(b, ib)
		s.queueNotify(b)
		return
	}
	collect := func(rows pgx.Rows) error {
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err == nil && len(ids) != ib.Len() {
			err = fmt.Errorf("stored %d intents of %d", len(ids), ib.Len())
		}
		ib.IDs = ids
		return err
	}
	if ib.Len() == 1 {
		insertIntentQ.queue(b, pgx.NamedArgs{
			"key": ib.keys[0], "kind": ib.kinds[0], "provider": ib.providers[0], "name": ib.names[0],
			"payload": ib.payloads[0], "reference": ib.refs[0], "consumer": ib.consumers[0],
			"message_id":   ib.messageIDs[0],
			"trace_parent": ib.traceParents[0], "trace_state": ib.traceStates[0],
		}).Query(collect)
	} else {
		insertIntentsQ.queue(b, pgx.NamedArgs{
			"keys": ib.keys, "kinds": ib.kinds, "providers": ib.providers, "names": ib.names,
			"payloads": ib.payloads, "references": ib.refs, "consumers": ib.consumers,
			"message_ids":   ib.messageIDs,
			"trace_parents": ib.traceParents, "trace_states": ib.traceStates,
		}).Query(ib.collectIDs)
	}
	s.queueNotify(b)
}

// queueNotify adds the notification that wakes dispatchers, when one is due.
func (s *Store) queueNotify(b *pgx.Batch) {
	if s.notify.due() {
		b.Queue(queueNotifySQL)
	}
}

// collectIDs reads insertIntentsSQL's (id, key) rows, in id order, into
// IDs in the order the intents were added. The statement inserts its input
// in order, so ids ascend with it and the keys come back as they were
// added; should they not, each key is found by a map (keys are unique).
func (ib *InsertBatch) collectIDs(rows pgx.Rows) error {
	ib.IDs = make([]int64, ib.Len())
	var at map[string]int // built only if the keys come back out of order
	stored := 0
	var id int64
	var key []byte // compared, not kept
	_, err := pgx.ForEachRow(rows, []any{&id, &key}, func() error {
		i := stored
		if at == nil && (i >= ib.Len() || ib.keys[i] != string(key)) {
			at = make(map[string]int, ib.Len())
			for j, k := range ib.keys {
				at[k] = j
			}
		}
		if at != nil {
			j, ok := at[string(key)]
			if !ok {
				return fmt.Errorf("stored an intent with key %q that was not asked for", key)
			}
			i = j
		}
		ib.IDs[i] = id
		stored++
		return nil
	})
	if err == nil && stored != ib.Len() {
		err = fmt.Errorf("stored %d intents of %d", stored, ib.Len())
	}
	return err
}

// InsertTx stores ib's intents in tx, as QueueInsert does,
// in one round trip (two when it must lock predecessors the caller did not
// read). A key already stored is a *intenttype.DuplicateKeyError.
func (s *Store) InsertTx(ctx context.Context, tx pgx.Tx, ib *InsertBatch) error {
	if err := ib.LockPredecessors(ctx, tx); err != nil {
		return err
	}
	b := &pgx.Batch{}
	s.QueueInsert(b, ib)
	return MapInsertError(tx.SendBatch(ctx, b).Close())
}

// MapInsertError turns the unique violation of an intent's key into a
// *intenttype.DuplicateKeyError and wraps anything else; nil stays nil.
func MapInsertError(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "outbox_intents_idempotency_key_key" {
		// Detail reads: Key (idempotency_key)=(the key) already exists.
		key := pgErr.Detail
		if i, j := strings.Index(key, "=("), strings.LastIndex(key, ") already exists"); i >= 0 && j > i {
			key = key[i+2 : j]
		}
		return &intenttype.DuplicateKeyError{Key: key}
	}
	return fmt.Errorf("intentstore: insert: %w", err)
}

// insertMarkerSQL is the idempotent consumer. ON CONFLICT DO NOTHING makes a
// concurrent duplicate wait on the unique index until the first transaction
// ends, then return no row instead of failing: the transaction stays usable
// and the caller learns it is a duplicate.
const insertMarkerSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
VALUES (@consumer, @message_id)
ON CONFLICT (consumer, message_id) DO NOTHING`

// insertMarkersSQL is insertMarkerSQL for a batch: it returns the markers it
// inserted, so the caller learns which messages are new. Rows are inserted
// in (consumer, message_id) order, so two batches that share messages wait
// on each other's markers in the same order and cannot deadlock.
const insertMarkersSQL = `
INSERT INTO outbox_processed_messages (consumer, message_id)
SELECT consumer, message_id
FROM unnest(@consumers::text[], @message_ids::text[]) AS t(consumer, message_id)
ORDER BY consumer, message_id
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING consumer, message_id`

// insertIntentsSQL stores intents, queued, in one statement, returning each
// stored intent's id with its key, in id order (the caller checks the keys
// against its input, and puts them back in input order by key should they
// differ). consumer, message_id and the trace context are per row, so one
// statement serves a whole batch of messages. It neither numbers nor sorts
// its input: numbering, sorting and joining the input back for the output
// was, for a batch of a hundred intents, most of what the statement cost
// beyond the rows themselves. No River job is written (the dispatchers
// claim queued intents themselves: ClaimQueued), and no "recorded" event:
// the row says it (created_at, and the consumer that recorded it), and
// outbox_intent_events shows it.
const insertIntentsSQL = `
INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id,
                            trace_parent, trace_state, queued)
SELECT idempotency_key, kind, provider, name, payload, reference, consumer, message_id, trace_parent, trace_state, true
FROM unnest(@keys::text[], @kinds::text[], @providers::text[], @names::text[], @payloads::jsonb[],
            @references::text[], @consumers::text[], @message_ids::text[], @trace_parents::text[], @trace_states::text[])
    AS t(idempotency_key, kind, provider, name, payload, reference, consumer, message_id, trace_parent, trace_state)
RETURNING id, idempotency_key`

// insertIntentSQL is insertIntentsSQL for the common case of one intent,
// with plain parameters instead of arrays: less work for both sides.
const insertIntentSQL = `
INSERT INTO outbox_intents (idempotency_key, kind, provider, name, payload, reference, consumer, message_id,
                            trace_parent, trace_state, queued)
VALUES (@key, @kind, @provider, @name, @payload, @reference, @consumer, @message_id, @trace_parent, @trace_state, true)
RETURNING id`
