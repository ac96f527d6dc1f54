package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/intentstore"
	"github.com/outboxkit/outbox/migrations"
)

// DefaultDatabaseURL is used when neither --database-url nor DATABASE_URL
// is set: the local server, as on a developer's machine.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// databaseURL is the --database-url flag: the URL, and where it came from
// (the flag, OUTBOXD_DATABASE_URL, DATABASE_URL or the default), so that
// an error about it names what the user set.
type databaseURL struct {
	url    string
	source string
}

func (d *databaseURL) String() string { return d.url }

// Set is the command line's --database-url; applyEnv then says when the
// value came from OUTBOXD_DATABASE_URL instead (setSource).
func (d *databaseURL) Set(v string) error {
	d.url, d.source = v, "--database-url"
	return nil
}

func (d *databaseURL) setSource(variable string) { d.source = variable }

// registerDatabaseFlag registers --database-url, whose default is
// DATABASE_URL, else DefaultDatabaseURL.
func registerDatabaseFlag(fs *flag.FlagSet, env Env, target *databaseURL) {
	*target = databaseURL{url: env.Getenv("DATABASE_URL"), source: "DATABASE_URL"}
	if target.url == "" {
		*target = databaseURL{url: DefaultDatabaseURL, source: "the default database URL"}
	}
	fs.Var(target, "database-url", "PostgreSQL `URL` (env DATABASE_URL)")
}

// config parses the URL; an invalid one is a usage error naming where it
// came from, without the password pgx would echo.
func (d databaseURL) config() (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, usageErrorf("%s is not a valid PostgreSQL URL: %v", d.source, redactURLError(err))
	}
	return cfg, nil
}

// check refuses an invalid URL before a command hands it to a package
// that would report it without saying where it came from.
func (d databaseURL) check() error {
	_, err := d.config()
	return err
}

// openPool connects to the database and checks it answers, so a wrong URL
// fails at start with a clear message, as does a pooler the pool cannot
// work through (checkPooler). The password is never printed.
func openPool(ctx context.Context, db databaseURL, maxConns int32) (*pgxpool.Pool, error) {
	return connectPool(ctx, db, maxConns, "")
}

// openSessionPool is openPool for a command that needs server sessions of
// its own, for the reason needs: it refuses any transaction pooler.
func openSessionPool(ctx context.Context, db databaseURL, maxConns int32, needs string) (*pgxpool.Pool, error) {
	return connectPool(ctx, db, maxConns, needs)
}

func connectPool(ctx context.Context, db databaseURL, maxConns int32, needs string) (*pgxpool.Pool, error) {
	cfg, err := db.config()
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database %s on %s:%d: %w", cfg.ConnConfig.Database, cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	if err := checkPooler(ctx, db, pool, needs); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// checkPooler refuses, at start, a connection through a pooler in
// transaction mode (intentstore.SessionsPooled) that the command cannot
// work through: statements prepared in one session and run in another
// (pgx's default), or a command that needs a session (needs, its reason).
func checkPooler(ctx context.Context, db databaseURL, pool *pgxpool.Pool, needs string) error {
	pooled, err := intentstore.SessionsPooled(ctx, pool)
	if err != nil || !pooled {
		return err
	}
	cfg := pool.Config().ConnConfig
	where := fmt.Sprintf("%s reaches %s:%d through a pooler in transaction mode (PgBouncer pool_mode = transaction), which keeps no session", db.source, cfg.Host, cfg.Port)
	if needs != "" {
		return fmt.Errorf("%s; %s: point it at Postgres itself (docs/operating.md, \"Behind a connection pooler\")", where, needs)
	}
	if intentstore.Prepares(cfg) {
		return fmt.Errorf("%s; add default_query_exec_mode=exec to the URL, so that no statement is prepared in one session and run in another (docs/operating.md, \"Behind a connection pooler\")", where)
	}
	return nil
}

// openPoolWaiting is openPool for a daemon: while the server is there but
// refuses connections for now (53300 too many connections, 57P03 starting
// up or shutting down), it logs and tries again with backoff, as a running
// dispatcher rides the same out, instead of exiting at start. Every other
// error (a wrong URL, a password, a database that does not exist) fails at
// once.
func openPoolWaiting(ctx context.Context, db databaseURL, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	wait := time.Second
	for {
		pool, err := openPool(ctx, db, maxConns)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || (pgErr.Code != "53300" && pgErr.Code != "57P03") {
			return pool, err
		}
		logger.WarnContext(ctx, "the database refuses connections for now; trying again", "sqlstate", pgErr.Code, "error", pgErr.Message, "in", wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (stopped while waiting for it)", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// openMigratedPool is openPool for a command that reads or writes the
// outbox's tables: a database whose outbox schema is missing or not
// current is refused with one error naming `outboxd migrate`, before the
// command reads any input or writes anything.
func openMigratedPool(ctx context.Context, db databaseURL, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, db, maxConns)
	if err != nil {
		return nil, err
	}
	if err := migrations.CheckSchema(ctx, pool); err != nil {
		cfg := pool.Config().ConnConfig
		pool.Close()
		return nil, fmt.Errorf("database %q on %s:%d: %w", cfg.Database, cfg.Host, cfg.Port, err)
	}
	return pool, nil
}

// redactURLError drops pgx's echo of the URL, which may hold a password.
func redactURLError(err error) string {
	msg := err.Error()
	if i := len("cannot parse `"); len(msg) > i && msg[:i] == "cannot parse `" {
		for j := i; j < len(msg); j++ {
			if msg[j] == '`' {
				return "cannot parse the URL" + msg[j+1:]
			}
		}
	}
	return msg
}
