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

	"github.com/outboxkit/outbox/migrations"
)

// DefaultDatabaseURL is used when neither --database-url nor DATABASE_URL
// is set: the local server, as on a developer's machine.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func registerDatabaseFlag(fs *flag.FlagSet, env Env, target *string) {
	def := env.Getenv("DATABASE_URL")
	if def == "" {
		def = DefaultDatabaseURL
	}
	fs.StringVar(target, "database-url", def, "PostgreSQL URL (env DATABASE_URL)")
}

// openPool connects to the database and checks it answers, so a wrong URL
// fails at start with a clear message. The password is never printed.
func openPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErrorf("--database-url is not a valid PostgreSQL URL: %v", redactURLError(err))
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
	return pool, nil
}

// openPoolWaiting is openPool for a daemon: while the server is there but
// refuses connections for now (53300 too many connections, 57P03 starting
// up or shutting down), it logs and tries again with backoff, as a running
// dispatcher rides the same out, instead of exiting at start. Every other
// error (a wrong URL, a password, a database that does not exist) fails at
// once.
func openPoolWaiting(ctx context.Context, url string, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	wait := time.Second
	for {
		pool, err := openPool(ctx, url, maxConns)
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
func openMigratedPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := openPool(ctx, url, maxConns)
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
