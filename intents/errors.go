package intents

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// ErrInvalidMessage is wrapped by errors about a message's consumer name or
// id. Nothing is written.
var ErrInvalidMessage = errors.New("invalid message")

// ErrInvalidIntent is wrapped by every *IntentError.
var ErrInvalidIntent = errors.New("invalid intent")

// ErrPayloadTooLarge is wrapped by an *IntentError whose payload exceeds
// Config.MaxPayloadBytes.
var ErrPayloadTooLarge = errors.New("payload too large")

// ErrDuplicateKey is wrapped by a *DuplicateKeyError
// (intenttype.ErrDuplicateKey).
var ErrDuplicateKey = intenttype.ErrDuplicateKey

// IntentError says which recorded intent was refused and why. It wraps the
// cause: a *providers.PayloadError naming the field, providers.ErrUnknownKind,
// ErrPayloadTooLarge, or a problem with the name or key. The transaction is
// rolled back.
type IntentError struct {
	// Index is the intent's position among those recorded in the call,
	// from 0. Error says it as people count (the 1st intent), so that it
	// is never read as an intent's id.
	Index int
	Kind  string
	Name  string
	Err   error
}

func (e *IntentError) Error() string {
	label := fmt.Sprintf("the %s intent (%s", ordinal(e.Index+1), e.Kind)
	if e.Name != "" {
		label += fmt.Sprintf(" %q", e.Name)
	}
	return label + "): " + e.Err.Error()
}

// Unwrap returns the cause and ErrInvalidIntent.
func (e *IntentError) Unwrap() []error { return []error{e.Err, ErrInvalidIntent} }

// ordinal is n as people count: 1st, 2nd, 3rd, 4th, 11th, 12th, 21st.
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// DuplicateKeyError is returned when an intent's idempotency key is already
// taken. The transaction is rolled back. Defined in intenttype, the leaf the
// store shares.
type DuplicateKeyError = intenttype.DuplicateKeyError

// PanicError is returned by Consume when the handler panicked. The
// transaction was rolled back; the message can be redelivered.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }
