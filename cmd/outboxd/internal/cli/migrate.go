package cli

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/migrations"
)

func runMigrate(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("migrate", "migrate [flags]", `
Creates or upgrades River's tables and the outbox's tables in the database.
Running it again is a no-op; two processes running it at once are serialised
by an advisory lock. --down-to rolls the outbox's tables back (River's stay).`, env)
	var dbURL databaseURL
	registerDatabaseFlag(fs, env, &dbURL)
	downTo := fs.Int("down-to", -1, "roll the outbox schema back to this version (0 removes it); -1 migrates up")
	var logs logFlags
	logs.register(fs)
	// Each applied version is printed on stdout; River's own logs are for
	// --log-level info.
	logs.level, fs.Lookup("log-level").DefValue = "warn", "warn"
	if err := parse(fs, args, env); err != nil {
		return err
	}
	if *downTo < -1 || *downTo > migrations.Latest() {
		return usageErrorf("--down-to %d: want a version from 0 to %d", *downTo, migrations.Latest())
	}
	logger, err := logs.logger(env.Stderr)
	if err != nil {
		return err
	}
	pool, err := openSessionPool(ctx, dbURL, 4, "outboxd migrate holds a session's advisory lock while it migrates")
	if err != nil {
		return err
	}
	defer pool.Close()
	m := migrations.New(pool, logger)
	if *downTo >= 0 {
		res, err := m.DownTo(ctx, *downTo)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "rolled back outbox versions %v; now at version %d\n", res.Outbox, *downTo)
		return nil
	}
	fmt.Fprintln(env.Stdout, "migrating (River, then outbox)...")
	res, err := m.Up(ctx)
	if err != nil {
		return err
	}
	if len(res.River) == 0 && len(res.Outbox) == 0 {
		fmt.Fprintf(env.Stdout, "already up to date (outbox version %d)\n", migrations.Latest())
		return nil
	}
	fmt.Fprintf(env.Stdout, "applied River versions %v and outbox versions %v; outbox now at version %d\n", res.River, res.Outbox, migrations.Latest())
	return nil
}
