package cli_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/cmd/outboxd/internal/cli"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/migrations"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
	"github.com/outboxkit/outbox/providers/stripeprovider/stripedouble"
)

// unreachableDB is a database URL nothing listens on: a command that gets
// as far as connecting fails with exit 1, never the 2 a usage error gives.
const unreachableDB = "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2"

// emptyDB creates a database with no schema at all and returns its URL.
func emptyDB(t *testing.T) string {
	t.Helper()
	_, u := pgtest.NewEmptyDB(t)
	return u
}

func TestTopLevelUsageAndExitCodes(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := outboxd(t, invocation{args: args})
		if r.code != 0 {
			t.Errorf("outboxd %v: %s; want exit 0", args, r)
		}
		wantContains(t, fmt.Sprintf("outboxd %v stdout", args), r.stdout, "Usage:", "migrate", "run", "record", "DATABASE_URL")
	}

	r := outboxd(t, invocation{})
	if r.code != 2 {
		t.Errorf("outboxd with no arguments: %s; want exit 2", r)
	}
	wantContains(t, "outboxd's usage", r.stderr, "Usage:", "Commands:")

	r = outboxd(t, invocation{args: []string{"frobnicate"}})
	if r.code != 2 {
		t.Errorf("outboxd frobnicate: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, `unknown command "frobnicate"`, "outboxd help")
}

func TestEachCommandsHelpSaysWhatItDoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		command string
		purpose []string
	}{
		{"migrate", []string{"Creates or upgrades", "schema", "--down-to"}},
		{"run", []string{"Runs the dispatcher", "STRIPE_API_KEY", "SENDGRID_API_KEY", "--workers", "SIGTERM"}},
		{"record", []string{"Reads messages from FILE", "as a stream of JSON values", "the line\nit starts on", "--file", "--json", "Ctrl-C"}},
	} {
		for _, flag := range []string{"--help", "-h"} {
			r := outboxd(t, invocation{env: map[string]string{"STRIPE_API_KEY": secretStripeKey}, args: []string{tc.command, flag}})
			if r.code != 0 {
				t.Errorf("outboxd %s %s: %s; want exit 0", tc.command, flag, r)
			}
			out := r.stdout + r.stderr
			wantContains(t, "outboxd "+tc.command+" "+flag, out, append([]string{"Usage: outboxd " + tc.command}, tc.purpose...)...)
		}
	}
}

func TestMigrateFreshDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := emptyDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "STRIPE_API_KEY": secretStripeKey}

	upVersions, downVersions := outboxVersions()
	r := outboxd(t, invocation{env: env, args: []string{"migrate"}})
	if r.code != 0 {
		t.Fatalf("first migrate: %s", r)
	}
	wantContains(t, "first migrate's stdout", r.stdout, "applied River versions [1", fmt.Sprintf("outbox versions %s; outbox now at version %d", upVersions, migrations.Latest()))

	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := migrations.New(pool, nil).Check(ctx); err != nil {
		t.Fatalf("after migrate, Check = %v", err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename IN ('river_job', 'river_leader', 'outbox_intents', 'outbox_attempts', 'outbox_events', 'outbox_processed_messages')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 6 {
		t.Fatalf("after migrate, %d of River's and the outbox's 6 main tables exist", tables)
	}

	r = outboxd(t, invocation{env: env, args: []string{"migrate"}})
	if r.code != 0 {
		t.Fatalf("second migrate: %s", r)
	}
	wantContains(t, "second migrate's stdout", r.stdout, "already up to date", fmt.Sprintf("version %d", migrations.Latest()))

	// The flag goes through env: --database-url wins over DATABASE_URL.
	r = outboxd(t, invocation{env: map[string]string{"DATABASE_URL": unreachableDB}, args: []string{"migrate", "--database-url", dbURL}})
	if r.code != 0 || !strings.Contains(r.stdout, "already up to date") {
		t.Fatalf("migrate --database-url: %s; want exit 0, up to date", r)
	}

	for _, bad := range []string{"99", "-2", fmt.Sprint(migrations.Latest() + 1)} {
		r = outboxd(t, invocation{env: env, args: []string{"migrate", "--down-to", bad}})
		if r.code != 2 {
			t.Errorf("migrate --down-to %s: %s; want exit 2", bad, r)
		}
		wantContains(t, "migrate --down-to "+bad+" stderr", r.stderr, "--down-to "+bad)
	}

	// Rolled back, the database is refused by run, and migrates up again.
	r = outboxd(t, invocation{env: env, args: []string{"migrate", "--down-to", "0"}})
	if r.code != 0 {
		t.Fatalf("migrate --down-to 0: %s", r)
	}
	wantContains(t, "migrate --down-to 0 stdout", r.stdout, "rolled back outbox versions "+downVersions)
	if err := migrations.New(pool, nil).Check(ctx); err == nil {
		t.Fatal("after --down-to 0, Check passes")
	}
	r = outboxd(t, invocation{env: vars(env, "SENDGRID_API_KEY", sendgriddouble.DefaultAPIKey), args: []string{"run"}})
	if r.code != 1 {
		t.Errorf("run on a rolled-back database: %s; want exit 1", r)
	}
	wantContains(t, "run's stderr", r.stderr, "run `outboxd migrate`")
	r = outboxd(t, invocation{env: env, args: []string{"migrate"}})
	if r.code != 0 {
		t.Fatalf("migrate after rollback: %s", r)
	}
	wantContains(t, "migrate after rollback stdout", r.stdout, "applied River versions [] and outbox versions "+upVersions)
}

func TestMigrateRefusesBadDatabaseURLWithoutPrintingThePassword(t *testing.T) {
	t.Parallel()
	r := outboxd(t, invocation{args: []string{"migrate", "--database-url", "postgres://app:hunter2secret@127.0.0.1:notaport/db"}})
	if r.code != 2 {
		t.Errorf("migrate with an unparsable URL: %s; want exit 2", r)
	}
	wantContains(t, "stderr", r.stderr, "--database-url")
	if strings.Contains(r.stdout+r.stderr, "hunter2secret") {
		t.Errorf("the URL's password appears in the output:\n%s", r)
	}

	r = outboxd(t, invocation{env: map[string]string{"DATABASE_URL": unreachableDB}, args: []string{"migrate"}})
	if r.code != 1 {
		t.Errorf("migrate with an unreachable database: %s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "connect to database")
}

// TestABadDatabaseURLIsNamedWhereItCameFrom: an invalid URL is reported
// as the flag, OUTBOXD_DATABASE_URL or DATABASE_URL, whichever set it (a
// bad DATABASE_URL used to be reported as --database-url), by every
// command that takes one, without its password.
func TestABadDatabaseURLIsNamedWhereItCameFrom(t *testing.T) {
	t.Parallel()
	const bad = "postgres://app:hunter2secret@127.0.0.1:notaport/db"
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DATABASE_URL": bad}, nil, "DATABASE_URL is not a valid PostgreSQL URL"},
		{map[string]string{"DATABASE_URL": unreachableDB, "OUTBOXD_DATABASE_URL": bad}, nil, "OUTBOXD_DATABASE_URL is not a valid PostgreSQL URL"},
		{map[string]string{"DATABASE_URL": unreachableDB, "OUTBOXD_DATABASE_URL": unreachableDB}, []string{"--database-url", bad}, "--database-url is not a valid PostgreSQL URL"},
	} {
		for _, command := range [][]string{{"migrate"}, {"stats"}, {"intents", "list"}, {"record"}, {"demo"}} {
			r := outboxd(t, invocation{env: tc.env, args: append(append([]string{}, command...), tc.args...)})
			if r.code != 2 || !strings.Contains(r.stderr, ": "+tc.want+":") {
				t.Errorf("outboxd %v with %v: %s; want exit 2 and %q", command, tc.env, r, tc.want)
			}
			if strings.Contains(r.stdout+r.stderr, "hunter2secret") {
				t.Errorf("the URL's password appears in the output:\n%s", r)
			}
		}
	}
}

func TestRunRefusesWithoutCredentials(t *testing.T) {
	t.Parallel()
	missingFile := filepath.Join(t.TempDir(), "no-such-key")
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    string
		notWant string
	}{
		{"no keys", map[string]string{}, nil, "STRIPE_API_KEY", ""},
		{"no SendGrid key", map[string]string{"STRIPE_API_KEY": secretStripeKey}, nil, "SENDGRID_API_KEY", "STRIPE_API_KEY"},
		{"no Stripe key", map[string]string{"SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey}, nil, "STRIPE_API_KEY", "SENDGRID_API_KEY"},
		{"only stripe, no key", map[string]string{"SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey}, []string{"--providers", "stripe"}, "STRIPE_API_KEY", "SENDGRID_API_KEY"},
		{"only sendgrid, no key", map[string]string{"STRIPE_API_KEY": secretStripeKey}, []string{"--providers", "sendgrid"}, "SENDGRID_API_KEY", "STRIPE_API_KEY"},
		{"key file missing", map[string]string{"STRIPE_API_KEY_FILE": missingFile}, []string{"--providers", "stripe"}, "STRIPE_API_KEY_FILE", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := vars(tc.env, "DATABASE_URL", unreachableDB)
			r := outboxd(t, invocation{env: env, args: append([]string{"run"}, tc.args...)})
			if r.code != 1 {
				t.Errorf("%s; want exit 1", r)
			}
			wantContains(t, "stderr", r.stderr, "refusing to start", tc.want)
			if tc.notWant != "" && strings.Contains(r.stderr, tc.notWant) {
				t.Errorf("stderr names %s, which is set:\n%s", tc.notWant, r.stderr)
			}
			if strings.Contains(r.stderr, "connect to database") {
				t.Errorf("run tried the database before checking credentials:\n%s", r.stderr)
			}
		})
	}
}

func TestRunWithOnlyTheKeysOfItsProvidersGetsToTheDatabase(t *testing.T) {
	t.Parallel()
	// An unmigrated database: run gets past the credentials check (only
	// SendGrid's key is set, and only SendGrid is asked for), connects,
	// and refuses because the schema is missing.
	env := map[string]string{"DATABASE_URL": emptyDB(t), "SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey}
	r := outboxd(t, invocation{env: env, args: []string{"run", "--providers", "sendgrid"}})
	if r.code != 1 {
		t.Errorf("%s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "run `outboxd migrate`", "never migrated")
	for _, notWant := range []string{"refusing to start", "STRIPE_API_KEY", "SENDGRID_API_KEY"} {
		if strings.Contains(r.stderr, notWant) {
			t.Errorf("stderr mentions %q:\n%s", notWant, r.stderr)
		}
	}

	// Both providers, both keys: the same refusal.
	env = vars(env, "STRIPE_API_KEY", secretStripeKey)
	r = outboxd(t, invocation{env: env, args: []string{"run"}})
	if r.code != 1 {
		t.Errorf("%s; want exit 1", r)
	}
	wantContains(t, "stderr", r.stderr, "run `outboxd migrate`")
}

func TestRunRefusesBadFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":     unreachableDB,
		"STRIPE_API_KEY":   secretStripeKey,
		"SENDGRID_API_KEY": sendgriddouble.DefaultAPIKey,
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--workers", "0"}, []string{"--workers", "got 0"}},
		{[]string{"--workers", "10001"}, []string{"--workers"}},
		{[]string{"--workers", "many"}, []string{"-workers", "many"}},
		{[]string{"--max-attempts", "0"}, []string{"--max-attempts"}},
		{[]string{"--max-attempts", "91"}, []string{"--max-attempts"}},
		{[]string{"--providers", "fax"}, []string{"--providers", `"fax"`}},
		{[]string{"--providers", "stripe,fax"}, []string{"--providers", `"fax"`}},
		{[]string{"--providers", ""}, []string{"--providers"}},
		{[]string{"--providers", "stripe,stripe"}, []string{"--providers", "twice"}},
		{[]string{"--log-format", "xml"}, []string{"--log-format", `"xml"`}},
		{[]string{"--log-level", "loud"}, []string{"--log-level", `"loud"`}},
		{[]string{"--call-timeout", "0s"}, []string{"--call-timeout"}},
		{[]string{"--call-timeout", "soon"}, []string{"-call-timeout"}},
		{[]string{"--retry-backoff", "-1s"}, []string{"--retry-backoff"}},
		{[]string{"--shutdown-grace", "0s"}, []string{"--shutdown-grace"}},
		{[]string{"--rescue-after", "-1s"}, []string{"--rescue-after"}},
		{[]string{"--stripe-api-base", "::not a url"}, []string{"--stripe-api-base"}},
		{[]string{"--frobnicate"}, []string{"frobnicate"}},
		{[]string{"now"}, []string{`unexpected argument "now"`}},
		{[]string{"--workers", "5", "extra"}, []string{`unexpected argument "extra"`}},
	} {
		r := outboxd(t, invocation{env: env, args: append([]string{"run"}, tc.args...)})
		if r.code != 2 {
			t.Errorf("run %q: %s; want exit 2", tc.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("run %q stderr", tc.args), r.stderr, tc.want...)
	}

	// These are checked by dispatcher.New, once the database is connected
	// and its schema checked.
	_, dbURL := pgtest.NewDB(t)
	env = vars(env, "DATABASE_URL", dbURL)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--rescue-after", "1s"}, []string{"--rescue-after (1s) must exceed twice --call-timeout"}},
		{[]string{"--call-timeout", "10s", "--rescue-after", "25s"}, []string{"--rescue-after", "25s"}},
		{[]string{"--retry-backoff", "10s", "--retry-backoff-max", "1s"}, []string{"--retry-backoff-max (1s) is less than --retry-backoff (10s)"}},
	} {
		r := outboxd(t, invocation{env: env, args: append([]string{"run"}, tc.args...)})
		if r.code != 2 {
			t.Errorf("run %q: %s; want exit 2", tc.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("run %q stderr", tc.args), r.stderr, tc.want...)
		if strings.Contains(r.stderr, "Config.") {
			t.Errorf("run %q names a Go field instead of the flag:\n%s", tc.args, r.stderr)
		}
	}
}

func TestRecordAndMigrateRefuseBadFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unreachableDB}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "extra"}, `unexpected argument "extra"`},
		{[]string{"migrate", "--log-format", "xml"}, "--log-format"},
		{[]string{"migrate", "--down-to", "x"}, "-down-to"},
		{[]string{"record", "--file", filepath.Join(t.TempDir(), "missing.jsonl")}, "--file"},
		{[]string{"record", "extra"}, `FILE: open extra: no such file`},
		{[]string{"record", "a.json", "b.json"}, `unexpected argument "b.json": this command takes one FILE at most`},
		{[]string{"record", "a.json", "--file", "b.json"}, "give the input as FILE or as --file, not both"},
		{[]string{"record", "--providers", "fax"}, "fax"},
		{[]string{"record", "--stripe-api-base", "::nope"}, "--stripe-api-base"},
	} {
		r := outboxd(t, invocation{env: env, args: tc.args})
		if r.code != 2 {
			t.Errorf("%q: %s; want exit 2", tc.args, r)
			continue
		}
		wantContains(t, fmt.Sprintf("%q stderr", tc.args), r.stderr, tc.want)
	}
}

// runningDispatcher is `outboxd run` started in-process against a migrated
// database and the provider doubles.
type runningDispatcher struct {
	pool     *pgxpool.Pool
	env      map[string]string
	stripe   *stripedouble.Server
	sendgrid *sendgriddouble.Server
	cancel   context.CancelFunc
	done     chan int
	stdout   *lockedBuffer
	stderr   *lockedBuffer
}

// startRun starts `outboxd run` with args on a fresh database. stripeKey
// is the key the Stripe double accepts (outboxd always gets
// secretStripeKey).
func startRun(t *testing.T, stripeKey string, args ...string) *runningDispatcher {
	t.Helper()
	return startRunWith(t, stripeKey, nil, args...)
}

// startRunWith is startRun with more environment variables.
func startRunWith(t *testing.T, stripeKey string, extraEnv map[string]string, args ...string) *runningDispatcher {
	t.Helper()
	pool, dbURL := pgtest.NewDB(t)
	sd, err := stripedouble.NewServer(stripedouble.Config{APIKey: stripeKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sd.Close() })
	gd, err := sendgriddouble.NewServer(sendgriddouble.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gd.Close() })
	envVars := map[string]string{
		"DATABASE_URL":      dbURL,
		"STRIPE_API_KEY":    secretStripeKey,
		"SENDGRID_API_KEY":  sendgriddouble.DefaultAPIKey,
		"STRIPE_API_BASE":   sd.URL(),
		"SENDGRID_API_BASE": gd.URL(),
	}
	maps.Copy(envVars, extraEnv)
	env, stdout, stderr := environment(envVars, "")
	ctx, cancel := context.WithCancel(context.Background())
	rd := &runningDispatcher{pool: pool, env: envVars, stripe: sd, sendgrid: gd, cancel: cancel, done: make(chan int, 1), stdout: stdout, stderr: stderr}
	go func() {
		rd.done <- cli.Main(ctx, append([]string{"run"}, args...), env)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rd.done:
		case <-time.After(30 * time.Second):
			t.Errorf("outboxd run did not return within 30s of its context ending")
		}
		assertNoSecrets(t, envVars, stdout.String(), stderr.String())
	})
	return rd
}

