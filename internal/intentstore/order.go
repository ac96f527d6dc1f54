package intentstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// Order is how a new intent is ordered among others (docs/DESIGN.md,
// "Ordered intents"): the intents it comes after, by key, and its ordering
// key. The caller (package intents) has validated it: every key names an
// intent stored before this one, or one of the same batch, and the
// predecessors of one batch form no cycle.
type Order struct {
	After       []OrderAfter
	OrderingKey string
}

// OrderAfter is one predecessor and the payload fields its result fills.
type OrderAfter struct {
	Key string
	// Fill maps a payload field to the predecessor's result that fills it
	// ("provider_ref").
	Fill map[string]string
	// Stored is the predecessor as InsertBatch.LockPredecessors read it,
	// when it was stored before this batch; nil when it is an intent of the
	// same batch. QueueInsert decides the new intent's state from it.
	Stored *Predecessor
}

// Predecessor is a stored intent that a new one comes after, read under a
// lock: until the recording transaction ends it cannot finish, so
// what the recorder decides from its state stays true. (A settlement that
// would finish it waits for the recorder's commit, then sees the new
// intent, and releases or cancels it.)
type Predecessor struct {
	ID          int64
	State       intenttype.State
	ProviderRef string
}

// lockPredecessors locks the stored intents of keys, in id order, marks
// each as one that others come after (has_dependents), and returns them by
// key, as they are once locked; a key not stored is absent from the map.
// The lock is held until the transaction ends: a settlement of one of them
// waits, then finds the mark and releases or cancels the new intent
// (Settlement.releases). The lock is
// exclusive (a share lock would let two recorders each wait to mark the
// row the other share-locked), so recorders of intents that come after
// the same predecessor take turns.
func lockPredecessors(ctx context.Context, tx pgx.Tx, keys []string) (map[string]Predecessor, error) {
	found := make(map[string]Predecessor, len(keys))
	b := &pgx.Batch{}
	b.Queue(lockPredecessorsSQL, pgx.NamedArgs{"keys": keys}).Query(func(rows pgx.Rows) error {
		var (
			key string
			p   Predecessor
		)
		_, err := pgx.ForEachRow(rows, []any{&key, &p.ID, &p.State, &p.ProviderRef}, func() error {
			found[key] = p
			return nil
		})
		return err
	})
	b.Queue(markPredecessorsSQL, pgx.NamedArgs{"keys": keys})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("intentstore: lock predecessors: %w", err)
	}
	return found, nil
}

// KnownKeys returns which of keys are stored, as seen by tx (intents
// stored earlier in tx included). It locks nothing.
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

const knownKeysSQL = `SELECT idempotency_key FROM outbox_intents WHERE idempotency_key = ANY(@keys::text[])`

// LockPredecessors locks, marks and reads in tx the stored intents that
// ib's intents come after (OrderAfter.Stored), all at once, in id order
// (see lockPredecessors). Call it right before QueueInsert; InsertTx calls
// it.
func (ib *InsertBatch) LockPredecessors(ctx context.Context, tx pgx.Tx) error {
	in := make(map[string]bool, ib.Len())
	for _, k := range ib.keys {
		in[k] = true
	}
	var keys []string
	for _, o := range ib.orders {
		for _, a := range o.afterOrNone() {
			if a.Stored == nil && !in[a.Key] && !slices.Contains(keys, a.Key) {
				keys = append(keys, a.Key)
			}
		}
	}
	if len(keys) == 0 {
		return nil
	}
	found, err := lockPredecessors(ctx, tx, keys)
	if err != nil {
		return err
	}
	for _, o := range ib.orders {
		for i, a := range o.afterOrNone() {
			if p, ok := found[a.Key]; ok && a.Stored == nil && !in[a.Key] {
				o.After[i].Stored = &p
			}
		}
	}
	return nil
}

func (o *Order) afterOrNone() []OrderAfter {
	if o == nil {
		return nil
	}
	return o.After
}

// The moves ordering makes after recording, checked against the state
// diagram when the package loads: the statements take their states from
// here.
var (
	releaseEdge = mustEdge(intenttype.StateWaiting, intenttype.StatePending, intenttype.ActorDispatcher)
	cascadeEdge = mustEdge(intenttype.StateWaiting, intenttype.StateCancelled, intenttype.ActorDispatcher)
)

