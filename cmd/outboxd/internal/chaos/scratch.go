package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/testkit/pgadmin"
	"github.com/outboxkit/outbox/migrations"
)

// ScratchDatabase creates a fresh database on the server at serverURL,
// migrates it, and returns its name, its URL and a function that drops it.
// The suite terminates connections to the database it runs on, so it should
// never run on one that matters.
func ScratchDatabase(ctx context.Context, serverURL string, logger *slog.Logger) (name, dbURL string, drop func(context.Context) error, err error) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name = fmt.Sprintf("outboxd_chaos_%s_%s", time.Now().UTC().Format("20060102_150405"), hex.EncodeToString(suffix))
	if err := pgadmin.CreateDatabase(ctx, serverURL, name, ""); err != nil {
		return "", "", nil, err
	}
	drop = func(ctx context.Context) error { return pgadmin.DropDatabase(ctx, serverURL, name) }
	dbURL, err = pgadmin.WithDatabase(serverURL, name)
	if err != nil {
		_ = drop(context.WithoutCancel(ctx))
		return "", "", nil, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		_ = drop(context.WithoutCancel(ctx))
		return "", "", nil, fmt.Errorf("chaos: connect to %s: %w", name, err)
	}
	_, err = migrations.New(pool, logger).Up(ctx)
	pool.Close()
	if err != nil {
		_ = drop(context.WithoutCancel(ctx))
		return "", "", nil, fmt.Errorf("chaos: migrate %s: %w", name, err)
	}
	return name, dbURL, drop, nil
}
