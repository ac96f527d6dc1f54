package migrations_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/migrations"
)

// emptyDB returns a pool on a fresh database with no schema at all, and a
// function that opens more pools on it (one per simulated process).
func emptyDB(t *testing.T) *pgxpool.Pool {
	pool, _ := emptyDBURL(t)
	return pool
}

func emptyDBURL(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	return pgtest.NewEmptyDB(t)
}

func TestUpTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDB(t)
	m := migrations.New(pool, nil)
	if err := m.Check(ctx); !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("Check on an empty database = %v, want ErrNotMigrated", err)
	}
	first, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Outbox) != len(migrations.All()) || len(first.River) == 0 {
		t.Fatalf("first Up applied %+v", first)
	}
	second, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Outbox) != 0 || len(second.River) != 0 {
		t.Fatalf("second Up applied %+v, want nothing", second)
	}
	if err := m.Check(ctx); err != nil {
		t.Fatalf("Check after Up: %v", err)
	}
}

func TestConcurrentUpIsSerialised(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := emptyDBURL(t)
	var wg sync.WaitGroup
	results := make([]migrations.Result, 4)
	errs := make([]error, 4)
	for i := range results {
		// One pool per migrator, as separate processes would have.
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = migrations.New(pool, nil).Up(ctx)
		}()
	}
	testkit.WaitWithin(t, &wg, time.Minute)
	applied := 0
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
		applied += len(results[i].Outbox)
	}
	if applied != len(migrations.All()) {
		t.Fatalf("concurrent migrators applied %d outbox versions in all, want %d", applied, len(migrations.All()))
	}
}

func TestDownThenUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDB(t)
	m := migrations.New(pool, nil)
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	down, err := m.DownTo(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(down.Outbox) != len(migrations.All()) {
		t.Fatalf("DownTo(0) rolled back %v", down.Outbox)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'outbox\_%' AND tablename <> 'outbox_migration'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d outbox tables left after DownTo(0)", tables)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("Up after down: %v", err)
	}
	if _, err := m.DownTo(ctx, 99); err == nil {
		t.Fatal("DownTo(99) accepted a version that does not exist")
	}
}

func TestEventsAreAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_intents (idempotency_key, kind, provider, payload) VALUES ('k', 'x.y', 'x', '{}');
		INSERT INTO outbox_events (intent_id, actor, to_state) SELECT id, 'test', 'pending' FROM outbox_intents`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox_events SET reason = 'rewritten'`); err == nil {
		t.Fatal("an event was updated")
	}
}