// fastRunFlags make a dispatcher pick up and retry intents quickly.
var fastRunFlags = []string{"--admin-addr", "", "--fetch-cooldown", "10ms", "--retry-backoff", "50ms", "--retry-backoff-max", "100ms", "--call-timeout", "5s", "--sweep-interval", "1s"}

// waitForStates polls until every intent of the database is in a state
// that settled returns true for, and returns the states by message id and
// intent name.
func (rd *runningDispatcher) waitForStates(t *testing.T, want int, settled func(state string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		rows, err := rd.pool.Query(context.Background(), `SELECT message_id || '/' || name, state FROM outbox_intents ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		done := true
		for rows.Next() {
			var key, state string
			if err := rows.Scan(&key, &state); err != nil {
				t.Fatal(err)
			}
			states[key] = state
			done = done && settled(state)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if done && len(states) == want {
			return states
		}
		select {
		case code := <-rd.done:
			rd.done <- code // for the cleanup
			t.Fatalf("outboxd run returned %d early; intents %v\nstderr:\n%s", code, states, rd.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("intents still %v after 45s; want %d settled\nstderr:\n%s", states, want, rd.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop cancels the parent context, the way SIGTERM would end the
// NotifyContext inside run, and returns run's exit code and how long it
// took to return.
func (rd *runningDispatcher) stop(t *testing.T) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	rd.cancel()
	select {
	case code := <-rd.done:
		rd.done <- code // for the cleanup
		return code, time.Since(start)
	case <-time.After(20 * time.Second):
		t.Fatalf("outboxd run did not return within 20s of cancellation\nstderr:\n%s", rd.stderr.String())
		return 0, 0
	}
}

func TestRunPerformsIntentsAndStopsGracefully(t *testing.T) {
	t.Parallel()
	rd := startRun(t, secretStripeKey, append(fastRunFlags, "--log-level", "debug")...)

	// Record through the record command while run is going.
	in := `{"message_id": "order-1", "consumer": "billing", "intents": [` +
		`{"kind": "stripe.payment_intent", "name": "payment", "payload": ` + paymentPayload + `},` +
		`{"kind": "sendgrid.email", "name": "receipt", "payload": ` + emailPayload + `}]}`
	r := outboxd(t, invocation{env: rd.env, stdin: in + "\n", args: []string{"record"}})
	if r.code != 0 {
		t.Fatalf("record: %s", r)
	}

	states := rd.waitForStates(t, 2, func(s string) bool { return s == "succeeded" })
	t.Logf("intents: %v", states)
	var ids []int64
	rows, err := rd.pool.Query(context.Background(), `SELECT id FROM outbox_intents ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 2 {
		t.Fatalf("intent ids %v", ids)
	}
	if n := rd.stripe.EffectsFor(ids[0]); n != 1 {
		t.Errorf("Stripe double has %d PaymentIntents for the payment, want 1", n)
	}
	if n := rd.sendgrid.EffectsFor(ids[1]); n != 1 {
		t.Errorf("SendGrid double has %d emails for the receipt, want 1", n)
	}

	code, took := rd.stop(t)
	if code != 0 {
		t.Fatalf("run returned %d after cancellation, want 0\nstderr:\n%s", code, rd.stderr.String())
	}
	if took > 10*time.Second {
		t.Errorf("run took %s to stop with nothing in flight", took)
	}
	t.Logf("run stopped %s after cancellation", took.Round(time.Millisecond))
	wantContains(t, "run's log", rd.stderr.String(), "dispatcher started", "intent attempt settled", "shutting down", "dispatcher stopped")
	// River's own INFO lines are there at --log-level debug, as DEBUG; the
	// outbox's stay INFO.
	wantContains(t, "run's log", rd.stderr.String(), `level=DEBUG msg="River client started"`, `level=INFO msg="intent attempt settled"`)
	assertNoSecrets(t, rd.env, rd.stdout.String(), rd.stderr.String())
}

func TestRunNeverPrintsOrStoresTheAPIKeyWhenTheProviderRefusesIt(t *testing.T) {
	t.Parallel()
	// The Stripe double accepts another key: every call is a 401, whose
	// error travels through the log, the attempt and the intent.
	rd := startRun(t, "sk_test_the_key_stripe_expects_0000", append(fastRunFlags, "--log-level", "debug", "--log-format", "json")...)
	in := `{"message_id": "order-1", "consumer": "billing", "intents": [{"kind": "stripe.payment_intent", "payload": ` + paymentPayload + `}]}`
	if r := outboxd(t, invocation{env: rd.env, stdin: in, args: []string{"record"}}); r.code != 0 {
		t.Fatalf("record: %s", r)
	}
	rd.waitForStates(t, 1, func(s string) bool { return s == "failed" })

	var stored string
	if err := rd.pool.QueryRow(context.Background(), `
		SELECT concat_ws(' | ',
			(SELECT string_agg(coalesce(last_error, '') || ' ' || coalesce(provider_ref, ''), ' ') FROM outbox_intents),
			(SELECT string_agg(coalesce(error, ''), ' ') FROM outbox_intent_attempts),
			(SELECT string_agg(reason, ' ') FROM outbox_intent_events),
			(SELECT string_agg(coalesce(errors::text, ''), ' ') FROM river_job))`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stored, "401") && !strings.Contains(strings.ToLower(stored), "api key") {
		t.Errorf("the stored errors do not explain the refusal: %s", stored)
	}
	if strings.Contains(stored, secretStripeKey) {
		t.Errorf("the API key is stored in the database: %s", stored)
	}
	if code, _ := rd.stop(t); code != 0 {
		t.Fatalf("run returned %d, want 0\nstderr:\n%s", code, rd.stderr.String())
	}
	wantContains(t, "run's log", rd.stderr.String(), `"state":"failed"`)
	assertNoSecrets(t, rd.env, rd.stdout.String(), rd.stderr.String())
}
