// Package audit is the operator's view of the outbox: it lists and shows
// intents with their attempts and events, counts them, and carries out the
// operator actions DESIGN.md allows (resend, cancel, resolve), each written
// to the append-only event log with who and why. Payloads leave this package
// redacted by their provider's rule. The CLI and the admin HTTP server both
// use it, so they show and allow exactly the same things.
//
// The methods and their contracts:
//
//   - List returns intents matching a Filter, newest first, one Page at a
//     time (keyset pagination: no duplicates or gaps across pages while
//     intents are being recorded).
//   - Get returns one intent by numeric id or idempotency key, with its
//     attempts and events (Detail), or ErrNotFound.
//   - Resend, Cancel and Resolve (and Act, which all three call) lock the
//     intent's row, check the transition against DESIGN.md's diagram, update
//     it and append an event with the actor and reason, in one transaction.
//     A transition the diagram does not allow returns a *TransitionError and
//     changes nothing.
//   - ActAll applies one action to every intent a Filter selects, each
//     intent through Act with IfState set to the state it was listed in; a
//     dry run changes nothing.
//   - Reveal returns an intent with its payload unredacted, after
//     recording who asked and why in its event log (no state change).
//   - HowToCheck says how to look an intent up at its provider.
//   - Stats counts intents by state and by kind.
//
// Each query is beside the method that runs it; the tables are created by
// migrations/001 to 012, and every write is internal/intentstore's.
package audit

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/providers"
)

// Limits for List.
const (
	// DefaultPageSize is the page size when Filter.Limit is 0.
	DefaultPageSize = 50
	// MaxPageSize is the largest Filter.Limit accepted.
	MaxPageSize = 500
)

// Limits for an operator action's arguments.
const (
	// MaxReasonLength bounds an action's reason, in bytes.
	MaxReasonLength = 1000
	// MaxActorLength bounds an action's actor, in bytes, before the
	// "operator:" prefix.
	MaxActorLength = 200
	// MaxProviderRefLength bounds the provider reference a resolve may
	// set, in bytes (Stripe's ids are far shorter).
	MaxProviderRefLength = 255
	// maxFilterString bounds a Filter's string fields: no column they are
	// compared with holds longer values.
	maxFilterString = 255
)

// ActorPrefix is prepended to every operator action's actor in the event
// log, so operators' events are told apart from the dispatcher's.
const ActorPrefix = "operator:"

// ErrNotFound is returned when no intent has the given id or key
// (intenttype.ErrNotFound).
var ErrNotFound = intenttype.ErrNotFound

// ErrInvalidFilter is wrapped by errors about a filter or page request
// (always a *FieldError naming the Filter field).
var ErrInvalidFilter = errors.New("invalid filter")

// ErrInvalidInput is wrapped by errors about an operator action's arguments
// or a Get's id (always a *FieldError naming the argument: "actor",
// "reason", "as", "id"). Nothing is changed.
var ErrInvalidInput = errors.New("invalid input")

// FieldError names the field of a Filter, or the argument of an action,
// that is wrong. It wraps ErrInvalidFilter or ErrInvalidInput.
type FieldError struct {
	// Field is the Filter field ("States", "Limit", "Cursor", ...) or the
	// argument ("actor", "reason", "as", "id").
	Field string
	// Problem says what is wrong, without echoing secrets.
	Problem string
	kind    error
}

func (e *FieldError) Error() string { return fmt.Sprintf("%v: %s: %s", e.kind, e.Field, e.Problem) }

// Unwrap returns ErrInvalidFilter or ErrInvalidInput.
func (e *FieldError) Unwrap() error { return e.kind }

func filterError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...), kind: ErrInvalidFilter}
}

func inputError(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...), kind: ErrInvalidInput}
}

// TransitionError is returned for an operator action the state diagram
// does not allow from the intent's current state (resending a succeeded
// intent, say), for an intent whose attempt is in flight, for a cancel of an
// intent that an attempt may have reached the provider for, or, for an
// Action with IfState, when the intent is no longer in that state. Nothing
// is changed. Defined in intenttype, the leaf the store shares.
type TransitionError = intenttype.TransitionError

