package intents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers"
)

// After names an intent that must succeed before the one that lists it is
// performed (Intent.After), and the payload fields its result fills. Set
// exactly one of Name and Key.
//
// The dispatcher performs the intent only after every intent it comes after
// succeeded; it waits (in state waiting, with no attempt made) while one is
// pending, dispatching or in_doubt. If one fails or is cancelled, the intent
// is never performed: it is cancelled by the dispatcher, with a reason that
// names that intent and its state, in the same transaction. An intent
// recorded after one that has already failed or been cancelled is recorded
// cancelled, with that reason.
type After struct {
	// Name names an intent recorded in the same call: of the same message in
	// a consumer, or passed to the same RecordTx.
	Name string `json:"name,omitempty"`
	// Key names an intent recorded before, in an earlier transaction or
	// earlier in this one (in a ConsumeBatch, by an earlier message of the
	// batch), by its idempotency key (Recorded.Key).
	Key string `json:"key,omitempty"`
	// Fill maps a top-level payload field to the result of this intent that
	// fills it when it succeeds. The only result is ResultProviderRef, the
	// provider's reference for the effect (a Stripe PaymentIntent's id):
	// {"payment_intent": "provider_ref"} makes a refund refund the charge it
	// comes after. A filled field is validated as the provider's placeholder
	// (providers.Filler) when recorded, and set when the predecessor
	// succeeds, replacing any value recorded in it.
	Fill map[string]string `json:"fill,omitempty"`
}

// ResultProviderRef is the result After.Fill can take: the predecessor's
// provider reference.
const ResultProviderRef = "provider_ref"

// MaxOrderingKeyLength bounds Intent.OrderingKey, in bytes.
const MaxOrderingKeyLength = 200

// The causes an *OrderError wraps.
var (
	// ErrUnknownPredecessor: After names no intent of the call, or no
	// intent recorded before.
	ErrUnknownPredecessor = errors.New("no such intent")
	// ErrOrderCycle: the intents of one call come after each other in a
	// circle, or an intent comes after itself.
	ErrOrderCycle = errors.New("intents would wait for each other forever")
	// ErrBadOrder: an After, its Fill or an OrderingKey is malformed.
	ErrBadOrder = errors.New("bad order")
)

// OrderError says which After of an intent was refused. It is the Err of
// an *IntentError (which names the intent) and wraps ErrUnknownPredecessor,
// ErrOrderCycle or ErrBadOrder.
type OrderError struct {
	// After is the position in Intent.After, or -1 for the OrderingKey.
	After int
	// Ref names the reference: `name "charge"`, `key "orders:m1"`.
	Ref    string
	Reason string
	Err    error
}

func (e *OrderError) Error() string {
	where := "ordering_key"
	if e.After >= 0 {
		where = fmt.Sprintf("after[%d]", e.After)
	}
	if e.Ref != "" {
		where += " (" + e.Ref + ")"
	}
	return where + ": " + e.Reason
}

// Unwrap returns the cause.
func (e *OrderError) Unwrap() error { return e.Err }

func refOf(a After) string {
	if a.Name != "" {
		return fmt.Sprintf("name %q", a.Name)
	}
	return fmt.Sprintf("key %q", a.Key)
}

