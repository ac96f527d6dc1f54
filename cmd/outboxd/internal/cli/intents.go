package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/internal/bytecheck"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/stripeprovider"
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
func openStore(ctx context.Context, dbURL databaseURL, env Env) (*audit.Store, *pgxpool.Pool, error) {
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

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
