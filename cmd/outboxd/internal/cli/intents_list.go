package cli

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/termtext"
	"github.com/outboxkit/outbox/providers/amqpprovider"
	"github.com/outboxkit/outbox/providers/jetstreamprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
	"github.com/outboxkit/outbox/providers/webhookprovider"
)

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
	var dbURL databaseURL
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

func stateList() string {
	names := make([]string, len(intenttype.States))
	for i, s := range intenttype.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}
