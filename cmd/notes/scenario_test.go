package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/internal/testkit/pgtest"
	"github.com/outboxkit/outbox/providers"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider/sendgriddouble"
)

// The one command, as a user runs it: a scratch database, the real broker,
// the scenario and its report; then nothing left behind.
func TestScenarioEndToEnd(t *testing.T) {
	t.Parallel()
	stdout, stderr := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	code := run(context.Background(), []string{"--json", "--notes", "4", "--timeout", "2m"}, testEnv, stdout, stderr)
	if code != 0 {
		t.Fatalf("exit code %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var r report
	if err := json.Unmarshal([]byte(stdout.String()), &r); err != nil {
		t.Fatalf("--json printed %q: %v", stdout, err)
	}
	checks := []struct {
		what      string
		got, want int
	}{
		{"notes created", r.NotesCreated, 4},
		{"POST retries", r.PostRetries, 3},
		{"POST retries absorbed (200, same note)", r.PostRetriesAbsorbed, 3},
		{"NoteCreated published (confirmed attempts)", r.NoteCreatedPublished, 4},
		{"publish attempts", r.PublishAttempts, 4},
		{"copies published straight to RabbitMQ", r.BrokerDuplicates, 1},
		{"connections cut after commit", r.ConnectionCuts, 1},
		{"acks lost", int(r.AcksLost), 1},
		{"duplicates absorbed by the tagger", int(r.DuplicatesAbsorbed), 2},
		{"tagger deliveries", int(r.TaggerDeliveries), 6},
		{"processed markers", r.ProcessedMarkers, 4},
		{"notes tagged", r.NotesTagged, 4},
		{"email intents", r.EmailIntents, 4},
		{"emails succeeded", r.EmailsSent, 4},
		{"emails at the SendGrid double", r.EmailsAtDouble, 4},
		{"duplicate emails", r.DuplicateEmails, 0},
		{"missing emails", r.MissingEmails, 0},
		{"dead-lettered", int(r.DeadLettered), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.what, c.got, c.want)
		}
	}
	if len(r.Problems) > 0 || len(r.NoteIDs) != 4 {
		t.Errorf("problems %v, note ids %v", r.Problems, r.NoteIDs)
	}
	if !strings.Contains(stderr.String(), "step 3:") || !strings.Contains(stderr.String(), "ack lost after commit") {
		t.Errorf("progress or the lost-ack warning missing from stderr:\n%s", stderr)
	}

	// Nothing left behind: the scratch database and the topology are gone.
	conn, err := pgx.Connect(context.Background(), pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, r.Database).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists || !strings.HasPrefix(r.Database, "notes_example_") {
		t.Errorf("scratch database %q still exists after the run", r.Database)
	}
	if ok, err := newTopology(testkit.RabbitURL(), r.RunID).queueExists(); err != nil || ok {
		t.Errorf("queue of run %s still exists (%v, %v)", r.RunID, ok, err)
	}
}

// The report is the judge: an email sent twice must fail the run.
func TestReportCatchesDuplicateEmail(t *testing.T) {
	t.Parallel()
	a := startApp(t)
	o, err := parseArgs([]string{"--notes", "3"}, testEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runScenario(context.Background(), a, o, io.Discard)
	if err != nil || !rep.ok() {
		t.Fatalf("clean scenario: %v %v", err, rep.Problems)
	}
	// Send one note's email a second time, as a dispatcher that blindly
	// retried an ambiguous attempt would.
	var intentID int64
	var payload json.RawMessage
	if err := a.pool.QueryRow(context.Background(), `SELECT id, payload FROM outbox_intents WHERE kind = $1 AND reference = $2`,
		sendgridprovider.KindEmail, reference(rep.NoteIDs[0])).Scan(&intentID, &payload); err != nil {
		t.Fatal(err)
	}
	p, err := sendgridprovider.New(sendgridprovider.Config{APIKey: sendgriddouble.DefaultAPIKey, BaseURL: a.double.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Perform(context.Background(), providers.Request{IntentID: intentID, IdempotencyKey: "again", Kind: sendgridprovider.KindEmail, Payload: payload, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	again := &scenario{a: a, rep: &report{NoteIDs: rep.NoteIDs, PostRetries: rep.PostRetries, PostRetriesAbsorbed: rep.PostRetriesAbsorbed,
		BrokerDuplicates: rep.BrokerDuplicates, ConnectionCuts: rep.ConnectionCuts}}
	if err := again.fill(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again.rep.DuplicateEmails != 1 || again.rep.ok() {
		t.Fatalf("duplicate emails %d, problems %v: want the duplicate reported", again.rep.DuplicateEmails, again.rep.Problems)
	}
}
