// Package intenttype holds the types shared by recording intents (package
// intents), running them (package dispatcher) and operating them: an
// intent's states and the transitions between them, its row, its attempts
// and events, and the derivation of its keys. It imports only the standard
// library, so every package may import it.
package intenttype

import (
	"encoding/json"
	"time"
)

// State is where an intent is in its life. See DESIGN.md's state diagram.
type State string

const (
	// StateWaiting: recorded after other intents (intents.After) or behind
	// the earlier intents of its ordering key, and not released yet. No
	// attempt is made and it is not queued until the transaction that
	// finishes the last of them moves it to pending (or, when one it comes
	// after failed or was cancelled, to cancelled).
	StateWaiting State = "waiting"
	// StatePending: recorded and waiting for (another) attempt.
	StatePending State = "pending"
	// StateDispatching: an attempt was claimed (committed as started) and
	// has no outcome yet, for every provider, keyed or not. Found after a
	// crash, it means the provider may have acted.
	StateDispatching State = "dispatching"
	// StateSucceeded: the provider performed the effect. Terminal.
	StateSucceeded State = "succeeded"
	// StateFailed: refused for good, or out of attempts. Terminal.
	StateFailed State = "failed"
	// StateInDoubt: an attempt's outcome is unknown and the provider could
	// not tell us. It is never repeated without an operator.
	StateInDoubt State = "in_doubt"
	// StateCancelled: an operator cancelled it, or an intent it comes
	// after failed or was cancelled (the dispatcher, with the reason).
	// Terminal.
	StateCancelled State = "cancelled"
)

// States lists every state in diagram order.
var States = []State{StateWaiting, StatePending, StateDispatching, StateSucceeded, StateFailed, StateInDoubt, StateCancelled}

// Terminal reports whether no further attempt will ever be made.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Intent is one recorded external effect, as stored in outbox_intents.
type Intent struct {
	ID             int64           `json:"id"`
	IdempotencyKey string          `json:"idempotency_key"`
	Kind           string          `json:"kind"`
	Provider       string          `json:"provider"`
	Name           string          `json:"name,omitempty"`
	Consumer       string          `json:"consumer,omitempty"`
	MessageID      string          `json:"message_id,omitempty"`
	Reference      string          `json:"reference,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	State          State           `json:"state"`
	AttemptCount   int             `json:"attempt_count"`
	ProviderRef    string          `json:"provider_ref,omitempty"`
	LastError      string          `json:"last_error,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	// ProviderKey is the idempotency key the provider was (or will be) sent,
	// carried in its metadata with Namespace: what to search the provider
	// for. Empty before the first attempt under the current key generation.
	ProviderKey string `json:"provider_key,omitempty"`
	// Namespace is the deployment namespace ProviderKey embeds; empty for an
	// intent attempted before namespaces existed.
	Namespace string `json:"namespace,omitempty"`
	// KeyGeneration counts the keys the intent has had: it moves on when the
	// provider proved the effect absent, or an operator resent it.
	KeyGeneration int `json:"key_generation"`
	// MayHaveActed is true once an attempt may have reached the provider
	// (DESIGN.md, invariant 3); it is cleared only by a proven absence.
	MayHaveActed bool `json:"may_have_acted"`
	// RecheckAt is when an in_doubt intent will next be looked up at its
	// provider, if it will be.
	RecheckAt *time.Time `json:"recheck_at,omitempty"`
	// OrderingKey is the stream the intent was recorded in, if any.
	OrderingKey string `json:"ordering_key,omitempty"`
}

// Dependency is one intent another comes after (intents.After), as an
// operator sees it.
type Dependency struct {
	// AfterID is the intent it comes after, AfterKey its key and
	// AfterState its state now.
	AfterID    int64  `json:"after_id"`
	AfterKey   string `json:"after_key"`
	AfterState State  `json:"after_state"`
	// Fill maps payload fields to the results of AfterID that fill them.
	Fill map[string]string `json:"fill,omitempty"`
}

// Attempt is one try at an intent. Outcome is empty while the attempt is
// in flight (or was cut short by a crash). The intent's row holds its
// latest attempt, whose ID is 0; outbox_attempts holds the others, each
// with an ID of its own (view outbox_intent_attempts: all of them).
type Attempt struct {
	ID          int64      `json:"id"`
	IntentID    int64      `json:"intent_id"`
	Attempt     int        `json:"attempt"`
	StartedAt   time.Time  `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	Outcome     string     `json:"outcome,omitempty"`
	HTTPStatus  int        `json:"http_status,omitempty"`
	ProviderRef string     `json:"provider_ref,omitempty"`
	Replayed    bool       `json:"replayed"`
	Error       string     `json:"error,omitempty"`
}

// Event is one state change of the intent's audit trail: a row of the
// append-only outbox_events log, or one the intent's row says, whose ID is
// 0 (a plain intent's recording, and the success of the attempt its
// dispatcher made; view outbox_intent_events: all of them).
type Event struct {
	ID        int64     `json:"id"`
	IntentID  int64     `json:"intent_id"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	FromState State     `json:"from_state,omitempty"`
	ToState   State     `json:"to_state"`
	Reason    string    `json:"reason,omitempty"`
}
