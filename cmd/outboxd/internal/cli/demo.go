package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/demo"
	"github.com/outboxkit/outbox/internal/testkit/pgadmin"
)

// demoHelp is what 'outboxd demo --help' says the command does.
const demoHelp = `
Runs the whole pipeline end to end, in a fresh database of its own on the
server at --database-url (dropped afterwards unless --keep-database):

  1. a simulated at-least-once broker delivers order messages to concurrent
     consumers, with sequential and concurrent duplicates, and consumers that
     crash after committing but before acknowledging;
  2. each consumer stores the order and records a Stripe payment, for some
     orders a partial refund, and a SendGrid receipt email from a template,
     in one transaction with its processed marker; the refund and the
     receipt come after the payment (the refund takes its PaymentIntent id);
  3. the dispatcher performs the intents against local doubles of Stripe and
     SendGrid that lose responses, fail with 500 after acting, and rate-limit.

While it runs, a progress line twice a second counts the broker's
deliveries and acks, and the intents by state: open (pending or
dispatching: not performed yet), waiting (a refund or receipt waiting for
its payment), succeeded, in_doubt, failed.

It ends with a report taken from the doubles' own records, and what its
rows mean. It exits 1 if any effect happened twice or any intent was lost.
Intents held in_doubt are the honest outcome of an email whose answer was
lost after SendGrid may have sent it: SendGrid keeps no idempotency key and
cannot be asked here, so the outbox holds it for an operator rather than
send it twice. With --keep-database the scratch database stays, so you can
look at them as an operator would (the report prints the command).`

func runDemo(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("demo", "demo [flags]", demoHelp, env)
	var dbURL databaseURL
	registerDatabaseFlag(fs, env, &dbURL)
	orders := fs.Int("orders", demo.DefaultOrders, "order messages to deliver (1 to 100000)")
	consumers := fs.Int("consumers", demo.DefaultConsumers, "concurrent consumers (1 to 256)")
	seed := fs.Uint64("seed", 1, "seed for duplicates, crashes and faults; the same seed repeats the run's choices")
	noFaults := fs.Bool("no-faults", false, "switch the doubles' fault injection off")
	keep := fs.Bool("keep-database", false, "keep the scratch database for inspection")
	timeout := fs.Duration("timeout", demo.DefaultTimeout, "give up after this long")
	asJSON := fs.Bool("json", false, "print the report as JSON on stdout (progress still goes to stderr)")
	var logs logFlags
	logs.register(fs)
	logs.level = "error"
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *orders < 1 || *orders > 100000 {
		return usageErrorf("--orders must be between 1 and 100000, got %d", *orders)
	}
	if *consumers < 1 || *consumers > 256 {
		return usageErrorf("--consumers must be between 1 and 256, got %d", *consumers)
	}
	if *timeout <= 0 {
		return usageErrorf("--timeout must be positive, got %s", *timeout)
	}
	if err := dbURL.check(); err != nil {
		return err
	}
	logger, err := logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	// Ctrl-C stops the run and still drops the scratch database; a
	// second one exits at once and leaves it behind.
	ctx, stop := stopOnSignal(ctx, env)
	defer stop()
	report, err := demo.Run(ctx, demo.Config{
		ServerURL: dbURL.url, Orders: *orders, Consumers: *consumers, Seed: *seed,
		Faults: !*noFaults, KeepDatabase: *keep, Timeout: *timeout,
		Progress: env.Stderr, Logger: logger,
	})
	if report != nil {
		if *asJSON {
			enc := json.NewEncoder(env.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(report); err != nil {
				return err
			}
		} else {
			printReport(env.Stdout, report)
			explainReport(env.Stdout, report, dbURL.url)
		}
	}
	if errors.Is(err, demo.ErrEffectsWrong) {
		return fmt.Errorf("%w (see the report)", err)
	}
	return err
}

func cents(n int64) string { return fmt.Sprintf("$%d.%02d", n/100, n%100) }

func printReport(w io.Writer, r *demo.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, value any) { fmt.Fprintf(tw, "  %s\t%v\n", label, value) }
	fmt.Fprintln(tw, "\nDemo report")
	row("orders", r.Orders)
	row("messages delivered", r.MessagesDelivered)
	row("  of which duplicates", r.DuplicatesDelivered)
	row("duplicates absorbed", r.DuplicatesAbsorbed)
	row("consumer crashes after commit", r.ConsumerCrashes)
	row("intents recorded", r.IntentsRecorded)
	row("payments at Stripe double", r.PaymentsAtStripe)
	row("refunds at Stripe double", fmt.Sprintf("%d (%s refunded, each after its payment)", r.RefundsAtStripe, cents(r.AmountRefunded)))
	row("emails at SendGrid double", r.EmailsAtSendGrid)
	row("provider replays", r.ProviderReplays)
	row("reconciled after ambiguity", r.Reconciled)
	row("succeeded", r.Succeeded)
	row("in_doubt", withKinds(r.InDoubt, r.InDoubtByKind))
	row("failed", fmt.Sprintf("%d (declined cards: %d)", r.Failed, r.DeclinedCards))
	row("cancelled: their payment failed", r.Cancelled)
	row("waiting for an in_doubt payment", r.Waiting)
	row("lost", r.Lost)
	row("duplicate effects", r.DuplicateEffects)
	kinds := make([]string, 0, len(r.FaultsInjected))
	for k := range r.FaultsInjected {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		row("fault "+k, r.FaultsInjected[k])
	}
	row("time", (time.Duration(r.Seconds * float64(time.Second))).Round(time.Millisecond))
	if r.DatabaseKept {
		row("database (kept)", r.Database)
	}
	if r.OK() {
		row("result", "OK: every effect at most once, no intent lost")
	} else {
		row("result", "FAILED")
		for _, p := range r.Problems {
			row("problem", p)
		}
	}
	tw.Flush()
}

// withKinds is n followed by its count per kind: "7 (sendgrid.email 7)".
func withKinds(n int, byKind map[string]int) string {
	if n == 0 {
		return "0"
	}
	parts := []string{}
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

// explainReport says what the report's rows that surprise a newcomer mean,
// and how to look at the intents an operator would look at.
func explainReport(w io.Writer, r *demo.Report, serverURL string) {
	fmt.Fprint(w, `
What the rows mean:
  in_doubt   an email whose answer was lost, or came back 500, after SendGrid
             may have sent it. SendGrid keeps no idempotency key and cannot be
             asked here (its Email Activity look-up is a paid add-on), so the
             outbox holds it for an operator rather than send it twice. A
             payment in the same case is looked up at Stripe by its key
             ("reconciled after ambiguity") and settles.
  failed     declined cards; the refund and receipt that come after each such
             payment are cancelled with that reason ("cancelled"), never sent.
  waiting    refunds and receipts still waiting for a payment held in_doubt.
`)
	dbURL, err := pgadmin.WithDatabase(serverURL, r.Database)
	if err != nil {
		return
	}
	if r.DatabaseKept {
		fmt.Fprintf(w, `
The scratch database %s is kept. Look at its in_doubt
intents as an operator would, then drop it:
  export DATABASE_URL='%s'
  outboxd intents list --state in_doubt
  outboxd intents show ID    # the intent, its trail, how to check it at its provider
  psql '%s' -c 'DROP DATABASE %s'
`, r.Database, redactURL(dbURL), redactURL(serverURL), r.Database)
		return
	}
	fmt.Fprintf(w, "\nThe scratch database %s was dropped.\nRun with --keep-database to keep it and look at the in_doubt intents as an\noperator would (outboxd intents list --state in_doubt).\n", r.Database)
}
