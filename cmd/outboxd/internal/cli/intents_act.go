package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/termtext"
)

// actionFlags are the flags every operator action takes.
type actionFlags struct {
	dbURL       databaseURL
	actor       string
	reason      *string
	expectState *string
	ifVersion   *string
	actionID    *string
	asJSON      *bool
	// providerRef is resolve's --provider-ref; nil for the other actions.
	providerRef *string
	// The bulk form: every intent the filter selects.
	filter      *filterFlags
	dryRun, yes *bool
}

func (a *actionFlags) register(fs *flag.FlagSet, env Env) {
	registerDatabaseFlag(fs, env, &a.dbURL)
	actor := env.Getenv("USER")
	if actor == "" {
		actor = "operator"
	}
	fs.StringVar(&a.actor, "actor", actor, `who acts, recorded as "operator:<actor>"; the default is $USER, else "operator"`)
	a.reason = fs.String("reason", "", fmt.Sprintf("why; recorded in the event log (required, at most %d characters)", audit.MaxReasonLength))
	a.expectState = fs.String("expect-state", "", "act only if the intent is still in this state (the one you saw); otherwise change nothing and exit 1")
	a.ifVersion = fs.String("if-version", "", "act only if the intent is still at this version (g<key generation>.a<attempts>, as 'intents show' prints it): a resend that already went out and came back in_doubt is refused; otherwise change nothing and exit 1")
	a.actionID = fs.String("action-id", "", "the action's identity: run again with the same id (after a lost answer, say), it is found applied and not applied twice; the default is a fresh one")
	a.asJSON = fs.Bool("json", false, "print the intent, as it now is, as JSON (in bulk: the summary and every intent's outcome)")
	a.filter = registerFilterFlags(fs)
	a.dryRun = fs.Bool("dry-run", false, "in bulk: list what would change, and change nothing")
	a.yes = fs.Bool("yes", false, "in bulk: act without asking (needed when stdin is not a terminal)")
}

// actionArgFlag names the flag that sets an action's argument
// (audit.FieldError.Field).
func actionArgFlag(field string) string {
	switch field {
	case "if_state":
		return "--expect-state"
	case "if_version":
		return "--if-version"
	case "action_id":
		return "--action-id"
	case "id":
		return "ID"
	}
	return "--" + field // actor, reason, as
}

func runIntentsRetry(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("intents retry", "intents retry ID|KEY --reason TEXT [flags]\n   or: outboxd intents retry --state in_doubt [filters] --reason TEXT [--dry-run | --yes]", `
Retries an in_doubt intent, or a failed one ('resend' is another name for
it): moves it back to pending under a new provider key with a fresh
attempt budget, queued for the dispatchers, in one transaction. For an
in_doubt intent, do this only after checking at the provider that the
effect did not happen ('outboxd intents show ID' says where to look); a
failed one (a decline, a refusal since fixed) is retried only if no attempt
may have acted and no intent was recorded after it. The dispatcher then
performs it once more. Anything else: nothing changes, exit 1.
`+bulkHelp+`
Examples:
  outboxd intents retry 42 --reason "Stripe shows no PaymentIntent for it"
  outboxd intents retry --state in_doubt --provider sendgrid --since 2h --reason "SendGrid outage, none delivered" --dry-run`, env)
	var af actionFlags
	af.register(fs, env)
	return runAction(ctx, fs, args, env, &af, audit.ActionResend, func() (intenttype.State, error) { return "", nil })
}

func runIntentsCancel(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("intents cancel", "intents cancel ID|KEY --reason TEXT [flags]\n   or: outboxd intents cancel --state pending [filters] --reason TEXT [--dry-run | --yes]", `
Cancels a pending or waiting intent for good: it will not be attempted,
and the intents waiting for it are cancelled with it (the next intent of
its ordering key goes on). Only while no attempt may have reached the provider:
an intent an attempt may have acted for ends succeeded, or in_doubt for
you to resolve. Any other state, or an attempt in flight:
nothing changes, exit 1.
`+bulkHelp, env)
	var af actionFlags
	af.register(fs, env)
	return runAction(ctx, fs, args, env, &af, audit.ActionCancel, func() (intenttype.State, error) { return "", nil })
}