type edge struct {
	from, to intenttype.State
	by       intenttype.Actor
}

func mustEdge(from, to intenttype.State, by intenttype.Actor) edge {
	if !intenttype.CanTransition(from, to, by) {
		panic(fmt.Sprintf("intentstore: ordering moves an intent from %s to %s by %s, which intenttype.Transitions does not allow", from, to, by))
	}
	return edge{from, to, by}
}

func (e edge) args(a pgx.NamedArgs) pgx.NamedArgs {
	a["from"], a["to"], a["actor"] = e.from, e.to, e.by
	return a
}

// The reasons ordering writes in events and in last_error. The recorded
// ones are built by recordPlan; those of a release or a cancellation are
// format() templates the statements fill (%s: id, key, state or fill).
const (
	whyCancelledAfter = "not performed: intent %s (%s) it comes after is %s"
	whyCancelledNoRef = "not performed: intent %s (%s) it comes after succeeded without a provider reference to fill %s"
	whyReleasedAfter  = "released: intent %s (%s) it came after succeeded"
	whyReleasedTurn   = "released: its turn in ordering key %s"
)

// recordPlan is how the intents of a batch that holds ordered ones are
// recorded, decided in Go before the batch is sent: each one's state
// (pending, waiting, or cancelled), what it waits for, its filled fields,
// its number in its ordering key and its "recorded" event. It is decided
// from the stored predecessors' states (read under their locks) and
// from the batch itself, in predecessors-first order, so an intent of the
// batch that comes after one recorded cancelled is cancelled too. Only one
// fact is read by the statement itself: whether an intent recorded before,
// of the same ordering key, is unfinished, which it reads after taking the
// key's lock (insertOrderedSQL).
//
// The reasons name predecessors by id; those of the same batch have no id
// until the statement draws them, so a reason naming one is a format()
// template ("intent %3$s": the id of the batch's third intent), its other
// text escaped.
type recordPlan struct {
	states      []string // before the key's check: pending, waiting or cancelled
	keyChecks   []bool   // waits if an intent of its key recorded before is unfinished
	waitingFor  []int32
	fills       []string // a JSON object: the payload fields set, as jsonb || does
	orderKeys   []*string
	seqBack     []int64 // key_seq is the key's last_seq after this batch minus this
	reasons     []string
	keyReasons  []string // the reason if the key's check makes it wait
	templated   []bool   // the reasons are format() templates
	followed    []bool   // an intent of the batch comes after it: has_dependents
	cancelled   []string // keys recorded cancelled: finished at record, counted
	bumpKeys    []string // the ordering keys, sorted, with how many intents each gets
	bumpCounts  []int64
	depOrds     []int64 // dependency rows: the intent's position in the batch (from 1)
	depAfterOrd []int64 // the predecessor's position, when it is of the batch
	depAfterIDs []*int64
	depFills    []string
	depDone     []bool // satisfied: the predecessor finished already
}

// plan decides ib's ordered intents; see recordPlan.
func (ib *InsertBatch) plan() *recordPlan {
	n := ib.Len()
	p := &recordPlan{
		states: make([]string, n), keyChecks: make([]bool, n), waitingFor: make([]int32, n),
		fills: make([]string, n), orderKeys: make([]*string, n), seqBack: make([]int64, n),
		reasons: make([]string, n), keyReasons: make([]string, n), templated: make([]bool, n),
		followed: make([]bool, n),
	}
	at := make(map[string]int, n)
	for i, k := range ib.keys {
		at[k] = i
		p.states[i], p.fills[i], p.reasons[i], p.keyReasons[i] = string(intenttype.StatePending), "{}", "recorded", "recorded"
	}
	order := ib.predecessorsFirst(at)
	keys := p.numberKeys(ib, order)
	held := map[string]bool{} // an earlier intent of the batch holds the key
	for _, i := range order {
		found := p.readPredecessors(ib, at, i)
		p.fills[i] = jsonText(found.fill)
		p.waitingFor[i] = int32(len(found.waits))
		p.decide(ib, i, found, held)
	}
	p.bumpKeys = slices.Sorted(maps.Keys(keys))
	for _, k := range p.bumpKeys {
		p.bumpCounts = append(p.bumpCounts, keys[k])
	}
	return p
}