// Filter selects intents for List. Zero fields do not filter; fields that
// are set must all match.
type Filter struct {
	// States keeps intents in any of these states.
	States []intenttype.State
	// Kinds keeps intents of any of these kinds.
	Kinds []string
	// Providers keeps intents performed by any of these providers.
	Providers []string
	// Consumer and MessageID keep the intents recorded by that consumer or
	// for that message id.
	Consumer  string
	MessageID string
	// Reference keeps the intents recorded with this business reference.
	Reference string
	// CreatedSince keeps intents created at or after it.
	CreatedSince time.Time
	// CreatedUntil keeps intents created before it.
	CreatedUntil time.Time
	// Cursor continues a previous page (Page.NextCursor); the other fields
	// should stay the same between pages.
	Cursor string
	// Limit is the page size, 1 to MaxPageSize; 0 means DefaultPageSize.
	Limit int
}

// Page is one page of intents, newest first.
type Page struct {
	// Intents holds at most the filter's Limit intents, payloads redacted.
	Intents []intenttype.Intent `json:"intents"`
	// NextCursor continues with the next (older) page; empty on the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Detail is one intent with its whole history.
type Detail struct {
	// Intent has its payload redacted.
	Intent intenttype.Intent `json:"intent"`
	// Attempts are oldest first.
	Attempts []intenttype.Attempt `json:"attempts"`
	// Events are oldest first.
	Events []intenttype.Event `json:"events"`
	// After lists the intents it comes after, by id; empty when none.
	After []intenttype.Dependency `json:"after,omitempty"`
	// HowToCheck says how to look the intent's effect up at its provider
	// (HowToCheck).
	HowToCheck Check `json:"how_to_check"`
}

// Stats counts intents.
type Stats struct {
	// Total counts every intent.
	Total int `json:"total"`
	// ByState counts intents per state; every state is present, zero or not.
	ByState map[intenttype.State]int `json:"by_state"`
	// ByKindState counts intents per kind, then state (states with no
	// intent of that kind are absent).
	ByKindState map[string]map[intenttype.State]int `json:"by_kind_state"`
	// InDoubt is ByState[in_doubt], for convenience.
	InDoubt int `json:"in_doubt"`
	// OldestPendingAge is the age of the oldest pending or dispatching
	// intent, measured by the database's clock, or 0 when there is none.
	OldestPendingAge time.Duration `json:"-"`
	// OldestPendingAgeSeconds is OldestPendingAge in seconds, as JSON shows
	// it (and the metric outbox_oldest_pending_intent_age_seconds).
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// CountedAt is when the counts were taken (the start of their
	// snapshot, by the database's clock). While counting is slow (a
	// backlog), the counts are the running dispatchers' last (Reused), and
	// the admin handler shares one count among its readers: they may be a
	// few seconds old.
	CountedAt time.Time `json:"counted_at"`
	// Reused is true when the counts are the dispatchers' last, taken at
	// CountedAt, rather than counted for this read.
	Reused bool `json:"reused"`
	// ReusedAge is how old reused counts were when read, by the database's
	// clock; 0 when they were counted for this read.
	ReusedAge time.Duration `json:"-"`
}

// Store reads and acts on the outbox's tables. It is safe for concurrent
// use.
type Store struct {
	pool     *pgxpool.Pool
	registry *providers.Registry
	// store carries out the operator actions.
	store *intentstore.Store
}

// New returns a Store on the database behind pool, which must have been
// migrated (outboxd migrate). registry redacts payloads; an intent whose
// provider is not registered (or every intent, with a nil registry) has its
// payload replaced by {"redacted":"provider not configured"}. A nil pool is
// an error.
func New(pool *pgxpool.Pool, registry *providers.Registry) (*Store, error) {
	store, err := intentstore.New(pool, nil)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return &Store{pool: pool, registry: registry, store: store}, nil
}
