package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/termtext"
	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/bytecheck"
	"github.com/outboxkit/outbox/providers/amqpprovider"
	"github.com/outboxkit/outbox/providers/jetstreamprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

type intentsSubcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env Env) error
}

func intentsSubcommands() []intentsSubcommand {
	return []intentsSubcommand{
		{"list", "list intents, newest first, filtered by state, kind, consumer, ...", runIntentsList},
		{"show", "show one intent: its redacted payload, every attempt and its event log", runIntentsShow},
		{"retry", "retry an in_doubt intent: perform it again (after checking the effect did not happen); alias: resend", runIntentsRetry},
		{"cancel", "cancel a pending or waiting intent no attempt may have reached the provider for", runIntentsCancel},
		{"resolve", "settle an in_doubt intent as succeeded or failed", runIntentsResolve},
	}
}

const intentsOverview = `Usage: outboxd intents <subcommand> [flags]

Inspect intents and act on them as an operator. Payloads are shown redacted.
Every action (retry, cancel, resolve) is checked against the intent's state
diagram, and written to the intent's event log with who (--actor, recorded
as "operator:<actor>") and why (--reason); an action the diagram does not
allow changes nothing and exits 1.

Subcommands:
%s
Run 'outboxd intents <subcommand> --help' for its flags.
`

func intentsUsage(w io.Writer) {
	var b strings.Builder
	for _, c := range intentsSubcommands() {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, intentsOverview, b.String())
}

// intentsAliases are other names the subcommands answer to: the API and
// the dashboard call a retry a resend.
var intentsAliases = map[string]string{"resend": "retry"}

func runIntents(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		intentsUsage(env.Stderr)
		return usageErrorf("name a subcommand: list, show, retry, cancel or resolve")
	}
	switch args[0] {
	case "-h", "-help", "--help":
		intentsUsage(env.Stdout)
		return flag.ErrHelp
	case "help":
		if len(args) == 1 {
			intentsUsage(env.Stdout)
			return flag.ErrHelp
		}
		// outboxd intents help list: the subcommand's help.
		args = []string{args[1], "--help"}
	}
	name := args[0]
	if alias, ok := intentsAliases[name]; ok {
		name = alias
	}
	names := []string{}
	for _, c := range intentsSubcommands() {
		if c.name == name {
			return c.run(ctx, args[1:], env)
		}
		names = append(names, c.name)
	}
	return usageErrorf("unknown subcommand %q%s (want list, show, retry, cancel or resolve)", args[0], didYouMean(args[0], append(names, "resend")))
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// filterFlag names the flag that sets an audit.Filter field, so a bad
// filter is reported by the flag's name.
func filterFlag(field string) string {
	switch field {
	case "States":
		return "--state"
	case "Kinds":
		return "--kind"
	case "Providers":
		return "--provider"
	case "MessageID":
		return "--message-id"
	case "CreatedSince":
		return "--since"
	case "CreatedUntil":
		return "--until"
	}
	return "--" + strings.ToLower(field) // Consumer, Reference, Cursor, Limit
}