// numberKeys sets each keyed intent's place in its key (seqBack: from the
// key's last number after this batch), in order, and returns how many
// intents of the batch each key gets.
func (p *recordPlan) numberKeys(ib *InsertBatch, order []int) map[string]int64 {
	count := map[string]int64{}
	for _, i := range order {
		if k := ib.orders[i].OrderingKey; k != "" {
			count[k]++
		}
	}
	numbered := map[string]int64{}
	for _, i := range order {
		if k := ib.orders[i].OrderingKey; k != "" {
			p.orderKeys[i] = &ib.orders[i].OrderingKey
			numbered[k]++
			p.seqBack[i] = count[k] - numbered[k]
		}
	}
	return count
}

// predecessors is what an intent's predecessors say about it: the reasons
// to cancel it (the first one is said), what it waits for, and the fields
// their results fill.
type predecessors struct {
	why, waits []phrase
	fill       map[string]string
}

// readPredecessors reads the predecessors of the batch's intent i, stored
// (as LockPredecessors found them) or of the batch (decided already:
// predecessors first), and adds its dependency rows.
func (p *recordPlan) readPredecessors(ib *InsertBatch, at map[string]int, i int) predecessors {
	found := predecessors{fill: map[string]string{}}
	for _, a := range ib.orders[i].After {
		var ref phrase
		var state intenttype.State
		var predRef string
		if a.Stored != nil {
			ref = lit(fmt.Sprintf("intent %d (%s)", a.Stored.ID, a.Key))
			state, predRef = a.Stored.State, a.Stored.ProviderRef
			p.depAfterOrd, p.depAfterIDs = append(p.depAfterOrd, 0), append(p.depAfterIDs, &a.Stored.ID)
		} else {
			j, ok := at[a.Key]
			if !ok {
				panic(fmt.Sprintf("intentstore: intent %q comes after %q, neither stored (InsertBatch.LockPredecessors) nor in the batch", ib.keys[i], a.Key))
			}
			ref = cat(lit("intent "), batchRef(j+1), lit(" ("+a.Key+")"))
			state = intenttype.State(p.states[j])
			p.followed[j] = true
			p.depAfterOrd, p.depAfterIDs = append(p.depAfterOrd, int64(j+1)), append(p.depAfterIDs, nil)
		}
		switch state {
		case intenttype.StateSucceeded:
			if len(a.Fill) > 0 && predRef == "" {
				found.why = append(found.why, cat(ref, lit(" it comes after succeeded without a provider reference to fill "+jsonbText(a.Fill))))
				break // cancelled: its payload stays as recorded
			}
			for f := range a.Fill {
				found.fill[f] = predRef
			}
		case intenttype.StateFailed, intenttype.StateCancelled:
			found.why = append(found.why, cat(ref, lit(" it comes after is "+string(state))))
		default:
			found.waits = append(found.waits, cat(ref, lit(" to succeed")))
		}
		p.depOrds = append(p.depOrds, int64(i+1))
		p.depFills = append(p.depFills, jsonText(a.Fill))
		p.depDone = append(p.depDone, state.Terminal())
	}
	return found
}

// decide sets the batch's intent i's recorded state and reasons from what
// its predecessors say and from whether an earlier intent of the batch
// holds its ordering key (held, which it updates).
func (p *recordPlan) decide(ib *InsertBatch, i int, found predecessors, held map[string]bool) {
	key := ib.orders[i].OrderingKey
	keyWait := lit("the earlier intents of ordering key " + key + " to finish")
	var reason, keyReason phrase
	switch {
	case len(found.why) > 0:
		p.states[i] = string(intenttype.StateCancelled)
		reason = cat(lit("recorded cancelled: "), found.why[0])
		keyReason = reason
		p.cancelled = append(p.cancelled, ib.keys[i])
	case key != "" && held[key]:
		p.states[i] = string(intenttype.StateWaiting)
		reason = cat(lit("recorded; waits for "), join(append(found.waits, keyWait), ", and "))
		keyReason = reason
	case len(found.waits) > 0:
		p.states[i] = string(intenttype.StateWaiting)
		reason = cat(lit("recorded; waits for "), join(found.waits, ", and "))
		keyReason = cat(reason, lit(", and "), keyWait)
	default:
		reason = lit("recorded")
		keyReason = cat(lit("recorded; waits for "), keyWait)
	}
	if key != "" && len(found.why) == 0 {
		// Checked against the intents recorded before only when nothing
		// of the batch holds it already.
		p.keyChecks[i] = !held[key]
		held[key] = true
	}
	p.templated[i] = keyReason.refs
	p.reasons[i], p.keyReasons[i] = reason.text(keyReason.refs), keyReason.text(keyReason.refs)
}

