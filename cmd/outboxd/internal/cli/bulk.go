package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/termtext"
	"golang.org/x/term"
)

// bulkHelp is the bulk form's part of retry's, cancel's and resolve's help.
const bulkHelp = `
In bulk: with --state (and any of the filters 'intents list' takes:
--kind, --provider, --consumer, --message-id, --reference, --since,
--until) instead of an ID, the action is applied to every intent they
select, one at a time: each in its own transaction with its own event, and
only if the intent is still in the state it was listed in (a concurrent
change is refused, not overridden). --reason is required. --dry-run lists
what would change and changes nothing; otherwise the command asks for
confirmation, or, when stdin is not a terminal, needs --yes. It prints
every intent's outcome and a summary (done, refused and why, errors), and
exits 1 if any intent was refused or failed.
`

// runBulkAction applies a to every intent af's filters select.
func runBulkAction(ctx context.Context, env Env, af *actionFlags, a audit.BulkAction) error {
	if *af.expectState != "" || *af.ifVersion != "" {
		return usageErrorf("--expect-state and --if-version are for one intent: in bulk, each intent is acted on only if it is still in the state and at the version it was listed at")
	}
	if *af.dryRun && *af.yes {
		return usageErrorf("--dry-run changes nothing; --yes is for a real run: give one of them")
	}
	f, err := af.filter.filter(time.Now())
	if err != nil {
		return err
	}
	if len(f.States) == 0 {
		return usageErrorf("--state is required in bulk: the state the intents are in (%s)", allowedStates(a.Kind))
	}
	if err := f.Validate(); err != nil {
		return filterUsageError(err)
	}
	if err := (audit.Action{Kind: a.Kind, IntentID: 1, As: a.As, Actor: a.Actor, Reason: a.Reason}).Validate(); err != nil {
		return actionUsageError(err)
	}
	store, pool, err := openStore(ctx, af.dbURL, env)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := af.filter.checkKnown(ctx, pool); err != nil {
		return err
	}
	verb := actionVerb(a.Kind)
	printer := func(w io.Writer) func(audit.BulkItem) {
		if *af.asJSON {
			return nil
		}
		return func(it audit.BulkItem) { printBulkItem(w, it) }
	}
	if !*af.dryRun && !*af.yes {
		if !isTerminal(env.Stdin) {
			return usageErrorf("a bulk %s needs --yes when stdin is not a terminal to confirm on (run it with --dry-run first to see what would change)", verb)
		}
		preview, err := store.ActAll(ctx, f, a, true, printer(env.Stdout))
		if err != nil {
			return bulkError(err)
		}
		if preview.Would == 0 {
			fmt.Fprintf(env.Stdout, "%d intents match; none can be changed: nothing to do\n", preview.Matched)
			return nil
		}
		fmt.Fprintf(env.Stdout, "%s %d of the %d matching intents (as %s)? type yes to go on: ", verb, preview.Would, preview.Matched, termtext.Line(audit.ActorPrefix+strings.TrimPrefix(a.Actor, audit.ActorPrefix)))
		answer, _ := bufio.NewReader(env.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "yes" && a != "y" {
			fmt.Fprintln(env.Stdout, "nothing was changed")
			return nil
		}
		// Confirmed: act on what was shown, each intent at the version it
		// was shown at, and on nothing that matches only now.
		a.Seen = map[int64]intenttype.Version{}
		for _, it := range preview.Items {
			if it.Outcome == audit.BulkWould {
				a.Seen[it.IntentID] = it.Version
			}
		}
	}
	res, err := store.ActAll(ctx, f, a, *af.dryRun, printer(env.Stdout))
	if err != nil && res.Matched == 0 {
		return bulkError(err)
	}
	if *af.asJSON {
		if jerr := writeJSON(env.Stdout, res); jerr != nil {
			return jerr
		}
	} else {
		printBulkSummary(env.Stdout, verb, res)
	}
	if err != nil {
		return fmt.Errorf("stopped after %d of %d intents: %w", len(res.Items), res.Matched, err)
	}
	if !res.DryRun && res.Refused+res.Errors > 0 {
		return fmt.Errorf("%d intents refused, %d failed (listed above); they were not changed", res.Refused, res.Errors)
	}
	return nil
}

func printBulkItem(w io.Writer, it audit.BulkItem) {
	line := fmt.Sprintf("intent %d (%s): %s -> %s: ", it.IntentID, termtext.Line(it.Kind), it.From, it.To)
	switch it.Outcome {
	case audit.BulkWould:
		line += "would change"
	case audit.BulkDone:
		line += "done"
	default:
		line += it.Outcome + ": " + oneLine(it.Why, 300)
	}
	fmt.Fprintln(w, line)
}

func printBulkSummary(w io.Writer, verb string, res audit.BulkResult) {
	if res.DryRun {
		fmt.Fprintf(w, "dry run, nothing changed: %d matched, %d would %s, %d would be refused\n", res.Matched, res.Would, verb, res.Refused)
		return
	}
	fmt.Fprintf(w, "%s: %d matched, %d done, %d refused, %d errors\n", verb, res.Matched, res.Done, res.Refused, res.Errors)
}

func bulkError(err error) error {
	var fe *audit.FieldError
	switch {
	case !errors.As(err, &fe):
		return err
	case errors.Is(err, audit.ErrInvalidFilter):
		return filterUsageError(err)
	case fe.Field == "filter":
		return usageErrorf("the filters %s", fe.Problem)
	}
	return actionUsageError(err)
}

// allowedStates names the states kind is allowed from.
func allowedStates(kind audit.ActionKind) string {
	var names []string
	for _, s := range kind.AllowedFrom() {
		names = append(names, string(s))
	}
	return strings.Join(names, " or ")
}

// isTerminal reports whether r is a terminal to ask a question on.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	// A character device is not enough: /dev/null is one. Only a terminal
	// answers the terminal's ioctl.
	return ok && term.IsTerminal(int(f.Fd()))
}
