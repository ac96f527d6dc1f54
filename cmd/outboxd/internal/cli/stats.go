package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/termtext"
)

func runStats(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("stats", "stats [flags]", `
Counts intents by state and by kind, and shows how many are in_doubt (each
waits for an operator: outboxd intents list --state in_doubt) and how old
the oldest pending or dispatching intent is (a growing age means the
dispatcher is behind or not running).

While counting is slow (a backlog: counting reads every unfinished intent),
it shows the running dispatchers' last count, a few seconds old, and says
when it was taken; --live counts now, whatever it costs.`, env)
	var dbURL databaseURL
	registerDatabaseFlag(fs, env, &dbURL)
	asJSON := fs.Bool("json", false, `print the counts as JSON: {"total", "by_state", "by_kind_state", "in_doubt", "oldest_pending_age_seconds", "counted_at", "reused"}`)
	live := fs.Bool("live", false, "count now, even while the dispatchers count for the readers (a backlog)")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	pool, err := openMigratedPool(ctx, dbURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := audit.New(pool, nil)
	if err != nil {
		return err
	}
	stats := store.Stats
	if *live {
		stats = store.LiveStats
	}
	st, err := stats(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(env.Stdout, st)
	}

	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	header := []string{"KIND"}
	for _, s := range intenttype.States {
		header = append(header, strings.ToUpper(string(s)))
	}
	header = append(header, "TOTAL")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	kinds := make([]string, 0, len(st.ByKindState))
	for k := range st.ByKindState {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	row := func(name string, counts map[intenttype.State]int) {
		cells := []string{name}
		total := 0
		for _, s := range intenttype.States {
			cells = append(cells, fmt.Sprint(counts[s]))
			total += counts[s]
		}
		cells = append(cells, fmt.Sprint(total))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	for _, k := range kinds {
		row(termtext.Line(k), st.ByKindState[k])
	}
	row("all kinds", st.ByState)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout)
	fmt.Fprintf(env.Stdout, "in_doubt: %d", st.InDoubt)
	if st.InDoubt > 0 {
		fmt.Fprint(env.Stdout, " (waiting for an operator: outboxd intents list --state in_doubt)")
	}
	fmt.Fprintln(env.Stdout)
	if st.ByState[intenttype.StatePending]+st.ByState[intenttype.StateDispatching] == 0 {
		fmt.Fprintln(env.Stdout, "oldest pending: none")
	} else {
		fmt.Fprintf(env.Stdout, "oldest pending: %s\n", age(st.OldestPendingAge))
	}
	if st.Reused {
		fmt.Fprintf(env.Stdout, "counted by the dispatchers at %s (counting is slow; --live counts now)\n", st.CountedAt.UTC().Format(time.RFC3339))
	}
	return nil
}