// phrase is a piece of a reason: its text, and the same as a format()
// template whose references to intents of the batch (%N$s) the statement
// fills with their ids; refs says whether it has any.
type phrase struct {
	raw, tmpl string
	refs      bool
}

func lit(s string) phrase { return phrase{raw: s, tmpl: strings.ReplaceAll(s, "%", "%%")} }

// batchRef is the id of the batch's ord-th intent (from 1).
func batchRef(ord int) phrase { return phrase{tmpl: "%" + strconv.Itoa(ord) + "$s", refs: true} }

func cat(ps ...phrase) phrase {
	var out phrase
	for _, p := range ps {
		out.raw, out.tmpl, out.refs = out.raw+p.raw, out.tmpl+p.tmpl, out.refs || p.refs
	}
	return out
}

func join(ps []phrase, sep string) phrase {
	var out phrase
	for i, p := range ps {
		if i > 0 {
			out = cat(out, lit(sep))
		}
		out = cat(out, p)
	}
	return out
}

// text is the phrase as sent: a template when templated, else its text.
func (p phrase) text(templated bool) string {
	if templated {
		return p.tmpl
	}
	return p.raw
}

// predecessorsFirst returns the positions of ib's ordered intents so that
// each comes after the intents of the batch it names, otherwise keeping
// their order: an intent is decided from its predecessors' states, and the
// intents of an ordering key are numbered in this order, so a key never
// makes an intent wait for one that comes after it (intents of earlier
// batches have lower numbers already). The caller refused cycles; were
// there one, its intents would keep their order.
func (ib *InsertBatch) predecessorsFirst(at map[string]int) []int {
	out := make([]int, 0, len(ib.orders))
	state := make([]byte, ib.Len()) // 0 unseen, 1 visiting, 2 placed
	var place func(i int)
	place = func(i int) {
		if state[i] != 0 {
			return
		}
		state[i] = 1
		for _, a := range ib.orders[i].afterOrNone() {
			if j, ok := at[a.Key]; ok && a.Stored == nil && ib.orders[j] != nil {
				place(j)
			}
		}
		state[i] = 2
		out = append(out, i)
	}
	for i, o := range ib.orders {
		if o != nil {
			place(i)
		}
	}
	return out
}

// jsonText is m as a JSON object.
func jsonText(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, err := json.Marshal(m)
	if err != nil {
		// A map of strings always marshals.
		panic(fmt.Sprintf("intentstore: encode %v: %v", m, err))
	}
	return string(b)
}

// jsonbText is m as Postgres prints a jsonb object of strings (keys
// shorter first, then in byte order; a space after each colon and comma),
// so a reason written here reads as one Postgres wrote.
func jsonbText(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	var sb strings.Builder
	sb.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(jsonString(k))
		sb.WriteString(": ")
		sb.WriteString(jsonString(m[k]))
	}
	sb.WriteByte('}')
	return sb.String()
}

func jsonString(s string) string {
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(sb.String(), "\n")
}

// queueInsertOrdered adds to b the statements that store ib's intents when
// some are ordered: the ordering keys' numbers, then the intents with
// their events and dependencies, those that go at once queued, then the
// count of those recorded cancelled.
func (s *Store) queueInsertOrdered(b *pgx.Batch, ib *InsertBatch) {
	p := ib.plan()
	if len(p.bumpKeys) > 0 {
		bumpOrderingKeysQ.queue(b, pgx.NamedArgs{"keys": p.bumpKeys, "counts": p.bumpCounts})
	}
	insertOrderedQ.queue(b, pgx.NamedArgs{
		"keys": ib.keys, "kinds": ib.kinds, "providers": ib.providers, "names": ib.names,
		"payloads": ib.payloads, "references": ib.refs, "consumers": ib.consumers,
		"message_ids": ib.messageIDs, "actors": ib.actors,
		"trace_parents": ib.traceParents, "trace_states": ib.traceStates,
		"states": p.states, "key_checks": p.keyChecks, "waiting_for": p.waitingFor, "fills": p.fills,
		"ordering_keys": p.orderKeys, "seq_back": p.seqBack, "reasons": p.reasons, "key_reasons": p.keyReasons,
		"templated": p.templated, "followed": p.followed,
		"dep_ords": p.depOrds, "dep_after_ords": p.depAfterOrd, "dep_after_ids": p.depAfterIDs,
		"dep_fills": p.depFills, "dep_done": p.depDone,
	}).Query(ib.collectIDs)
	if len(p.cancelled) > 0 {
		b.Queue(countRecordedFinishedSQL, pgx.NamedArgs{"keys": p.cancelled})
	}
}

