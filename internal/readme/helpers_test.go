package readme_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
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

// exampleEnvironment is what the README's program expects of its process:
// DATABASE_URL naming an empty database (the program migrates it), and
// SENDGRID_API_BASE and SENDGRID_API_KEY naming a SendGrid double, as
// `outboxd doubles` prints them. It returns a function that restores the
// environment and drops both. Examples run one at a time, after the tests,
// so setting the process's environment is safe here.
func exampleEnvironment() (done func()) {
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "outbox_readme_" + hex.EncodeToString(b)
	if err := pgtest.CreateDatabase(ctx, name, ""); err != nil {
		panic(err)
	}
	url, err := pgtest.WithDatabase(pgtest.ServerURL(), name)
	if err != nil {
		panic(err)
	}
	double, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		panic(err)
	}
	set := map[string]string{"DATABASE_URL": url, "SENDGRID_API_BASE": double.URL(), "SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey}
	before := map[string]*string{}
	for k, v := range set {
		if old, ok := os.LookupEnv(k); ok {
			before[k] = &old
		} else {
			before[k] = nil
		}
		os.Setenv(k, v)
	}
	return func() {
		for k, v := range before {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
		double.Close()
		_ = pgtest.DropDatabase(context.Background(), name)
	}
}
