package cli

import (
	"context"
	"flag"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/providers/stripeprovider"
)

// filterFlags are the flags that select intents, shared by intents list
// and the bulk form of retry, cancel and resolve.
type filterFlags struct {
	fs                           *flag.FlagSet
	states, kinds, providerNames listFlag
	consumer, messageID, ref     string
	since, until                 string
}

// filterFlagNames are the flags registerFilterFlags adds.
var filterFlagNames = []string{"state", "kind", "provider", "consumer", "message-id", "reference", "since", "created-since", "until", "created-until"}

func registerFilterFlags(fs *flag.FlagSet) *filterFlags {
	ff := &filterFlags{fs: fs}
	fs.Var(&ff.states, "state", "keep intents in this state: "+stateList()+" (repeatable, or comma-separated)")
	fs.Var(&ff.kinds, "kind", "keep intents of this kind, e.g. "+stripeprovider.KindPaymentIntent+" (repeatable)")
	fs.Var(&ff.providerNames, "provider", "keep intents of this provider: "+strings.Join(builtinProviders, ", ")+" (repeatable)")
	fs.StringVar(&ff.consumer, "consumer", "", "keep intents recorded by this consumer")
	fs.StringVar(&ff.messageID, "message-id", "", "keep intents recorded for this message id")
	fs.StringVar(&ff.ref, "reference", "", "keep intents with this business reference")
	fs.StringVar(&ff.since, "since", "", "keep intents created at or after this time: RFC 3339 (2024-05-01T12:00:00Z) or a duration ago (90m, 24h, 7d)")
	fs.StringVar(&ff.since, "created-since", "", "the same as --since")
	fs.StringVar(&ff.until, "until", "", "keep intents created before this time: RFC 3339 or a duration ago")
	fs.StringVar(&ff.until, "created-until", "", "the same as --until")
	return ff
}

// set reports whether any filter flag was given.
func (ff *filterFlags) set() bool {
	given := false
	ff.fs.Visit(func(f *flag.Flag) {
		for _, name := range filterFlagNames {
			given = given || f.Name == name
		}
	})
	return given
}

// filter is the audit.Filter the flags describe.
func (ff *filterFlags) filter(now time.Time) (audit.Filter, error) {
	f := audit.Filter{Kinds: ff.kinds, Providers: ff.providerNames, Consumer: ff.consumer, MessageID: ff.messageID, Reference: ff.ref}
	for _, s := range ff.states {
		f.States = append(f.States, intenttype.State(s))
	}
	var err error
	if f.CreatedSince, err = parseWhen("--since", ff.since, now); err != nil {
		return f, err
	}
	if f.CreatedUntil, err = parseWhen("--until", ff.until, now); err != nil {
		return f, err
	}
	return f, nil
}

// checkKnown refuses a --kind or --provider no intent could have.
func (ff *filterFlags) checkKnown(ctx context.Context, pool *pgxpool.Pool) error {
	if err := checkKnown(ctx, pool, "--kind", "kind", ff.kinds, builtinKinds); err != nil {
		return err
	}
	return checkKnown(ctx, pool, "--provider", "provider", ff.providerNames, builtinProviders)
}