// releaseTx decides, in tx, after statements that may have finished the
// intents of ids (a group of settlements, an operator's action), what
// waits for them: the cancellations down the chain of what comes after one
// that failed or was cancelled, then, under the locks of the ordering keys
// concerned, the release of every waiting intent that nothing holds any
// longer, to the queue. Its statements read the intents' states
// when they run, so they are right whatever the earlier statements did (a
// guard that no longer held), however many settlements share the
// transaction, and when they are run again (they find nothing left to do).
//
// Each statement has its own snapshot, and that is the point of each
// boundary. A cancellation of a waiting intent may wait for a recorder that
// holds its row to record an intent after it: the cancellation then goes
// on, but its statement's snapshot cannot show the new dependency, so the
// intents cancelled that others come after (has_dependents, set by the
// recorder) are cascaded again by a statement of their own, until a pass
// cancels none of them. The keys are locked after the cancellations
// (intents before keys, the order every writer takes), and the release
// reads the keys' intents after the lock, so it sees every intent a
// recorder committed behind it.
func (s *Store) releaseTx(ctx context.Context, tx pgx.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	var followed []int64
	s.queueCascade(b, ids, &followed)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if err := s.cascadeFurther(ctx, tx, followed); err != nil {
		return err
	}
	b = &pgx.Batch{}
	s.queueReleaseUnderLocks(b, ids)
	return tx.SendBatch(ctx, b).Close()
}

// queueCascade adds to b one pass of the cascade over the finished
// intents of ids; once b has run, *followed holds the intents it cancelled
// that others come after, for the next pass.
func (s *Store) queueCascade(b *pgx.Batch, ids []int64, followed *[]int64) {
	cascadeQ.queue(b, cascadeEdge.args(pgx.NamedArgs{
		"ids": ids, "why_after": whyCancelledAfter, "why_no_ref": whyCancelledNoRef,
	})).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(followed); err != nil {
			return fmt.Errorf("intentstore: cancel what comes after intents %v: %w", ids, err)
		}
		return nil
	})
}

