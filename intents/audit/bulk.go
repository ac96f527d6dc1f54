package audit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/intents/intenttype"
)

// MaxBulkIntents bounds how many intents one ActAll acts on: a filter
// matching more is refused, to be narrowed (by --created-since, say).
const MaxBulkIntents = 10000

// BulkAction is the action ActAll applies to every intent it selects.
type BulkAction struct {
	// Kind is the action: ActionResend, ActionCancel or ActionResolve.
	Kind ActionKind `json:"action"`
	// As is the state ActionResolve settles intents in (succeeded or
	// failed).
	As intenttype.State `json:"as,omitempty"`
	// Actor is who acts, as for Action.
	Actor string `json:"actor"`
	// Reason is why; required for a bulk action.
	Reason string `json:"reason"`
	// ActionID identifies the bulk action: each intent's action is
	// ActionID + ":" + its id, so a bulk run again after a lost answer
	// applies nothing twice. Empty: ActAll makes one.
	ActionID string `json:"action_id,omitempty"`
	// Seen, when set, is what the operator saw (a dry run's items): only
	// those intents are acted on, each guarded by the version it was seen
	// at, and an intent the filter matches now but the operator did not see
	// is refused. Without it, each intent is guarded by the version it is
	// listed at when ActAll runs.
	Seen map[int64]intenttype.Version `json:"seen,omitempty"`
}

// Outcomes of one intent in a bulk action.
const (
	// BulkDone: the action was applied.
	BulkDone = "done"
	// BulkWould: a dry run found the action allowed (as the intent was
	// when listed).
	BulkWould = "would"
	// BulkRefused: the state diagram or a guard refused the action, or the
	// intent changed since it was listed; nothing was changed.
	BulkRefused = "refused"
	// BulkError: the action failed for another reason (the database);
	// nothing was changed.
	BulkError = "error"
)

// BulkItem is what became of one intent.
type BulkItem struct {
	IntentID int64            `json:"intent_id"`
	Kind     string           `json:"kind"`
	From     intenttype.State `json:"from"`
	// To is the state the action moves the intent to.
	To intenttype.State `json:"to"`
	// Version is the intent's version when listed (what a later run's
	// BulkAction.Seen takes).
	Version intenttype.Version `json:"version"`
	// Outcome is BulkDone, BulkWould, BulkRefused or BulkError.
	Outcome string `json:"outcome"`
	// Why explains a refusal or an error.
	Why string `json:"why,omitempty"`
}

// BulkResult sums up an ActAll.
type BulkResult struct {
	DryRun bool `json:"dry_run"`
	// Matched counts the intents the filter selected.
	Matched int `json:"matched"`
	// Done counts the intents acted on; none in a dry run.
	Done int `json:"done"`
	// Would counts, in a dry run, the intents the action would move.
	Would   int `json:"would"`
	Refused int `json:"refused"`
	Errors  int `json:"errors"`
	// Items are the intents, newest first.
	Items []BulkItem `json:"items"`
}

// ActAll applies a to every intent matching f (its Cursor and Limit are
// ignored), one intent at a time: each is its own transaction with its own
// event, through Act, guarded by the state and version the intent was
// listed at (or, with a.Seen, seen at), so an intent that changed meanwhile
// is refused, not overridden; each intent's action has the identity
// a.ActionID:<id>, so a bulk run again with the same ActionID after a lost
// answer applies nothing twice. It
// keeps going after a refusal or an error, and reports each to progress
// (when not nil) and in the result. With a.Seen, an intent seen that the
// filter no longer matches is reported too, after the others (and not
// counted in Matched): done if an earlier run of the same ActionID moved
// it, refused otherwise.
//
// With dryRun it changes nothing: it lists the intents and says, from the
// state each was in, which the action would move and which it would refuse.
//
// f must select States (a bulk action over every state is a mistake), and
// a.Reason is required; bad arguments are a *FieldError, and a filter
// matching more than MaxBulkIntents intents an error, before anything is
// changed. The returned error is otherwise only ctx's, or the database's
// while reading the intents seen, with the result so far.
func (s *Store) ActAll(ctx context.Context, f Filter, a BulkAction, dryRun bool, progress func(BulkItem)) (BulkResult, error) {
	res := BulkResult{DryRun: dryRun, Items: []BulkItem{}}
	if err := a.check(f); err != nil {
		return res, err
	}
	listed, err := s.listForBulk(ctx, f)
	if err != nil {
		return res, err
	}
	res.Matched = len(listed)
	if a.ActionID == "" {
		a.ActionID = newActionID()
	}
	for _, in := range listed {
		item, err := s.actOne(ctx, a, in, dryRun)
		if err != nil {
			return res, err
		}
		res.count(item)
		if progress != nil {
			progress(item)
		}
	}
	if a.Seen == nil {
		return res, nil
	}
	unlisted, err := s.seenUnlisted(ctx, a, listed, dryRun)
	for _, item := range unlisted {
		res.count(item)
		if progress != nil {
			progress(item)
		}
	}
	return res, err
}