func runIntentsResolve(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("intents resolve", "intents resolve ID|KEY --as succeeded|failed --reason TEXT [--provider-ref REF] [flags]\n   or: outboxd intents resolve --state in_doubt [filters] --as succeeded|failed --reason TEXT [--dry-run | --yes]", `
Settles an in_doubt intent after you found out at the provider what
happened ('outboxd intents show ID' says where to look): --as succeeded if
the effect happened, --as failed if it did not and must not be attempted
again. Any other state: nothing changes, exit 1.

With --as succeeded, --provider-ref names what the provider shows for the
effect (the PaymentIntent's id, the email's X-Message-Id): it becomes the
intent's provider reference, and an intent ordered after it that fills a
field from it (a refund's payment_intent) is released with it. Without it,
such an intent is cancelled, saying why.
`+bulkHelp+`
Examples:
  outboxd intents resolve 42 --as succeeded --provider-ref pi_3Pq... --reason "Stripe shows it succeeded"
  outboxd intents resolve 43 --as failed --reason "no PaymentIntent carries its key"`, env)
	var af actionFlags
	af.register(fs, env)
	as := fs.String("as", "", "succeeded or failed (required)")
	af.providerRef = fs.String("provider-ref", "", "with --as succeeded: the provider's reference for the effect (one intent only)")
	return runAction(ctx, fs, args, env, &af, audit.ActionResolve, func() (intenttype.State, error) {
		switch *as {
		case string(intenttype.StateSucceeded), string(intenttype.StateFailed):
			return intenttype.State(*as), nil
		case "":
			return "", usageErrorf("--as is required: succeeded or failed")
		}
		return "", usageErrorf("--as %q: want succeeded or failed", *as)
	})
}

// runAction parses an action's arguments, validates them before
// connecting, and carries the action out.
func runAction(ctx context.Context, fs *flag.FlagSet, args []string, env Env, af *actionFlags, kind audit.ActionKind, target func() (intenttype.State, error)) error {
	idOrKey, err := parsePositionals(fs, args, env, "ID|KEY", true)
	if err != nil {
		return err
	}
	bulk := af.filter.set()
	switch {
	case idOrKey != "" && bulk:
		return usageErrorf("give one intent's ID|KEY, or filters (--state ...) to act on every intent they select, not both")
	case idOrKey == "" && !bulk:
		return usageErrorf("give the intent's ID|KEY, or --state (and other filters) to act on every intent they select")
	case !bulk && (*af.dryRun || *af.yes):
		return usageErrorf("--dry-run and --yes are for the bulk form (with --state)")
	}
	as, err := target()
	if err != nil {
		return err
	}
	if strings.TrimSpace(*af.reason) == "" {
		return usageErrorf("--reason is required: say why, for the event log")
	}
	providerRef := ""
	if af.providerRef != nil {
		providerRef = *af.providerRef
	}
	if bulk {
		if providerRef != "" {
			return usageErrorf("--provider-ref names one intent's effect: give the intent's ID|KEY, not filters")
		}
		return runBulkAction(ctx, env, af, audit.BulkAction{Kind: kind, As: as, Actor: af.actor, Reason: *af.reason, ActionID: *af.actionID})
	}
	action := audit.Action{Kind: kind, As: as, Actor: af.actor, Reason: *af.reason, IfState: intenttype.State(*af.expectState), ProviderRef: providerRef, ActionID: *af.actionID}
	if *af.ifVersion != "" {
		v, err := intenttype.ParseVersion(*af.ifVersion)
		if err != nil {
			return usageErrorf("--if-version: %v", err)
		}
		action.IfVersion = &v
	}
	id, numeric := parseID(idOrKey)
	action.IntentID = max(id, 1) // validated for real once a key is looked up
	if err := action.Validate(); err != nil {
		return actionUsageError(err)
	}
	store, pool, err := openStore(ctx, af.dbURL, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !numeric {
		d, err := store.Get(ctx, idOrKey)
		if err != nil {
			return err
		}
		id = d.Intent.ID
	}
	action.IntentID = id
	in, err := store.Act(ctx, action)
	var te *audit.TransitionError
	switch {
	case errors.As(err, &te):
		named := *te
		named.Action = actionVerb(kind)
		return fmt.Errorf("%s; nothing was changed", named.Error())
	case errors.Is(err, audit.ErrInvalidInput):
		return actionUsageError(err)
	case err != nil:
		return err
	}
	if *af.asJSON {
		return writeJSON(env.Stdout, in)
	}
	note := ""
	if kind == audit.ActionResend {
		note = "; queued for the dispatchers"
	}
	fmt.Fprintf(env.Stdout, "intent %d is now %s (%s by %s%s)\n", in.ID, in.State, actionVerb(kind), termtext.Line(audit.ActorPrefix+strings.TrimPrefix(af.actor, audit.ActorPrefix)), note)
	return nil
}

// actionVerb is the subcommand that carries out kind: the CLI's verb for
// audit.ActionResend is retry.
func actionVerb(kind audit.ActionKind) string {
	if kind == audit.ActionResend {
		return "retry"
	}
	return string(kind)
}

func actionUsageError(err error) error {
	var fe *audit.FieldError
	if errors.As(err, &fe) {
		return usageErrorf("%s: %s", actionArgFlag(fe.Field), fe.Problem)
	}
	return err
}
