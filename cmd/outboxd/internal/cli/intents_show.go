package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/termtext"
)

func runIntentsShow(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("intents show", "intents show ID|KEY [flags]", `
Shows one intent, found by its numeric id or its idempotency key: its
fields, its payload (redacted by its provider's rule), every attempt (start,
end, outcome, HTTP status, whether the provider replayed a saved answer,
the provider's reference, the error) and its event log, oldest first.
It also says how to look the intent up at its provider (what to search
for, and where), to check an in_doubt intent before resolving or retrying
it, and, for an in_doubt intent, when the dispatcher looks it up again or
that it waits for an operator. Exits 1 if there is no such intent.

The payload is redacted (an email's recipients, say). To see it whole,
add --reveal with a --reason: the reveal is written to the intent's event
log (who, when, why) and changes nothing else.

Examples:
  outboxd intents show 42
  outboxd intents show 42 --reveal --reason "ticket 881: look up the recipient in SendGrid"`, env)
	var dbURL databaseURL
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

// printDetail prints an intent as `outboxd intents show` shows it: its
// fields, how to check it at its provider, its payload, its attempts and its
// events.
func printDetail(w io.Writer, d audit.Detail, now time.Time, revealed bool) error {
	if err := printFields(w, d, now); err != nil {
		return err
	}
	if err := printHowToCheck(w, d.HowToCheck); err != nil {
		return err
	}
	printPayload(w, d.Intent.Payload, revealed)
	if err := printAttempts(w, d.Attempts); err != nil {
		return err
	}
	return printEvents(w, d.Events)
}

func printFields(w io.Writer, d audit.Detail, now time.Time) error {
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
	if note := audit.MayHaveActedNote(in); note != "" {
		fmt.Fprintf(tw, "may have acted\t%s\n", note)
	}
	if in.State == intenttype.StateInDoubt {
		fmt.Fprintf(tw, "next look-up\t%s\n", nextLookUp(in.RecheckAt, now))
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
	return tw.Flush()
}

// nextLookUp says when the dispatcher next asks the provider about an
// in_doubt intent (its recheck_at), or that it waits for an operator.
func nextLookUp(at *time.Time, now time.Time) string {
	switch {
	case at == nil:
		return "none scheduled: it waits for an operator to resolve or retry it"
	case !at.After(now):
		return fmt.Sprintf("due since %s: the dispatcher's next re-check pass looks it up", stamp(*at))
	}
	return fmt.Sprintf("%s (in %s), by the dispatcher; until then, or instead, an operator may resolve or retry it", stamp(*at), age(at.Sub(now)))
}

func printHowToCheck(w io.Writer, c audit.Check) error {
	fmt.Fprintf(w, "\nhow to check at the provider (%s):\n", termtext.Line(c.Provider))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
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
	return nil
}

// printPayload prints the payload indented when it is JSON, as stored
// otherwise.
func printPayload(w io.Writer, payload json.RawMessage, revealed bool) {
	if revealed {
		fmt.Fprintln(w, "\npayload (unredacted; this reveal is recorded in the event log):")
	} else {
		fmt.Fprintln(w, "\npayload (redacted; --reveal --reason TEXT shows it whole):")
	}
	var pretty strings.Builder
	var v any
	if err := json.Unmarshal(payload, &v); err == nil {
		out, _ := json.MarshalIndent(v, "  ", "  ")
		pretty.Write(out)
	} else {
		pretty.Write(payload)
	}
	fmt.Fprintf(w, "  %s\n", termtext.Clean(pretty.String(), true))
}

func printAttempts(w io.Writer, attempts []intenttype.Attempt) error {
	fmt.Fprintf(w, "\nattempts (%d):\n", len(attempts))
	if len(attempts) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTARTED\tENDED\tOUTCOME\tHTTP\tREPLAYED\tPROVIDER REF\tERROR")
	for _, a := range attempts {
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
	return tw.Flush()
}

func printEvents(w io.Writer, events []intenttype.Event) error {
	fmt.Fprintf(w, "\nevents (%d):\n", len(events))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  AT\tACTOR\tCHANGE\tREASON")
	for _, e := range events {
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
