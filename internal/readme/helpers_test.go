package readme_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// exampleDatabase gives an example a fresh database migrated as `outboxd
// migrate` leaves it, with the example's note_tags table, and a function
// that drops it.
func exampleDatabase() (*pgxpool.Pool, func()) {
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "outbox_readme_" + hex.EncodeToString(b)
	if err := pgtest.CreateDatabase(ctx, name, pgtest.Template()); err != nil {
		panic(err)
	}
	url, err := pgtest.WithDatabase(pgtest.ServerURL(), name)
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE note_tags (note_id text, tag text)`); err != nil {
		panic(err)
	}
	return pool, func() {
		pool.Close()
		_ = pgtest.DropDatabase(context.Background(), name)
	}
}