// seenUnlisted reports the intents a.Seen holds that the filter no longer
// matches: done, when this action's identity moved them (the same bulk sent
// again after a lost answer finds what its first run did), refused
// otherwise (something else moved them). In a dry run nothing is done, so
// both are refusals saying which.
func (s *Store) seenUnlisted(ctx context.Context, a BulkAction, listed []intenttype.Intent, dryRun bool) ([]BulkItem, error) {
	remaining := maps.Clone(a.Seen)
	for _, in := range listed {
		delete(remaining, in.ID)
	}
	if len(remaining) == 0 {
		return nil, nil
	}
	ids := slices.Sorted(maps.Keys(remaining))
	rows, err := s.pool.Query(ctx, seenUnlistedSQL, ids, a.ActionID)
	if err != nil {
		return nil, fmt.Errorf("audit: read the intents seen: %w", err)
	}
	type unlisted struct {
		in      intenttype.Intent
		applied bool
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (unlisted, error) {
		var u unlisted
		err := row.Scan(&u.in.ID, &u.in.Kind, &u.in.State, &u.in.KeyGeneration, &u.in.AttemptCount, &u.applied)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit: read the intents seen: %w", err)
	}
	items := make([]BulkItem, 0, len(ids))
	for _, u := range found {
		delete(remaining, u.in.ID)
		item := BulkItem{IntentID: u.in.ID, Kind: u.in.Kind, From: u.in.State, To: a.target(), Version: u.in.Version()}
		switch {
		case u.applied && !dryRun:
			item.Outcome, item.Why = BulkDone, "done already, by an earlier run of this action"
		case u.applied:
			item.Outcome, item.Why = BulkRefused, "done already, by an earlier run of this action"
		default:
			item.Outcome, item.Why = BulkRefused, fmt.Sprintf("it no longer matches the filter: it is %s now", u.in.State)
		}
		items = append(items, item)
	}
	for _, id := range slices.Backward(slices.Sorted(maps.Keys(remaining))) {
		items = append(items, BulkItem{IntentID: id, To: a.target(), Version: a.Seen[id], Outcome: BulkRefused, Why: "no such intent any more"})
	}
	return items, nil
}

// seenUnlistedSQL reads the intents of $1, newest first, and whether each
// holds the event of the bulk action $2 (its action id, $2:<intent id>).
const seenUnlistedSQL = `
SELECT i.id, i.kind, i.state, i.key_generation, i.attempt_count,
       EXISTS (SELECT 1 FROM outbox_events e WHERE e.intent_id = i.id AND e.action_id = $2::text || ':' || i.id::text)
FROM outbox_intents i
WHERE i.id = ANY($1::bigint[])
ORDER BY i.id DESC`

// check refuses a bulk action over every state, or without a reason, or
// whose per-intent action id would be refused (ActionID:<intent id>,
// checked at the longest it can be, so that no intent is refused for it
// after others were acted on).
func (a BulkAction) check(f Filter) error {
	if len(f.States) == 0 {
		return filterError("States", "a bulk action needs the states to act on (in_doubt, say)")
	}
	if strings.TrimSpace(a.Reason) == "" {
		return inputError("reason", "a bulk action needs a reason, for every intent's event log")
	}
	probe := Action{Kind: a.Kind, IntentID: 1, As: a.As, Actor: a.Actor, Reason: a.Reason}
	if a.ActionID != "" {
		probe.ActionID = fmt.Sprintf("%s:%d", a.ActionID, int64(math.MaxInt64))
	}
	return probe.Validate()
}

// listForBulk lists every intent f matches, refusing more than
// MaxBulkIntents before anything is changed.
func (s *Store) listForBulk(ctx context.Context, f Filter) ([]intenttype.Intent, error) {
	f.Cursor, f.Limit = "", MaxPageSize
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var listed []intenttype.Intent
	for {
		page, err := s.List(ctx, f)
		if err != nil {
			return nil, err
		}
		listed = append(listed, page.Intents...)
		if len(listed) > MaxBulkIntents {
			return nil, inputError("filter", "matches more than %d intents: narrow it (by --created-since or --kind, say)", MaxBulkIntents)
		}
		if page.NextCursor == "" {
			return listed, nil
		}
		f.Cursor = page.NextCursor
	}
}

// actOne acts on one listed intent (or, with dryRun, says what it would
// do), guarded by the version it was seen at; the error is only ctx's.
func (s *Store) actOne(ctx context.Context, a BulkAction, in intenttype.Intent, dryRun bool) (BulkItem, error) {
	item := BulkItem{IntentID: in.ID, Kind: in.Kind, From: in.State, To: a.target(), Version: in.Version()}
	guard := in.Version()
	if a.Seen != nil {
		seen, ok := a.Seen[in.ID]
		if !ok {
			item.Outcome, item.Why = BulkRefused, "not among the intents seen: it matches the filter only now"
			return item, nil
		}
		guard = seen
	}
	if err := ctx.Err(); err != nil {
		return item, err
	}
	if dryRun {
		if why := a.refusal(in); why == "" && guard != in.Version() {
			item.Outcome, item.Why = BulkRefused, fmt.Sprintf("it changed since it was seen (seen at version %s, now %s)", guard, in.Version())
		} else if why != "" {
			item.Outcome, item.Why = BulkRefused, why
		} else {
			item.Outcome = BulkWould
		}
		return item, nil
	}
	_, err := s.Act(ctx, Action{Kind: a.Kind, IntentID: in.ID, As: a.As, Actor: a.Actor, Reason: a.Reason, IfState: in.State,
		IfVersion: &guard, ActionID: fmt.Sprintf("%s:%d", a.ActionID, in.ID)})
	var te *TransitionError
	switch {
	case err == nil:
		item.Outcome = BulkDone
	case errors.As(err, &te), errors.Is(err, ErrNotFound):
		item.Outcome, item.Why = BulkRefused, err.Error()
	case ctx.Err() != nil:
		return item, ctx.Err()
	default:
		item.Outcome, item.Why = BulkError, err.Error()
	}
	return item, nil
}

// count adds item to the result.
func (res *BulkResult) count(item BulkItem) {
	switch item.Outcome {
	case BulkDone:
		res.Done++
	case BulkWould:
		res.Would++
	case BulkRefused:
		res.Refused++
	default:
		res.Errors++
	}
	res.Items = append(res.Items, item)
}

// target is the state a moves an intent to.
func (a BulkAction) target() intenttype.State {
	switch a.Kind {
	case ActionResend:
		return intenttype.StatePending
	case ActionResolve:
		return a.As
	}
	return intenttype.StateCancelled
}

// refusal says why Act would refuse a on in as listed, or "".
func (a BulkAction) refusal(in intenttype.Intent) string {
	allowed := a.Kind.AllowedFrom()
	switch {
	case in.State == intenttype.StateDispatching:
		return fmt.Sprintf("it is %s: an attempt is in flight", in.State)
	case !slices.Contains(allowed, in.State):
		names := make([]string, len(allowed))
		for i, st := range allowed {
			names[i] = string(st)
		}
		return fmt.Sprintf("it is %s, and %s is allowed only from %s", in.State, a.Kind, strings.Join(names, " or "))
	case a.Kind == ActionCancel && in.MayHaveActed:
		return "an earlier attempt may have reached the provider, so it cannot be cancelled"
	}
	return ""
}
