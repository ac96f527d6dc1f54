package audit

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// cursorPrefix versions the cursor's encoding.
const cursorPrefix = "v1:"

// Validate reports the first problem with f as a *FieldError wrapping
// ErrInvalidFilter, as List would, without touching the database: an
// unknown state, an empty or overlong kind, provider or string field, a
// Limit outside 0..MaxPageSize, CreatedUntil not after CreatedSince, or a
// Cursor that List did not produce.
func (f Filter) Validate() error {
	_, err := f.normalize()
	return err
}

// normalized is a validated Filter in the form listIntentsSQL takes.
type normalized struct {
	states, kinds, providerNames []string
	consumer, messageID, ref     *string
	since, until                 *time.Time
	after                        *int64
	limit                        int
}

func (f Filter) normalize() (normalized, error) {
	var n normalized
	for _, s := range f.States {
		if !s.Valid() {
			return n, filterError("States", "unknown state %q (known: %s)", truncate(string(s), 40), stateNames())
		}
		n.states = append(n.states, string(s))
	}
	var err error
	if n.kinds, err = nonEmptyStrings("Kinds", f.Kinds); err != nil {
		return n, err
	}
	if n.providerNames, err = nonEmptyStrings("Providers", f.Providers); err != nil {
		return n, err
	}
	for _, field := range []struct {
		name  string
		value string
		out   **string
	}{{"Consumer", f.Consumer, &n.consumer}, {"MessageID", f.MessageID, &n.messageID}, {"Reference", f.Reference, &n.ref}} {
		if field.value == "" {
			continue
		}
		if err := checkString(field.name, field.value); err != nil {
			return n, err
		}
		v := field.value
		*field.out = &v
	}
	if !f.CreatedSince.IsZero() {
		n.since = &f.CreatedSince
	}
	if !f.CreatedUntil.IsZero() {
		n.until = &f.CreatedUntil
	}
	if n.since != nil && n.until != nil && !f.CreatedUntil.After(f.CreatedSince) {
		return n, filterError("CreatedUntil", "%s is not after CreatedSince %s", f.CreatedUntil.Format(time.RFC3339), f.CreatedSince.Format(time.RFC3339))
	}
	switch {
	case f.Limit == 0:
		n.limit = DefaultPageSize
	case f.Limit < 1 || f.Limit > MaxPageSize:
		return n, filterError("Limit", "must be between 1 and %d, got %d", MaxPageSize, f.Limit)
	default:
		n.limit = f.Limit
	}
	if f.Cursor != "" {
		id, err := decodeCursor(f.Cursor)
		if err != nil {
			return n, err
		}
		n.after = &id
	}
	return n, nil
}

func nonEmptyStrings(field string, values []string) ([]string, error) {
	for _, v := range values {
		if v == "" {
			return nil, filterError(field, "contains an empty value")
		}
		if err := checkString(field, v); err != nil {
			return nil, err
		}
	}
	if len(values) == 0 {
		return nil, nil
	}
	return values, nil
}

func checkString(field, v string) error {
	if len(v) > maxFilterString {
		return filterError(field, "longer than %d bytes", maxFilterString)
	}
	if !printable(v) {
		return filterError(field, "contains control characters or invalid UTF-8")
	}
	return nil
}

func stateNames() string {
	names := make([]string, len(intenttype.States))
	for i, s := range intenttype.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func encodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(id, 10)))
}

func decodeCursor(c string) (int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if rest, ok := strings.CutPrefix(string(raw), cursorPrefix); ok {
			if id, err := strconv.ParseInt(rest, 10, 64); err == nil && id > 0 {
				return id, nil
			}
		}
	}
	return 0, filterError("Cursor", "not a cursor from a previous page")
}

// List returns the intents matching f, newest first (by id), at most
// f.Limit of them, with payloads redacted. Page.NextCursor, passed back as
// f.Cursor with the same filter, continues with older intents: pages never
// overlap and never skip an intent, even while new ones are recorded (those
// appear only on a fresh first page). A bad filter returns a *FieldError
// wrapping ErrInvalidFilter.
func (s *Store) List(ctx context.Context, f Filter) (Page, error) {
	n, err := f.normalize()
	if err != nil {
		return Page{}, err
	}
	rows, err := s.pool.Query(ctx, listQuery(n.states), nilIfEmpty(n.states), nilIfEmpty(n.kinds), nilIfEmpty(n.providerNames),
		n.consumer, n.messageID, n.ref, n.since, n.until, n.after, n.limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("audit: list intents: %w", err)
	}
	list, err := pgx.CollectRows(rows, scanIntent)
	if err != nil {
		return Page{}, fmt.Errorf("audit: list intents: %w", err)
	}
	page := Page{Intents: list}
	if len(list) > n.limit {
		page.Intents = list[:n.limit]
		page.NextCursor = encodeCursor(page.Intents[n.limit-1].ID)
	}
	for i := range page.Intents {
		s.redact(&page.Intents[i])
	}
	return page, nil
}