// cascadeFurther runs, in tx, a pass of the cascade over followed, a
// statement of its own (so a snapshot that shows what a recorder committed
// while the last pass waited for it), and so on until a pass cancels no
// intent that others come after.
func (s *Store) cascadeFurther(ctx context.Context, tx pgx.Tx, followed []int64) error {
	for len(followed) > 0 {
		b := &pgx.Batch{}
		pass := followed
		s.queueCascade(b, pass, &followed)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	return nil
}

// queueReleaseUnderLocks adds to b, after the cascade, the lock of the
// ordering keys concerned and the release under it (see releaseTx).
func (s *Store) queueReleaseUnderLocks(b *pgx.Batch, ids []int64) {
	lockReleasedKeysQ.queue(b, pgx.NamedArgs{"ids": ids})
	releaseQ.queue(b, releaseEdge.args(pgx.NamedArgs{
		"ids": ids, "why_after": whyReleasedAfter, "why_turn": whyReleasedTurn,
	}))
}

// The statements of ordering, beside the Go that decides and queues them.

// lockPredecessorsSQL: see lockPredecessors. In id order, as every writer
// that locks several intents takes them; a locking read returns each row
// as it is once locked (a settlement that committed while it waited
// shows), which a read after it in the same statement would not.
const lockPredecessorsSQL = `
SELECT idempotency_key, id, state, coalesce(provider_ref, '')
FROM outbox_intents
WHERE idempotency_key = ANY(@keys::text[])
ORDER BY id
FOR NO KEY UPDATE`

// markPredecessorsSQL marks the unfinished predecessors lockPredecessorsSQL
// locked (a finished one has nothing left to release: the recorder decides
// the new intent from its state).
const markPredecessorsSQL = `
UPDATE outbox_intents SET has_dependents = true
WHERE idempotency_key = ANY(@keys::text[]) AND NOT has_dependents AND finished_at IS NULL`

// bumpOrderingKeysSQL locks the rows of a batch's ordering keys (sorted:
// recorders of several keys cannot deadlock) and reserves each key's
// numbers for its intents of the batch. Its lock serialises the recorders
// of one key, and the releases of its next intent; it is held until the
// recording transaction ends.
const bumpOrderingKeysSQL = `
INSERT INTO outbox_ordering_keys AS o (ordering_key, last_seq)
SELECT ordering_key, n
FROM unnest(@keys::text[], @counts::bigint[]) AS t(ordering_key, n)
ORDER BY ordering_key
ON CONFLICT (ordering_key) DO UPDATE SET last_seq = o.last_seq + EXCLUDED.last_seq`

// insertOrderedSQL stores a batch that holds ordered intents, as
// recordPlan decided them, with their "recorded" events and their
// dependency rows, those that go at once queued (as insertIntentsSQL
// queues every intent). Its snapshot is taken after
// bumpOrderingKeysSQL locked the keys, so an intent of a key recorded
// before by another transaction is seen: while one is unfinished, an
// intent of the key that would go waits instead. The ids are drawn from
// the column's sequence first, so a reason naming an intent of the same
// batch can name its id (format's %N$s, N its position).
const insertOrderedSQL = `
WITH input AS (
    SELECT nextval(pg_get_serial_sequence('outbox_intents', 'id')) AS id, t.*
    FROM unnest(@keys::text[], @kinds::text[], @providers::text[], @names::text[], @payloads::jsonb[],
                @references::text[], @consumers::text[], @message_ids::text[], @actors::text[],
                @trace_parents::text[], @trace_states::text[],
                @states::text[], @key_checks::boolean[], @waiting_for::integer[], @fills::jsonb[],
                @ordering_keys::text[], @seq_back::bigint[], @reasons::text[], @key_reasons::text[],
                @templated::boolean[], @followed::boolean[])
        WITH ORDINALITY AS t(idempotency_key, kind, provider, name, payload, reference, consumer, message_id, actor,
             trace_parent, trace_state, state, key_check, waiting_for, fill, ordering_key, seq_back, reason,
             key_reason, templated, followed, ord)
),
batch AS (
    SELECT array_agg(id::text ORDER BY ord) AS ids FROM input
),
gated AS (
    SELECT i.*, i.key_check AND EXISTS (
        SELECT 1 FROM outbox_intents o WHERE o.ordering_key = i.ordering_key AND o.finished_at IS NULL) AS gated
    FROM input i
),
decided AS (
    SELECT g.*,
        CASE WHEN g.gated THEN 'waiting' ELSE g.state END AS recorded_state,
        CASE WHEN NOT g.templated THEN CASE WHEN g.gated THEN g.key_reason ELSE g.reason END
             ELSE format(CASE WHEN g.gated THEN g.key_reason ELSE g.reason END, VARIADIC b.ids) END AS recorded_reason
    FROM gated g CROSS JOIN batch b
),
stored AS (
    INSERT INTO outbox_intents (id, idempotency_key, kind, provider, name, payload, reference, consumer, message_id,
                                trace_parent, trace_state, state, waiting_for, ordering_key, key_seq,
                                finished_at, last_error, has_dependents, queued)
    OVERRIDING SYSTEM VALUE
    SELECT d.id, d.idempotency_key, d.kind, d.provider, d.name,
        CASE WHEN d.fill = '{}' THEN d.payload ELSE d.payload || d.fill END,
        d.reference, d.consumer, d.message_id, d.trace_parent, d.trace_state,
        d.recorded_state, d.waiting_for, d.ordering_key, k.last_seq - d.seq_back,
        CASE WHEN d.recorded_state = 'cancelled' THEN now() END,
        CASE WHEN d.recorded_state = 'cancelled' THEN d.recorded_reason END,
        d.followed, d.recorded_state = 'pending'
    FROM decided d
    LEFT JOIN outbox_ordering_keys k ON k.ordering_key = d.ordering_key
    ORDER BY d.ord
    RETURNING id, idempotency_key
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, to_state, reason)
    SELECT id, actor, recorded_state, recorded_reason FROM decided
),
dependencies AS (
    INSERT INTO outbox_intent_dependencies (intent_id, after_id, fill, satisfied)
    SELECT i.id, coalesce(p.id, dp.after_id), dp.fill, dp.done
    FROM unnest(@dep_ords::bigint[], @dep_after_ords::bigint[], @dep_after_ids::bigint[], @dep_fills::jsonb[],
                @dep_done::boolean[]) AS dp(ord, after_ord, after_id, fill, done)
    JOIN input i ON i.ord = dp.ord
    LEFT JOIN input p ON p.ord = dp.after_ord
)
SELECT id, idempotency_key FROM stored ORDER BY id`

// The release statements run in every transaction that finishes intents,
// most of which nothing waits for. Every row they touch is found through an
// array of ids (id = ANY(ARRAY(...)), after_id = ANY(...)), never by a join
// of a CTE to a table: a generic plan may make such a join a scan of the
// table, which is milliseconds a settlement once the table is large, for
// nothing.

// cascadeSQL cancels, for the intents of @ids that are finished, each
// waiting intent that comes after one that failed or was cancelled, or
// after one that succeeded without the provider reference a field of it
// fills from, and so on down the chain; marks every dependency on a
// finished intent satisfied (once: a dependency counts once); and, for an
// intent that comes after one that succeeded, counts the dependency down
// and fills its fields. A dependency is satisfied exactly once, when its
// predecessor finishes, so waiting_for (the unsatisfied ones) never goes
// below zero. It returns the intents it cancelled that others come after,
// as their rows are once locked (see releaseTx).
const cascadeSQL = `
WITH RECURSIVE finished AS (
    SELECT id, idempotency_key, state, provider_ref
    FROM outbox_intents
    WHERE id = ANY(@ids::bigint[]) AND state IN ` + finishedSQL + `
),
doomed (intent_id, why) AS (
    SELECT d.intent_id, CASE WHEN f.state <> 'succeeded' THEN format(@why_after::text, f.id, f.idempotency_key, f.state)
                             ELSE format(@why_no_ref::text, f.id, f.idempotency_key, d.fill) END
    FROM finished f
    JOIN outbox_intent_dependencies d ON d.after_id = f.id AND NOT d.satisfied
    JOIN outbox_intents s ON s.id = d.intent_id AND s.state = @from::text
    WHERE f.state <> 'succeeded' OR (d.fill <> '{}' AND f.provider_ref IS NULL)
  UNION
    SELECT d.intent_id, format(@why_after::text, c.intent_id, p.idempotency_key, @to::text)
    FROM doomed c
    JOIN outbox_intents p ON p.id = c.intent_id
    JOIN outbox_intent_dependencies d ON d.after_id = c.intent_id AND NOT d.satisfied
    JOIN outbox_intents s ON s.id = d.intent_id AND s.state = @from::text
),
cancel AS (
    SELECT DISTINCT ON (intent_id) intent_id, why FROM doomed ORDER BY intent_id, why
),
satisfied AS (
    UPDATE outbox_intent_dependencies d
    SET satisfied = true
    WHERE d.after_id = ANY(ARRAY(SELECT id FROM finished UNION SELECT intent_id FROM cancel)) AND NOT d.satisfied
    RETURNING d.intent_id, d.after_id, d.fill
),
cancelled AS (
    UPDATE outbox_intents s
    SET state = @to::text, last_error = c.why, updated_at = now(), finished_at = now(),
        waiting_for = s.waiting_for - (SELECT count(*) FROM satisfied e WHERE e.intent_id = s.id)
    FROM cancel c
    WHERE s.id = ANY(ARRAY(SELECT intent_id FROM cancel)) AND s.id = c.intent_id AND s.state = @from::text
    RETURNING s.id, c.why, s.has_dependents
),
filled AS (
    SELECT e.intent_id, count(DISTINCT e.after_id) AS n,
        coalesce(jsonb_object_agg(fl.field, f.provider_ref) FILTER (WHERE fl.field IS NOT NULL), '{}') AS fill
    FROM satisfied e
    JOIN finished f ON f.id = e.after_id AND f.state = 'succeeded'
    LEFT JOIN LATERAL jsonb_object_keys(e.fill) AS fl(field) ON true
    WHERE e.intent_id NOT IN (SELECT intent_id FROM cancel)
    GROUP BY e.intent_id
),
counted AS (
    UPDATE outbox_intents s
    SET waiting_for = s.waiting_for - g.n,
        payload = CASE WHEN g.fill = '{}' THEN s.payload ELSE s.payload || g.fill END
    FROM filled g
    WHERE s.id = ANY(ARRAY(SELECT intent_id FROM filled)) AND s.id = g.intent_id AND s.state = @from::text
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, @actor::text, @from::text, @to::text, why FROM cancelled
)
SELECT coalesce(array_agg(id) FILTER (WHERE has_dependents), '{}') FROM cancelled`

// reachedCTE is the intents a release looks at: the finished intents of
// @ids, what comes after each, and, through those that are finished (a
// chain just cancelled), what comes after them; and keys, the ordering
// keys among them, whose next turn may have come.
const reachedCTE = `reached (id) AS (
    SELECT id FROM outbox_intents WHERE id = ANY(@ids::bigint[]) AND state IN ` + finishedSQL + `
  UNION
    SELECT d.intent_id
    FROM reached r
    JOIN outbox_intents i ON i.id = r.id AND i.state IN ` + finishedSQL + `
    JOIN outbox_intent_dependencies d ON d.after_id = r.id
),
keys AS (
    SELECT DISTINCT ordering_key FROM outbox_intents
    WHERE id = ANY(ARRAY(SELECT id FROM reached)) AND ordering_key IS NOT NULL
)`

// lockReleasedKeysSQL locks the rows of the ordering keys of the reached
// intents, in a fixed order, for releaseSQL, which reads each key's
// intents in a snapshot taken after the lock.
const lockReleasedKeysSQL = `
WITH RECURSIVE ` + reachedCTE + `
SELECT 1 FROM outbox_ordering_keys
WHERE ordering_key = ANY(ARRAY(SELECT ordering_key FROM keys))
ORDER BY ordering_key
FOR UPDATE`

// releaseSQL moves to pending, queued, each waiting intent that nothing
// holds any longer: no predecessor left and no earlier unfinished intent
// of its key, among what comes after a succeeded intent of @ids and the
// next unfinished intent of each key reached; and wakes the dispatchers if
// it released one.
const releaseSQL = `
WITH RECURSIVE ` + reachedCTE + `,
turns AS (
    SELECT h.id, format(@why_turn::text, k.ordering_key) AS why, 2 AS rank
    FROM keys k
    CROSS JOIN LATERAL (
        SELECT id FROM outbox_intents
        WHERE ordering_key = k.ordering_key AND finished_at IS NULL
        ORDER BY key_seq LIMIT 1) h
),
freed AS (
    SELECT d.intent_id AS id, format(@why_after::text, f.id, f.idempotency_key) AS why, 1 AS rank
    FROM outbox_intents f
    JOIN outbox_intent_dependencies d ON d.after_id = f.id
    WHERE f.id = ANY(@ids::bigint[]) AND f.state = 'succeeded'
),
candidates AS (
    SELECT DISTINCT ON (id) id, why
    FROM (SELECT * FROM freed UNION ALL SELECT * FROM turns) c
    ORDER BY id, rank, why
),
released AS (
    UPDATE outbox_intents me
    SET state = @to::text, queued = true, updated_at = now()
    FROM candidates c
    WHERE me.id = ANY(ARRAY(SELECT id FROM candidates)) AND me.id = c.id
      AND me.state = @from::text AND me.waiting_for = 0
      AND (me.ordering_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM outbox_intents o
          WHERE o.ordering_key = me.ordering_key AND o.key_seq < me.key_seq AND o.finished_at IS NULL))
    RETURNING me.id, c.why
),
events AS (
    INSERT INTO outbox_events (intent_id, actor, from_state, to_state, reason)
    SELECT id, @actor::text, @from::text, @to::text, why FROM released
),
notified AS (
    SELECT pg_notify(current_schema() || '.` + QueueChannel + `', '')
    FROM (SELECT 1 FROM released LIMIT 1) x
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM notified)`
