package intenttype

// Actor is who moves an intent: the dispatcher or an operator.
type Actor string

const (
	// ActorDispatcher is the dispatcher's workers and maintenance jobs.
	ActorDispatcher Actor = "dispatcher"
	// ActorOperator is a person, through the CLI, the API or the dashboard.
	ActorOperator Actor = "operator"
)

// Transition is one edge of the intent's state diagram (DESIGN.md).
type Transition struct {
	From, To State
	By       Actor
	// Why says when the edge is taken.
	Why string
}

// Transitions is the intent's whole state diagram: every state change the
// dispatcher or an operator may make. A pending intent that gets another
// attempt is not a change of state and is not listed, nor is recording (an
// intent is recorded pending, or waiting when it comes after others, or
// cancelled when one of those had already failed). The store that owns
// the intent's rows refuses every other change.
var Transitions = []Transition{
	{StatePending, StateDispatching, ActorDispatcher, "an attempt claims the intent"},
	{StatePending, StateFailed, ActorDispatcher, "attempts exhausted while no attempt may have acted"},
	{StatePending, StateInDoubt, ActorDispatcher, "the key window passed or attempts ran out after an attempt that may have acted, and the provider could not show the effect"},
	{StatePending, StateSucceeded, ActorDispatcher, "reconciled before a call: the provider has it"},
	{StateDispatching, StateSucceeded, ActorDispatcher, "the provider performed it, or reconciliation found it"},
	{StateDispatching, StatePending, ActorDispatcher, "retryable outcome, or absence proven by a consistent read"},
	{StateDispatching, StateFailed, ActorDispatcher, "refused for good, or out of attempts while no attempt may have acted"},
	{StateDispatching, StateInDoubt, ActorDispatcher, "ambiguous and not reconciled"},
	{StateDispatching, StateDispatching, ActorDispatcher, "an attempt found open after a crash is replaced by a new one, inside a keyed provider's window"},
	{StateInDoubt, StateSucceeded, ActorDispatcher, "a later lookup found it, or a late outcome showed it"},
	{StateInDoubt, StatePending, ActorDispatcher, "a later lookup proved it absent: performed under a new key"},
	{StateInDoubt, StateFailed, ActorDispatcher, "a later lookup showed the provider refused it"},
	{StateInDoubt, StatePending, ActorOperator, "resend: the operator checked it did not happen"},
	{StateFailed, StatePending, ActorOperator, "resend: it failed without acting (a decline, a refusal since fixed), and the operator wants it sent again"},
	{StateInDoubt, StateSucceeded, ActorOperator, "resolve: the operator found it at the provider"},
	{StateInDoubt, StateFailed, ActorOperator, "resolve: the operator found it did not happen"},
	{StatePending, StateCancelled, ActorOperator, "cancel, only while no attempt may have acted"},
	{StateWaiting, StatePending, ActorDispatcher, "released: every intent it comes after succeeded and the earlier intents of its ordering key finished"},
	{StateWaiting, StateCancelled, ActorDispatcher, "an intent it comes after failed or was cancelled"},
	{StateWaiting, StateCancelled, ActorOperator, "cancel, before its turn came"},
}

// CanTransition reports whether by may move an intent from one state to
// another. Guards the diagram cannot show (no attempt may have acted for a
// cancel; the claim's attempt for a settle) are the store's.
func CanTransition(from, to State, by Actor) bool {
	for _, t := range Transitions {
		if t.From == from && t.To == to && t.By == by {
			return true
		}
	}
	return false
}

// OperatorFrom returns the states an operator may move an intent to to
// from, in diagram order.
func OperatorFrom(to State) []State {
	var out []State
	for _, t := range Transitions {
		if t.To == to && t.By == ActorOperator {
			out = append(out, t.From)
		}
	}
	return out
}
