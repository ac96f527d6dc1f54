// Package intenttype holds the types shared by recording intents (package
// intents) and running them (package dispatcher): an intent's states, its
// row, its attempts and events, and the River job that triggers it. It
// imports nothing of the outbox, so every package may import it.
package intenttype

import (
	"encoding/json"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// State is where an intent is in its life. See DESIGN.md's state diagram.
type State string

const (
	// StatePending: recorded and waiting for (another) attempt.
	StatePending State = "pending"
	// StateDispatching: an attempt at a provider without an idempotency key
	// was committed as started and has no outcome yet. Found after a crash,
	// it means the provider may have acted.
	StateDispatching State = "dispatching"
	// StateSucceeded: the provider performed the effect. Terminal.
	StateSucceeded State = "succeeded"
	// StateFailed: refused for good, or out of attempts. Terminal.
	StateFailed State = "failed"
	// StateInDoubt: an attempt's outcome is unknown and the provider could
	// not tell us. It is never repeated without an operator.
	StateInDoubt State = "in_doubt"
	// StateCancelled: an operator cancelled it. Terminal.
	StateCancelled State = "cancelled"
)

// States lists every state in diagram order.
var States = []State{StatePending, StateDispatching, StateSucceeded, StateFailed, StateInDoubt, StateCancelled}

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
}

// Attempt is one try at an intent, as stored in outbox_attempts. Outcome is
// empty while the attempt is in flight (or was cut short by a crash).
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

// Event is one state change in the append-only outbox_events log.
type Event struct {
	ID        int64     `json:"id"`
	IntentID  int64     `json:"intent_id"`
	At        time.Time `json:"at"`
	Actor     string    `json:"actor"`
	FromState State     `json:"from_state,omitempty"`
	ToState   State     `json:"to_state"`
	Reason    string    `json:"reason,omitempty"`
}

// DispatchQueue is the River queue dispatch jobs run on.
const DispatchQueue = "outbox"

// DispatchMaxAttempts is River's attempt limit for a dispatch job. The
// dispatcher bounds attempts per intent itself, well below this; River's
// limit only stops a job that keeps crashing its worker, and the sweep
// re-enqueues its intent.
const DispatchMaxAttempts = 100

// DispatchArgs is the River job that asks the dispatcher to work on one
// intent. The intent row, not the job, is the system of record: a job whose
// intent is already terminal completes and does nothing.
type DispatchArgs struct {
	IntentID int64 `json:"intent_id"`
}

// Kind is the River job kind.
func (DispatchArgs) Kind() string { return "outbox_dispatch" }

// InsertOpts makes dispatch jobs unique per intent among live jobs, so the
// sweep can re-enqueue without ever creating a second concurrent job.
func (DispatchArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       DispatchQueue,
		MaxAttempts: DispatchMaxAttempts,
		UniqueOpts: river.UniqueOpts{
			ByArgs: true,
			ByState: []rivertype.JobState{
				rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
				rivertype.JobStateRunning, rivertype.JobStateScheduled,
			},
		},
	}
}