func runIntentsList(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("intents list", "intents list [flags]", `
Lists intents, newest first, as a table (id, state, kind, reference,
attempts, age, last error), one page at a time: when there are more, the
last line is the command that lists the next one, with the same filters. Filters combine (all must match);
--state, --kind and --provider may be repeated or comma-separated.

Examples:
  outboxd intents list --state in_doubt
  outboxd intents list --state pending,dispatching --since 24h
  outboxd intents list --reference order-42 --json`, env)
	var dbURL string
	registerDatabaseFlag(fs, env, &dbURL)
	ff := registerFilterFlags(fs)
	limit := fs.Int("limit", audit.DefaultPageSize, fmt.Sprintf("intents per page, 1 to %d", audit.MaxPageSize))
	cursor := fs.String("cursor", "", "continue from a previous page (its 'next page' hint)")
	asJSON := fs.Bool("json", false, `print the page as JSON: {"intents": [...], "next_cursor": "..."}`)
	if err := parse(fs, args, env); err != nil {
		return err
	}
	now := time.Now()
	f, err := ff.filter(now)
	if err != nil {
		return err
	}
	f.Cursor, f.Limit = *cursor, *limit
	if f.Limit == 0 {
		return usageErrorf("--limit must be between 1 and %d, got 0", audit.MaxPageSize)
	}
	if err := f.Validate(); err != nil {
		return filterUsageError(err)
	}
	store, pool, err := openStore(ctx, dbURL, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := ff.checkKnown(ctx, pool); err != nil {
		return err
	}
	page, err := store.List(ctx, f)
	if err != nil {
		return filterUsageError(err)
	}
	if *asJSON {
		return writeJSON(env.Stdout, page)
	}
	if len(page.Intents) == 0 {
		fmt.Fprintln(env.Stdout, "no intents match")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tKIND\tREFERENCE\tATTEMPTS\tAGE\tLAST ERROR")
	for _, in := range page.Intents {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", in.ID, termtext.Line(string(in.State)), termtext.Line(in.Kind), orDash(oneLine(in.Reference, 32)),
			in.AttemptCount, age(now.Sub(in.CreatedAt)), orDash(oneLine(in.LastError, 60)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.NextCursor != "" {
		fmt.Fprintf(env.Stdout, "next page: %s\n", termtext.Line(nextPageCommand(fs, f, page.NextCursor)))
	}
	return nil
}

// nextPageCommand is the command that lists the next page: this one with
// the same filters (--since and --until as the times they meant, so the
// window does not slide) and the cursor. The database URL is left out: it
// may hold a password.
func nextPageCommand(fs *flag.FlagSet, f audit.Filter, cursor string) string {
	words := []string{"outboxd", "intents", "list"}
	fs.Visit(func(fl *flag.Flag) {
		value := fl.Value.String()
		switch fl.Name {
		case "database-url", "cursor", "json":
			return
		case "since", "created-since":
			value = f.CreatedSince.UTC().Format(time.RFC3339Nano)
		case "until", "created-until":
			value = f.CreatedUntil.UTC().Format(time.RFC3339Nano)
		}
		words = append(words, "--"+fl.Name, shellQuote(value))
	})
	return strings.Join(append(words, "--cursor", shellQuote(cursor)), " ")
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,:/@%+=-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// builtinKinds and builtinProviders are the kinds and providers outboxd
// knows; a library user's own may also be in the database.
var (
	builtinKinds = []string{stripeprovider.KindPaymentIntent, stripeprovider.KindRefund, stripeprovider.KindCapture, stripeprovider.KindCancel,
		sendgridprovider.KindEmail, jetstreamprovider.KindPublish, amqpprovider.KindPublish, webhookprovider.KindPost}
	builtinProviders = []string{stripeprovider.Name, sendgridprovider.Name, jetstreamprovider.Name, amqpprovider.Name, webhookprovider.Name}
)

// checkKnown refuses a --kind or --provider that is neither built in nor
// found on any intent in the database: a typo would otherwise match
// nothing and look like an empty outbox.
func checkKnown(ctx context.Context, pool *pgxpool.Pool, flagName, column string, given, builtin []string) error {
	for _, v := range given {
		if slices.Contains(builtin, v) {
			continue
		}
		var found bool
		// Only for a name outboxd does not know: no index covers it.
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_intents WHERE `+column+` = $1)`, v).Scan(&found); err != nil {
			return err
		}
		if !found {
			return usageErrorf("%s %q: unknown %s%s; known: %s (and any other %s an intent in this database has)",
				flagName, v, column, didYouMean(v, builtin), strings.Join(builtin, ", "), column)
		}
	}
	return nil
}

func runIntentsShow(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("intents show", "intents show ID|KEY [flags]", `
Shows one intent, found by its numeric id or its idempotency key: its
fields, its payload (redacted by its provider's rule), every attempt (start,
end, outcome, HTTP status, whether the provider replayed a saved answer,
the provider's reference, the error) and its event log, oldest first.
It also says how to look the intent up at its provider (what to search
for, and where), to check an in_doubt intent before resolving or retrying
it. Exits 1 if there is no such intent.

The payload is redacted (an email's recipients, say). To see it whole,
add --reveal with a --reason: the reveal is written to the intent's event
log (who, when, why) and changes nothing else.

Examples:
  outboxd intents show 42
  outboxd intents show 42 --reveal --reason "ticket 881: look up the recipient in SendGrid"`, env)
	var dbURL string
	registerDatabaseFlag(fs, env, &dbURL)
	asJSON := fs.Bool("json", false, `print the intent as JSON: {"intent": {...}, "attempts": [...], "events": [...], "how_to_check": {...}}`)
	reveal := fs.Bool("reveal", false, "show the payload unredacted; needs --reason, and is recorded in the event log")
	reason := fs.String("reason", "", "with --reveal: why you need the unredacted payload (recorded in the event log)")
	actor := env.Getenv("USER")
	if actor == "" {
		actor = "operator"
	}
	fs.StringVar(&actor, "actor", actor, `with --reveal: who looks, recorded as "operator:<actor>"; the default is $USER, else "operator"`)
	idOrKey, err := parseOnePositional(fs, args, env, "ID|KEY")
	if err != nil {
		return err
	}
	if !*reveal && *reason != "" {
		return usageErrorf("--reason is only for --reveal")
	}
	if *reveal && strings.TrimSpace(*reason) == "" {
		return usageErrorf("--reveal needs --reason: say why you need the unredacted payload, for the event log")
	}
	store, pool, err := openStore(ctx, dbURL, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	var d audit.Detail
	if *reveal {
		d, err = store.Reveal(ctx, idOrKey, actor, *reason)
		if errors.Is(err, audit.ErrInvalidInput) {
			return actionUsageError(err)
		}
	} else {
		d, err = store.Get(ctx, idOrKey)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(env.Stdout, d)
	}
	return printDetail(env.Stdout, d, time.Now(), *reveal)
}

func printDetail(w io.Writer, d audit.Detail, now time.Time, revealed bool) error {
	in := d.Intent
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "intent\t%d\n", in.ID)
	fmt.Fprintf(tw, "state\t%s\n", termtext.Line(string(in.State)))
	fmt.Fprintf(tw, "kind\t%s (provider %s)\n", termtext.Line(in.Kind), termtext.Line(in.Provider))
	fmt.Fprintf(tw, "idempotency key\t%s\n", termtext.Line(in.IdempotencyKey))
	if in.Consumer != "" || in.MessageID != "" {
		fmt.Fprintf(tw, "message\t%s from consumer %s\n", orDash(termtext.Line(in.MessageID)), orDash(termtext.Line(in.Consumer)))
	}
	if in.Name != "" {
		fmt.Fprintf(tw, "name\t%s\n", termtext.Line(in.Name))
	}
	fmt.Fprintf(tw, "reference\t%s\n", orDash(termtext.Line(in.Reference)))
	fmt.Fprintf(tw, "attempts\t%d\n", in.AttemptCount)
	if !in.State.Terminal() {
		fmt.Fprintf(tw, "version\t%s (to act only on the intent as shown here: --if-version %s)\n", in.Version(), in.Version())
	}
	fmt.Fprintf(tw, "provider reference\t%s\n", orDash(termtext.Line(in.ProviderRef)))
	if in.ProviderKey != "" {
		fmt.Fprintf(tw, "provider key\t%s (namespace %s, key generation %d)\n", termtext.Line(in.ProviderKey), orDash(termtext.Line(in.Namespace)), in.KeyGeneration)
	}
	if in.MayHaveActed {
		fmt.Fprintf(tw, "may have acted\tyes: an attempt may have reached the provider\n")
	}
	if in.OrderingKey != "" {
		fmt.Fprintf(tw, "ordering key\t%s\n", termtext.Line(in.OrderingKey))
	}
	for _, dep := range d.After {
		fill := ""
		for _, f := range slices.Sorted(maps.Keys(dep.Fill)) {
			fill += fmt.Sprintf(", fills %s from its %s", termtext.Line(f), termtext.Line(dep.Fill[f]))
		}
		fmt.Fprintf(tw, "comes after\tintent %d (%s), now %s%s\n", dep.AfterID, termtext.Line(dep.AfterKey), dep.AfterState, fill)
	}
	fmt.Fprintf(tw, "last error\t%s\n", orDash(oneLine(in.LastError, 500)))
	fmt.Fprintf(tw, "created\t%s (%s ago)\n", stamp(in.CreatedAt), age(now.Sub(in.CreatedAt)))
	fmt.Fprintf(tw, "updated\t%s\n", stamp(in.UpdatedAt))
	if in.FinishedAt != nil {
		fmt.Fprintf(tw, "finished\t%s\n", stamp(*in.FinishedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	c := d.HowToCheck
	fmt.Fprintf(w, "\nhow to check at the provider (%s):\n", termtext.Line(c.Provider))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  search for\t%s\n", termtext.Line(c.Search))
	if c.URL != "" {
		fmt.Fprintf(tw, "  where\t%s\n", termtext.Line(c.URL))
	}
	if c.ObjectURL != "" {
		fmt.Fprintf(tw, "  object\t%s\n", termtext.Line(c.ObjectURL))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "  %s\n", termtext.Line(c.Note))

	if revealed {
		fmt.Fprintln(w, "\npayload (unredacted; this reveal is recorded in the event log):")
	} else {
		fmt.Fprintln(w, "\npayload (redacted; --reveal --reason TEXT shows it whole):")
	}
	var pretty strings.Builder
	var v any
	if err := json.Unmarshal(in.Payload, &v); err == nil {
		out, _ := json.MarshalIndent(v, "  ", "  ")
		pretty.Write(out)
	} else {
		pretty.Write(in.Payload)
	}
	fmt.Fprintf(w, "  %s\n", termtext.Clean(pretty.String(), true))

	fmt.Fprintf(w, "\nattempts (%d):\n", len(d.Attempts))
	if len(d.Attempts) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tSTARTED\tENDED\tOUTCOME\tHTTP\tREPLAYED\tPROVIDER REF\tERROR")
		for _, a := range d.Attempts {
			ended, outcome := "-", a.Outcome
			if a.FinishedAt != nil {
				ended = stamp(*a.FinishedAt)
			}
			if outcome == "" {
				outcome = "(no outcome: in flight or cut short)"
			}
			status := "-"
			if a.HTTPStatus != 0 {
				status = strconv.Itoa(a.HTTPStatus)
			}
			replayed := "no"
			if a.Replayed {
				replayed = "yes"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, stamp(a.StartedAt), ended, termtext.Line(outcome), status, replayed,
				orDash(termtext.Line(a.ProviderRef)), orDash(oneLine(a.Error, 120)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\nevents (%d):\n", len(d.Events))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tACTOR\tCHANGE\tREASON")
	for _, e := range d.Events {
		change := string(e.ToState)
		switch e.FromState {
		case "":
		case e.ToState:
			change += " (unchanged)"
		default:
			change = string(e.FromState) + " -> " + change
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", stamp(e.At), termtext.Line(e.Actor), termtext.Line(change), orDash(oneLine(e.Reason, 200)))
	}
	return tw.Flush()
}

// actionFlags are the flags every operator action takes.
type actionFlags struct {
	dbURL       string
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
Retries an in_doubt intent ('resend' is another name for it): moves it
back to pending under a new provider key with a fresh attempt budget, and
enqueues its dispatch job, in one transaction. Do this only after checking
at the provider that the effect did not happen ('outboxd intents show ID'
says where to look): the dispatcher then performs it once more.
Any other state: nothing changes, exit 1.
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
		note = "; a dispatch job is enqueued"
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

// parseOnePositional parses flags that may come before or after one
// positional argument, and requires exactly one.
func parseOnePositional(fs *flag.FlagSet, args []string, env Env, what string) (string, error) {
	return parsePositionals(fs, args, env, what, false)
}

// parsePositionals is parseOnePositional for a command whose one
// positional argument may be optional; "" when none is given.
func parsePositionals(fs *flag.FlagSet, args []string, env Env, what string, optional bool) (string, error) {
	if err := applyEnv(fs, env); err != nil {
		return "", err
	}
	var positional []string
	for {
		if err := parseFlags(fs, args, env); err != nil {
			return "", err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch len(positional) {
	case 0:
		if optional {
			return "", nil
		}
		return "", usageErrorf("give the intent's %s", what)
	case 1:
		if positional[0] == "" {
			return "", usageErrorf("the intent's %s is empty", what)
		}
		if err := bytecheck.String(positional[0]); err != nil {
			return "", usageErrorf("the intent's %s: %v", what, err)
		}
		return positional[0], nil
	}
	return "", usageErrorf("unexpected argument %q: give one intent's %s", positional[1], what)
}

// parseID reports whether s is a positive intent id.
func parseID(s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0
}

// openStore connects and returns an audit.Store that redacts with the
// rule of every provider that needs no connection to redact (stripe,
// sendgrid, rabbitmq; no credentials needed) and its pool, to close when
// done. Payloads of other kinds are hidden entirely.
func openStore(ctx context.Context, dbURL string, env Env) (*audit.Store, *pgxpool.Pool, error) {
	pf := providerFlags{enabled: "stripe,sendgrid,rabbitmq", stripeBase: stripeprovider.DefaultBaseURL, sendgridBase: sendgridprovider.DefaultBaseURL}
	registry, err := pf.registry(ctx, env, false, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	pool, err := openMigratedPool(ctx, dbURL, 4)
	if err != nil {
		return nil, nil, err
	}
	store, err := audit.New(pool, registry)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return store, pool, nil
}

func filterUsageError(err error) error {
	var fe *audit.FieldError
	if errors.As(err, &fe) {
		return usageErrorf("%s: %s", filterFlag(fe.Field), fe.Problem)
	}
	return err
}

func actionUsageError(err error) error {
	var fe *audit.FieldError
	if errors.As(err, &fe) {
		return usageErrorf("%s: %s", actionArgFlag(fe.Field), fe.Problem)
	}
	return err
}

// parseWhen reads an RFC 3339 time or a duration before now ("24h", "7d").
func parseWhen(flagName, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 0 {
		return time.Time{}, usageErrorf("%s %q: want an RFC 3339 time (2024-05-01T12:00:00Z) or a duration ago (90m, 24h, 7d)", flagName, v)
	}
	return now.Add(-d), nil
}

func stateList() string {
	names := make([]string, len(intenttype.States))
	for i, s := range intenttype.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// age formats a duration as an operator reads it: 45s, 12m, 5h12m, 3d4h.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine flattens s to one line of at most n runes, for a table cell.
func oneLine(s string, n int) string {
	s = termtext.Line(strings.Join(strings.Fields(s), " "))
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
