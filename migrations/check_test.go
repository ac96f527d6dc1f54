package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/migrations"
)

func TestCheckSchemaNamesTheVersionsAndTheCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyDB(t)
	latest := migrations.Latest()

	check := func(when string, wantCurrent int) {
		t.Helper()
		err := migrations.CheckSchema(ctx, pool)
		if wantCurrent == latest {
			if err != nil {
				t.Fatalf("%s: CheckSchema = %v, want nil", when, err)
			}
			return
		}
		if !errors.Is(err, migrations.ErrNotMigrated) {
			t.Fatalf("%s: CheckSchema = %v, want ErrNotMigrated", when, err)
		}
		var nm *migrations.NotMigratedError
		if !errors.As(err, &nm) || nm.Current != wantCurrent || nm.Want != latest {
			t.Fatalf("%s: CheckSchema = %#v, want *NotMigratedError{Current: %d, Want: %d}", when, err, wantCurrent, latest)
		}
		if msg := err.Error(); !strings.Contains(msg, "`outboxd migrate") || !strings.Contains(msg, fmt.Sprint(latest)) {
			t.Errorf("%s: message %q does not name `outboxd migrate` and version %d", when, msg, latest)
		}
	}

	check("never migrated", 0)
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("CheckSchema created %d tables; it must write nothing", tables)
	}

	m := migrations.New(pool, nil)
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	check("migrated", latest)
	if all := migrations.All(); len(all) > 1 {
		// The version before the latest: versions may have gaps.
		previous := all[len(all)-2].Version
		if _, err := m.DownTo(ctx, latest-1); err != nil {
			t.Fatal(err)
		}
		check("one version behind", previous)
		if err := m.Check(ctx); !errors.Is(err, migrations.ErrNotMigrated) {
			t.Errorf("Migrator.Check one version behind = %v, want ErrNotMigrated", err)
		}
	}
	if _, err := m.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check("rolled back to 0 (the version table stays, empty)", 0)

	// A schema newer than the binary (a newer outboxd migrated it).
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_migration (version, name) VALUES ($1, 'from_the_future')`, latest+1); err != nil {
		t.Fatal(err)
	}
	err := migrations.CheckSchema(ctx, pool)
	var nm *migrations.NotMigratedError
	if !errors.As(err, &nm) || nm.Current != latest+1 || !strings.Contains(err.Error(), "--down-to") {
		t.Errorf("newer schema: CheckSchema = %v, want a *NotMigratedError at %d naming --down-to", err, latest+1)
	}
}
