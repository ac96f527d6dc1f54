package intenttype

// ActionKind names an operator action.
type ActionKind string

// The operator actions the state diagram allows.
const (
	// ActionResend moves an in_doubt intent, or a failed one no attempt may
	// have acted for, back to pending, under a new key generation and with
	// a fresh attempt budget, queued for the dispatchers.
	ActionResend ActionKind = "resend"
	// ActionCancel moves a pending intent that no attempt may have reached
	// the provider for to cancelled.
	ActionCancel ActionKind = "cancel"
	// ActionResolve settles an in_doubt intent as succeeded or failed.
	ActionResolve ActionKind = "resolve"
)

// AllowedFrom returns the states an action is allowed from, by the state
// diagram (Transitions); nil for an unknown action.
func (k ActionKind) AllowedFrom() []State {
	switch k {
	case ActionResend:
		return OperatorFrom(StatePending)
	case ActionResolve:
		return OperatorFrom(StateSucceeded)
	case ActionCancel:
		return OperatorFrom(StateCancelled)
	}
	return nil
}

// RevealReasonPrefix starts the reason of the event a reveal of an
// intent's payload appends to its trail.
const RevealReasonPrefix = "revealed payload: "