// listQuery is List's query for a filter of states.
func listQuery(states []string) string {
	switch {
	case onlyUnfinished(states) && !slices.ContainsFunc(states, queueable):
		return listUnqueuedSQL
	case onlyUnfinished(states):
		return listUnfinishedSQL
	}
	return listIntentsSQL
}

// nilIfEmpty sends NULL, not an empty array, for a filter that is not set.
func nilIfEmpty(v []string) any {
	if len(v) == 0 {
		return nil
	}
	return v
}

func scanIntent(row pgx.CollectableRow) (intenttype.Intent, error) {
	var in intenttype.Intent
	var payload []byte
	err := row.Scan(&in.ID, &in.IdempotencyKey, &in.Kind, &in.Provider, &in.Name, &in.Consumer, &in.MessageID,
		&in.Reference, &payload, &in.State, &in.AttemptCount, &in.ProviderRef, &in.LastError,
		&in.CreatedAt, &in.UpdatedAt, &in.FinishedAt, &in.ProviderKey, &in.Namespace, &in.KeyGeneration,
		&in.MayHaveActed, &in.RecheckAt, &in.OrderingKey)
	in.Payload = payload
	return in, err
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// intentColumns is what every query returning intents selects, in the order
// scanIntent reads.
const intentColumns = `id, idempotency_key, kind, provider, name, coalesce(consumer, ''), coalesce(message_id, ''),
    coalesce(reference, ''), payload, state, attempt_count, coalesce(provider_ref, ''), coalesce(last_error, ''),
    created_at, updated_at, finished_at, coalesce(provider_key, ''), coalesce(key_namespace, ''), key_generation,
    may_have_acted, recheck_at, coalesce(ordering_key, '')`

// listIntentsSQL is List's keyset query: a NULL parameter does not filter;
// $9 is the id of the previous page's last intent.
const listIntentsSQL = `
SELECT ` + intentColumns + `
FROM outbox_intents
WHERE ($1::text[] IS NULL OR state = ANY($1))
  AND ($2::text[] IS NULL OR kind = ANY($2))
  AND ($3::text[] IS NULL OR provider = ANY($3))
  AND ($4::text IS NULL OR consumer = $4)
  AND ($5::text IS NULL OR message_id = $5)
  AND ($6::text IS NULL OR reference = $6)
  AND ($7::timestamptz IS NULL OR created_at >= $7)
  AND ($8::timestamptz IS NULL OR created_at < $8)
  AND ($9::bigint IS NULL OR id < $9)
ORDER BY id DESC
LIMIT $10`

// listUnfinishedSQL is listIntentsSQL for a filter that names only states
// an intent is in before it finishes: the partial index on unfinished
// intents serves it, so an in_doubt list costs what is unfinished, not
// what is retained.
var listUnfinishedSQL = strings.Replace(listIntentsSQL, "WHERE ", "WHERE finished_at IS NULL\n  AND ", 1)

// listUnqueuedSQL is listUnfinishedSQL for states no queued intent is in
// (an intent is queued only pending or dispatching: migration 013's
// check): saying so reads outbox_intents_held_idx (migration 015), so an
// in_doubt list costs what waits for River or an operator, not a backlog
// in the dispatchers' queue.
var listUnqueuedSQL = strings.Replace(listIntentsSQL, "WHERE ", "WHERE finished_at IS NULL AND NOT queued\n  AND ", 1)

// queueable reports whether a queued intent may be in state s.
func queueable(s string) bool {
	return s == string(intenttype.StatePending) || s == string(intenttype.StateDispatching)
}

// onlyUnfinished reports whether every state of a non-empty list is one an
// intent is in before it finishes.
func onlyUnfinished(states []string) bool {
	for _, s := range states {
		if intenttype.State(s).Terminal() {
			return false
		}
	}
	return len(states) > 0
}
