package intents_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
)

// exampleDatabase gives an example a fresh migrated database with a
// note_tags table, and a function that drops it.
func exampleDatabase() (*pgxpool.Pool, func()) {
	pool, cleanup := pgtest.ExampleDB()
	if _, err := pool.Exec(context.Background(), `CREATE TABLE note_tags (note_id text, tag text)`); err != nil {
		panic(err)
	}
	return pool, cleanup
}