// checkOrder checks in's After and OrderingKey on their own, and returns
// the payload with each filled field replaced by the provider's placeholder,
// for the provider to validate.
func (c *Client) checkOrder(in Intent, payload []byte) ([]byte, error) {
	if len(in.OrderingKey) > MaxOrderingKeyLength || !printable(in.OrderingKey) {
		return nil, &OrderError{After: -1, Reason: fmt.Sprintf("must be at most %d printable characters", MaxOrderingKeyLength), Err: ErrBadOrder}
	}
	var fills map[string]json.RawMessage
	firstFill := -1
	for i, a := range in.After {
		bad := func(reason string) error {
			return &OrderError{After: i, Ref: refOf(a), Reason: reason, Err: ErrBadOrder}
		}
		switch {
		case (a.Name == "") == (a.Key == ""):
			return nil, &OrderError{After: i, Reason: "set exactly one of name and key", Err: ErrBadOrder}
		case a.Name != "" && (len(a.Name) > MaxNameLength || !namePattern.MatchString(a.Name)):
			return nil, bad(fmt.Sprintf("name must be 1 to %d letters, digits, '_', '.' or '-'", MaxNameLength))
		case a.Key != "" && (len(a.Key) > intenttype.MaxKeyLength || !printable(a.Key)):
			return nil, bad(fmt.Sprintf("key must be 1 to %d printable characters", intenttype.MaxKeyLength))
		}
		for _, field := range sortedKeys(a.Fill) {
			if a.Fill[field] != ResultProviderRef {
				return nil, bad(fmt.Sprintf("fill.%s: unknown result %q (the result is %q)", field, a.Fill[field], ResultProviderRef))
			}
			if field == "" || !printable(field) {
				return nil, bad(fmt.Sprintf("fill: field %q must be a payload field's name", field))
			}
			if fills == nil {
				fills, firstFill = map[string]json.RawMessage{}, i
			}
			ph, err := c.placeholder(in.Kind, field)
			if err != nil {
				return nil, bad("fill." + field + ": " + err.Error())
			}
			fills[field] = ph
		}
	}
	if fills == nil {
		return payload, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(payload, &obj); err != nil || obj == nil {
		return nil, &OrderError{After: firstFill, Ref: refOf(in.After[firstFill]), Reason: "fill needs a payload that is a JSON object", Err: ErrBadOrder}
	}
	for f, v := range fills {
		obj[f] = v
	}
	return json.Marshal(obj)
}

func (c *Client) placeholder(kind, field string) (json.RawMessage, error) {
	p, err := c.config.Providers.ForKind(kind)
	if err != nil {
		return nil, err
	}
	f, ok := p.(providers.Filler)
	if !ok {
		return json.Marshal(providers.FillPlaceholder)
	}
	ph, ok := f.FillPlaceholder(kind, field)
	if !ok {
		return nil, fmt.Errorf("%s cannot fill this field of %s", p.Name(), kind)
	}
	return ph, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// resolveOrder turns the After of the call's intents (keyed already) into
// keys, refuses unknown names, references to itself and cycles, looks up
// the keys of intents recorded before in tx, and sets each intent's order.
// earlier, when not nil, reports the keys of intents recorded earlier in
// tx but not written yet (the earlier messages of a ConsumeBatch): those
// are known too, and written before the intents that come after them.
func resolveOrder(ctx context.Context, tx pgx.Tx, prepared []preparedIntent, earlier func(key string) bool) error {
	if !slices.ContainsFunc(prepared, func(p preparedIntent) bool { return len(p.after) > 0 || p.orderingKey != "" }) {
		return nil
	}
	r := newOrderResolver(prepared)
	for i := range prepared {
		if err := r.resolve(i); err != nil {
			return err
		}
	}
	if err := r.refuseCycle(); err != nil {
		return err
	}
	if earlier != nil {
		r.external = slices.DeleteFunc(r.external, earlier)
	}
	return r.checkExternal(ctx, tx)
}

// orderResolver resolves the After of one call's intents.
type orderResolver struct {
	prepared []preparedIntent
	byName   map[string]int // -1: several intents have it
	byKey    map[string]int
	// local[i] lists the call's intents intent i comes after.
	local [][]int
	// external are the keys named that are not the call's, and
	// externalOf the intents that name each.
	external   []string
	externalOf map[string][]int
}

func newOrderResolver(prepared []preparedIntent) *orderResolver {
	r := &orderResolver{prepared: prepared, byName: make(map[string]int, len(prepared)), byKey: make(map[string]int, len(prepared)),
		local: make([][]int, len(prepared)), externalOf: map[string][]int{}}
	for i, p := range prepared {
		if _, dup := r.byName[p.name]; dup && p.name != "" {
			r.byName[p.name] = -1
		} else if p.name != "" {
			r.byName[p.name] = i
		}
		r.byKey[p.key] = i
	}
	return r
}

func (r *orderResolver) fail(p preparedIntent, err *OrderError) error {
	return &IntentError{Index: p.index, Kind: p.kind, Name: p.name, Err: err}
}

// resolve sets intent i's order: each After by key (a name resolved in the
// call), one entry per predecessor with their fills merged.
func (r *orderResolver) resolve(i int) error {
	p := &r.prepared[i]
	order := &intentstore.Order{OrderingKey: p.orderingKey}
	at := map[string]int{} // predecessor key -> position in order.After
	for j, a := range p.after {
		key, err := r.keyOf(*p, j, a)
		if err != nil {
			return err
		}
		if k, ok := r.byKey[key]; ok {
			if !slices.Contains(r.local[i], k) {
				r.local[i] = append(r.local[i], k)
			}
		} else if !slices.Contains(r.externalOf[key], i) {
			r.external = append(r.external, key)
			r.externalOf[key] = append(r.externalOf[key], i)
		}
		if n, ok := at[key]; ok {
			maps.Copy(order.After[n].Fill, a.Fill)
			continue
		}
		at[key] = len(order.After)
		order.After = append(order.After, intentstore.OrderAfter{Key: key, Fill: maps.Clone(a.Fill)})
		if order.After[len(order.After)-1].Fill == nil {
			order.After[len(order.After)-1].Fill = map[string]string{}
		}
	}
	p.order = order
	return nil
}

// keyOf is the key of p's j-th After, a: its key, or that of the intent of
// the call it names. An intent cannot come after itself.
func (r *orderResolver) keyOf(p preparedIntent, j int, a After) (string, error) {
	key := a.Key
	if a.Name != "" {
		k, ok := r.byName[a.Name]
		if !ok {
			return "", r.fail(p, &OrderError{After: j, Ref: refOf(a), Reason: "no intent of this call has this name", Err: ErrUnknownPredecessor})
		}
		if k < 0 {
			return "", r.fail(p, &OrderError{After: j, Ref: refOf(a), Reason: "several intents of this call have this name: name them apart, or use their keys", Err: ErrBadOrder})
		}
		key = r.prepared[k].key
	}
	if key == p.key {
		return "", r.fail(p, &OrderError{After: j, Ref: refOf(a), Reason: "an intent cannot come after itself", Err: ErrOrderCycle})
	}
	return key, nil
}

// refuseCycle refuses the call's intents if they would wait for each other
// forever, naming the cycle.
func (r *orderResolver) refuseCycle() error {
	cycle := findCycle(r.local)
	if cycle == nil {
		return nil
	}
	names := make([]string, len(cycle))
	for n, i := range cycle {
		names[n] = label(r.prepared[i])
	}
	p := r.prepared[cycle[0]]
	j := slices.IndexFunc(p.after, func(a After) bool {
		next := r.prepared[cycle[1]]
		return a.Name == next.name && a.Name != "" || a.Key == next.key
	})
	return r.fail(p, &OrderError{After: j, Ref: refOf(p.after[max(j, 0)]),
		Reason: "the intents would wait for each other forever: " + strings.Join(names, " after "), Err: ErrOrderCycle})
}

// checkExternal refuses a key named that no intent has. The stored
// predecessors are locked and read later, all of a batch at once, just
// before the intents are stored (intentstore.InsertBatch.LockPredecessors).
func (r *orderResolver) checkExternal(ctx context.Context, tx pgx.Tx) error {
	if len(r.external) == 0 {
		return nil
	}
	known, err := intentstore.KnownKeys(ctx, tx, r.external)
	if err != nil {
		return fmt.Errorf("intents: %w", err)
	}
	for _, key := range r.external {
		if known[key] {
			continue
		}
		p := r.prepared[r.externalOf[key][0]]
		j := slices.IndexFunc(p.after, func(a After) bool { return a.Key == key })
		return r.fail(p, &OrderError{After: j, Ref: fmt.Sprintf("key %q", key),
			Reason: "no intent with this key was recorded before (nor by this call)", Err: ErrUnknownPredecessor})
	}
	return nil
}

func label(p preparedIntent) string {
	if p.name != "" {
		return fmt.Sprintf("%q", p.name)
	}
	return fmt.Sprintf("%q", p.key)
}

// findCycle returns a cycle of after (i comes after after[i]...) as the
// intents along it, the first repeated at the end; nil when there is none.
func findCycle(after [][]int) []int {
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]int, len(after))
	var path []int
	var visit func(i int) []int
	visit = func(i int) []int {
		state[i] = onPath
		path = append(path, i)
		for _, j := range after[i] {
			switch state[j] {
			case onPath:
				start := slices.Index(path, j)
				return append(slices.Clone(path[start:]), j)
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[i] = done
		return nil
	}
	for i := range after {
		if state[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}
