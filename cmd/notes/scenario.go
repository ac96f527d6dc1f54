package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox/providers/amqpprovider"
	"github.com/outboxkit/outbox/providers/sendgridprovider"
)

// report is what the scenario found. Effects are counted where they
// happened: NoteCreated publishes from the provider's attempts, deliveries
// from the tagger's counters, emails from the SendGrid double's records.
type report struct {
	RunID        string    `json:"run_id"`
	Database     string    `json:"database"`
	DatabaseKept bool      `json:"database_kept"`
	Topology     *topology `json:"rabbitmq"`
	// NotesCreated is how many notes the scenario created (201s).
	NotesCreated int     `json:"notes_created"`
	NoteIDs      []int64 `json:"note_ids"`
	// PostRetries is how many POSTs repeated an earlier one's
	// Idempotency-Key; PostRetriesAbsorbed, how many of them got the first
	// one's note back with 200 and wrote nothing.
	PostRetries         int `json:"post_retries"`
	PostRetriesAbsorbed int `json:"post_retries_absorbed"`
	// PublishAttempts and NoteCreatedPublished count the rabbitmq.publish
	// attempts made by the dispatcher, and those the broker confirmed.
	PublishAttempts      int `json:"publish_attempts"`
	NoteCreatedPublished int `json:"note_created_published"`
	// BrokerDuplicates is how many copies of a NoteCreated the scenario
	// published straight to RabbitMQ with the original's message-id.
	BrokerDuplicates int `json:"broker_duplicates_injected"`
	// ConnectionCuts is how many times the tagger's connection was cut
	// after a commit, before the ack; AcksLost is how many acks the tagger
	// saw fail.
	ConnectionCuts int   `json:"connection_cuts_after_commit"`
	AcksLost       int64 `json:"acks_lost"`
	// TaggerDeliveries counts every delivery the tagger settled, however
	// it ended; TaggerProcessed those it committed and acked;
	// DuplicatesAbsorbed those it recognised by their processed marker and
	// acked with no effect.
	TaggerDeliveries   int64 `json:"tagger_deliveries"`
	TaggerProcessed    int64 `json:"tagger_processed"`
	DuplicatesAbsorbed int64 `json:"duplicates_absorbed"`
	DeadLettered       int64 `json:"dead_lettered"`
	ProcessedMarkers   int   `json:"processed_markers"`
	NotesTagged        int   `json:"notes_tagged"`
	TagsStored         int   `json:"tags_stored"`
	// EmailIntents is how many sendgrid.email intents the tagger recorded,
	// and how they ended.
	EmailIntents   int `json:"email_intents"`
	EmailsSent     int `json:"emails_succeeded"`
	EmailsInDoubt  int `json:"emails_in_doubt"`
	EmailsFailed   int `json:"emails_failed"`
	EmailsAtDouble int `json:"emails_at_sendgrid_double"`
	// DuplicateEmails counts emails beyond the first per note at the
	// double; MissingEmails, notes with none. Both must be 0.
	DuplicateEmails int `json:"duplicate_emails"`
	MissingEmails   int `json:"missing_emails"`
	// SendGrid is "double", or "real" when emails went to SendGrid (whose
	// emails cannot be counted here).
	SendGrid string   `json:"sendgrid"`
	Seconds  float64  `json:"seconds"`
	Problems []string `json:"problems,omitempty"`
}

// ok reports whether every effect happened once and nothing is missing.
func (r *report) ok() bool { return len(r.Problems) == 0 }

func (r *report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// errScenarioFailed is wrapped by runScenario's error when the report found
// a duplicate effect or something missing.
var errScenarioFailed = errors.New("the scenario found a duplicate effect or something missing")

// scenario drives one run of the scenario.
type scenario struct {
	a        *app
	http     *http.Client
	progress io.Writer
	rep      *report
}

// sampleNotes are the notes the scenario writes, cycled.
func sampleNotes() []createRequest {
	return []createRequest{
		{"Launch plan", "Plan the #launch with the team: meeting on Monday, then the budget.", "ann@example.com"},
		{"Crash on save", "The editor crashes when saving large files. Urgent! #editor", "bob@example.com"},
		{"Reading list", "Books for the summer: #books #summer", "cleo@example.com"},
		{"Dark mode", "An idea for the app: a dark mode toggle. #ui", "dan@example.com"},
		{"Groceries", "Remember: milk, eggs, bread.", "eve@example.com"},
		{"Quarterly invoice", "Send the invoice to ACME asap #q3", "fay@example.com"},
	}
}

// runScenario creates o.notes notes through the API, with retried POSTs, a
// duplicate NoteCreated published straight to RabbitMQ and the tagger's
// connection cut after a commit, waits until every note is tagged and
// every email intent has ended, and reports. The error wraps
// errScenarioFailed when the report has problems; any other error means the
// scenario could not run to the end (the report then has what was found).
func runScenario(ctx context.Context, a *app, o options, progress io.Writer) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	started := time.Now()
	s := &scenario{a: a, http: &http.Client{Timeout: 15 * time.Second}, progress: progress, rep: &report{
		RunID: a.runID, Database: a.dbName, DatabaseKept: o.keepDatabase, Topology: a.topo, SendGrid: "double",
	}}
	if a.dbName == "" {
		s.rep.Database = "(--database-url)"
		s.rep.DatabaseKept = true
	}
	if a.double == nil {
		s.rep.SendGrid = "real"
	}
	err := s.run(ctx, o.notes)
	if ferr := s.fill(context.WithoutCancel(ctx)); ferr != nil && err == nil {
		err = ferr
	}
	s.rep.Seconds = time.Since(started).Seconds()
	if err != nil {
		return s.rep, err
	}
	if !s.rep.ok() {
		return s.rep, fmt.Errorf("%w: %v", errScenarioFailed, s.rep.Problems)
	}
	return s.rep, nil
}

func (s *scenario) run(ctx context.Context, total int) error {
	samples := sampleNotes()
	sample := func(i int) createRequest {
		n := samples[i%len(samples)]
		if i >= len(samples) {
			n.Title += " " + strconv.Itoa(i/len(samples)+1)
		}
		return n
	}
	key := func(i int) string { return fmt.Sprintf("scenario-%s-note-%d", s.a.runID, i+1) }

	// 1. Notes through the API. Note 2 is POSTed three times at once with
	// one Idempotency-Key (a client that timed out and retried while the
	// first was still running); note 1 is POSTed again afterwards.
	first := total - 1
	fmt.Fprintf(s.progress, "step 1: POST %d notes to %s/notes (one of them 3 times at once with the same Idempotency-Key)\n", first, s.a.baseURL())
	for i := range first {
		copies := 1
		if i == 1 {
			copies = 3
		}
		if err := s.create(ctx, sample(i), key(i), copies); err != nil {
			return err
		}
	}
	fmt.Fprintf(s.progress, "        retry note 1's POST with its Idempotency-Key\n")
	if err := s.retry(ctx, sample(0), key(0), s.rep.NoteIDs[0]); err != nil {
		return err
	}
	if err := s.waitSettled(ctx, "every note tagged and every delivery acked", len(s.rep.NoteIDs), 0); err != nil {
		return err
	}

	// 2. A duplicate NoteCreated, straight to RabbitMQ with the original's
	// message-id: what a publisher retrying after a lost confirm, or an
	// operator replaying a message, produces.
	id := s.rep.NoteIDs[0]
	published, err := s.publishedIDs(ctx, []int64{id})
	if err != nil {
		return err
	}
	fmt.Fprintf(s.progress, "step 2: publish a copy of note %d's NoteCreated straight to RabbitMQ, message-id %s\n", id, published[0])
	n, err := s.get(ctx, id)
	if err != nil {
		return err
	}
	body, err := json.Marshal(noteCreated{NoteID: n.ID, Title: n.Title, Body: n.Body, AuthorEmail: n.AuthorEmail})
	if err != nil {
		return err
	}
	if err := s.a.topo.publishCopy(ctx, published[0], body); err != nil {
		return err
	}
	s.rep.BrokerDuplicates++
	if err := s.waitSettled(ctx, "the copy absorbed by the tagger", len(s.rep.NoteIDs), 1); err != nil {
		return err
	}

	// 3. The tagger's connection dies after it committed the last note's
	// tags and email intent, before its ack reached the broker: RabbitMQ
	// redelivers on the next connection.
	fmt.Fprintf(s.progress, "step 3: POST one more note and cut the tagger's connection after its commit, before its ack\n")
	s.a.cutter.arm()
	if err := s.create(ctx, sample(first), key(first), 1); err != nil {
		return err
	}
	if err := s.waitSettled(ctx, "the redelivery absorbed after the lost ack", len(s.rep.NoteIDs)-1, 2); err != nil {
		return err
	}
	s.rep.ConnectionCuts = int(s.a.cutter.cuts.Load())

	// 4. Every email intent ends.
	fmt.Fprintf(s.progress, "step 4: wait for the dispatcher to send every email\n")
	return s.waitEmails(ctx)
}

// create POSTs note copies times at once with one Idempotency-Key; exactly
// one must answer 201 and the others 200 with the same note.
func (s *scenario) create(ctx context.Context, req createRequest, key string, copies int) error {
	type answer struct {
		n      note
		status int
		err    error
	}
	answers := make([]answer, copies)
	var wg sync.WaitGroup
	for i := range copies {
		wg.Go(func() {
			answers[i].n, answers[i].status, answers[i].err = s.post(ctx, req, key)
		})
	}
	wg.Wait()
	var created note
	createdCount := 0
	for _, a := range answers {
		if a.err != nil {
			return a.err
		}
		switch a.status {
		case http.StatusCreated:
			created = a.n
			createdCount++
		case http.StatusOK:
		default:
			return fmt.Errorf("POST /notes answered %d", a.status)
		}
	}
	if createdCount != 1 {
		s.rep.problem("%d POSTs with Idempotency-Key %s created %d notes, want 1", copies, key, createdCount)
		if createdCount == 0 {
			return fmt.Errorf("no POST with Idempotency-Key %s created a note", key)
		}
	}
	s.rep.NotesCreated++
	s.rep.NoteIDs = append(s.rep.NoteIDs, created.ID)
	for _, a := range answers {
		if a.status != http.StatusOK {
			continue
		}
		s.rep.PostRetries++
		if a.n.ID == created.ID {
			s.rep.PostRetriesAbsorbed++
		} else {
			s.rep.problem("a retried POST returned note %d, not %d", a.n.ID, created.ID)
		}
	}
	fmt.Fprintf(s.progress, "        note %d created (%s)%s\n", created.ID, req.Title, retriedNote(copies))
	return nil
}

func retriedNote(copies int) string {
	if copies == 1 {
		return ""
	}
	return fmt.Sprintf("; %d concurrent retries answered 200 with the same note", copies-1)
}

// retry POSTs a note again with its Idempotency-Key and checks the answer.
func (s *scenario) retry(ctx context.Context, req createRequest, key string, want int64) error {
	n, status, err := s.post(ctx, req, key)
	if err != nil {
		return err
	}
	s.rep.PostRetries++
	if status == http.StatusOK && n.ID == want {
		s.rep.PostRetriesAbsorbed++
		fmt.Fprintf(s.progress, "        answered 200 with note %d again: nothing written\n", n.ID)
		return nil
	}
	s.rep.problem("a retried POST answered %d with note %d, want 200 with note %d", status, n.ID, want)
	return nil
}

func (s *scenario) post(ctx context.Context, req createRequest, key string) (note, int, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return note{}, 0, err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, s.a.baseURL()+"/notes", bytes.NewReader(body))
	if err != nil {
		return note{}, 0, err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(headerIdempotencyKey, key)
	return s.do(r)
}

func (s *scenario) get(ctx context.Context, id int64) (note, error) {
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, s.a.baseURL()+"/notes/"+strconv.FormatInt(id, 10), nil)
	if err != nil {
		return note{}, err
	}
	n, status, err := s.do(r)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("GET /notes/%d answered %d", id, status)
	}
	return n, err
}

func (s *scenario) do(r *http.Request) (note, int, error) {
	resp, err := s.http.Do(r)
	if err != nil {
		return note{}, 0, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return note{}, 0, err
	}
	var n note
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(body, &n); err != nil {
			return note{}, 0, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err)
		}
	}
	return n, resp.StatusCode, nil
}

// waitSettled waits until every note created so far is tagged and the
// tagger has acked at least processed first deliveries and duplicates
// redeliveries, so that no delivery is still unacknowledged.
func (s *scenario) waitSettled(ctx context.Context, what string, processed, duplicates int) error {
	ids := s.rep.NoteIDs
	return s.poll(ctx, what, func() (bool, string, error) {
		var tagged, emails, ended int
		if err := s.a.pool.QueryRow(ctx, progressSQL, ids, sendgridprovider.KindEmail, references(ids)).Scan(&tagged, &emails, &ended); err != nil {
			return false, "", err
		}
		st := s.a.consumer.Stats()
		// A delivery whose ack was lost is acked again, as a duplicate,
		// when the broker redelivers it: count it once, there.
		done := tagged == len(ids) && st.Processed >= int64(processed) && st.Duplicates >= int64(duplicates)
		return done, fmt.Sprintf("notes tagged %d/%d | tagger: processed %d, duplicates absorbed %d, acks lost %d | email intents %d, ended %d",
			tagged, len(ids), st.Processed, st.Duplicates, st.AckFailures, emails, ended), nil
	})
}

// waitEmails waits until every note has an email intent and every one has
// ended (succeeded, failed, in_doubt or cancelled).
func (s *scenario) waitEmails(ctx context.Context) error {
	ids := s.rep.NoteIDs
	return s.poll(ctx, "every email intent ended", func() (bool, string, error) {
		var tagged, emails, ended int
		if err := s.a.pool.QueryRow(ctx, progressSQL, ids, sendgridprovider.KindEmail, references(ids)).Scan(&tagged, &emails, &ended); err != nil {
			return false, "", err
		}
		sent := "?"
		if s.a.double != nil {
			sent = strconv.Itoa(len(s.a.double.Emails()))
		}
		return emails == len(ids) && ended == emails,
			fmt.Sprintf("email intents %d/%d, ended %d | emails at the SendGrid double %s", emails, len(ids), ended, sent), nil
	})
}

// poll calls check every 100ms until it reports done, printing its status
// whenever it changes; it fails when ctx ends first.
func (s *scenario) poll(ctx context.Context, what string, check func() (bool, string, error)) error {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	last := ""
	for {
		done, status, err := check()
		if err != nil {
			if ctx.Err() != nil {
				return stopped(ctx, what, last)
			}
			return err
		}
		if status != last {
			fmt.Fprintf(s.progress, "        %s\n", status)
			last = status
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return stopped(ctx, what, last)
		case <-ticker.C:
		}
	}
}

// stopped says why a wait ended early: the scenario's deadline or a
// signal.
func stopped(ctx context.Context, what, last string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out waiting for %s (--timeout); last seen: %s", what, last)
	}
	return fmt.Errorf("stopped while waiting for %s: %w", what, ctx.Err())
}

func references(ids []int64) []string {
	refs := make([]string, len(ids))
	for i, id := range ids {
		refs[i] = reference(id)
	}
	return refs
}

// fill completes the report from the database, the tagger's counters and
// the SendGrid double's records, and lists every problem it finds.
func (s *scenario) fill(ctx context.Context) error {
	r, ids := s.rep, s.rep.NoteIDs
	refs := references(ids)
	msgIDs, err := s.publishedIDs(ctx, ids)
	if err != nil {
		return err
	}
	var publishIntents, failedEmails int
	err = s.a.pool.QueryRow(ctx, reportSQL, ids, amqpprovider.KindPublish, sendgridprovider.KindEmail, refs, taggerConsumer, msgIDs).Scan(
		&r.NotesTagged, &r.TagsStored, &r.PublishAttempts, &r.NoteCreatedPublished, &publishIntents, &r.ProcessedMarkers,
		&r.EmailIntents, &r.EmailsSent, &r.EmailsInDoubt, &failedEmails)
	if err != nil {
		return fmt.Errorf("read the report: %w", err)
	}
	r.EmailsFailed = failedEmails
	st := s.a.consumer.Stats()
	r.TaggerDeliveries = st.Processed + st.Duplicates + st.AckFailures + st.Retried + st.DeadLettered + st.Refused + st.Requeued
	r.TaggerProcessed, r.DuplicatesAbsorbed, r.AcksLost, r.DeadLettered = st.Processed, st.Duplicates, st.AckFailures, st.DeadLettered
	r.ConnectionCuts = int(s.a.cutter.cuts.Load())

	n := len(ids)
	if publishIntents != n {
		r.problem("%d NoteCreated intents recorded for %d notes", publishIntents, n)
	}
	if r.NoteCreatedPublished != n {
		r.problem("NoteCreated published %d times for %d notes", r.NoteCreatedPublished, n)
	}
	if r.NotesTagged != n {
		r.problem("%d of %d notes tagged", r.NotesTagged, n)
	}
	if r.ProcessedMarkers != n {
		r.problem("the tagger has %d processed markers for %d NoteCreated events", r.ProcessedMarkers, n)
	}
	wantDuplicates := int64(r.BrokerDuplicates + r.ConnectionCuts)
	if r.DuplicatesAbsorbed < wantDuplicates {
		r.problem("the tagger absorbed %d duplicates, want at least %d (%d copies published, %d connections cut)",
			r.DuplicatesAbsorbed, wantDuplicates, r.BrokerDuplicates, r.ConnectionCuts)
	}
	if r.DeadLettered > 0 {
		r.problem("%d NoteCreated messages were dead-lettered (see queue %s)", r.DeadLettered, s.a.topo.DeadLetterQueue)
	}
	if r.EmailIntents != n {
		r.problem("%d email intents recorded for %d notes", r.EmailIntents, n)
	}
	if r.EmailsSent != r.EmailIntents {
		r.problem("%d of %d email intents succeeded (%d in_doubt, %d failed)", r.EmailsSent, r.EmailIntents, r.EmailsInDoubt, r.EmailsFailed)
	}
	if r.PostRetriesAbsorbed != r.PostRetries {
		r.problem("%d of %d retried POSTs were absorbed", r.PostRetriesAbsorbed, r.PostRetries)
	}
	if s.a.double == nil {
		return nil
	}
	perNote := map[string]int{}
	for _, e := range s.a.double.Emails() {
		perNote[e.CustomArgs["note_id"]]++
	}
	for _, id := range ids {
		switch c := perNote[strconv.FormatInt(id, 10)]; {
		case c == 0:
			r.MissingEmails++
		case c > 1:
			r.DuplicateEmails += c - 1
		}
		r.EmailsAtDouble += perNote[strconv.FormatInt(id, 10)]
	}
	if d := s.a.double.DuplicateEffects(); d > 0 {
		r.problem("%d email intents caused more than one email at the double", d)
	}
	if r.DuplicateEmails > 0 {
		r.problem("%d duplicate emails at the SendGrid double", r.DuplicateEmails)
	}
	if r.MissingEmails > 0 {
		r.problem("%d notes have no email at the SendGrid double", r.MissingEmails)
	}
	return nil
}

// printReport writes the report for people.
func printReport(w io.Writer, r *report) {
	fmt.Fprintf(w, "\nNoteCreated example report (run %s)\n", r.RunID)
	line := func(label string, format string, args ...any) {
		fmt.Fprintf(w, "  %-30s %s\n", label, fmt.Sprintf(format, args...))
	}
	kept := "dropped at exit"
	if r.DatabaseKept {
		kept = "kept"
	}
	line("database", "%s (%s)", r.Database, kept)
	line("notes created", "%d", r.NotesCreated)
	line("POST retries absorbed", "%d of %d (200, same note, nothing written)", r.PostRetriesAbsorbed, r.PostRetries)
	line("NoteCreated published", "%d (confirmed by RabbitMQ, of %d publish attempts)", r.NoteCreatedPublished, r.PublishAttempts)
	line("duplicates injected", "%d copy published straight to RabbitMQ, %d connection cut after commit", r.BrokerDuplicates, r.ConnectionCuts)
	line("deliveries to the tagger", "%d", r.TaggerDeliveries)
	line("  handled (tags + email)", "%d (one per note: the tagger's processed markers)", r.ProcessedMarkers)
	line("  duplicates absorbed", "%d (acked with no effect; acks lost after commit: %d)", r.DuplicatesAbsorbed, r.AcksLost)
	line("notes tagged", "%d (%d tags)", r.NotesTagged, r.TagsStored)
	line("email intents", "%d: succeeded %d, in_doubt %d, failed %d", r.EmailIntents, r.EmailsSent, r.EmailsInDoubt, r.EmailsFailed)
	if r.SendGrid == "double" {
		line("emails at SendGrid double", "%d", r.EmailsAtDouble)
		line("duplicate emails", "%d", r.DuplicateEmails)
	} else {
		line("emails at SendGrid", "not countable here (real SendGrid): see the intents above")
	}
	line("seconds", "%.1f", r.Seconds)
	if r.ok() {
		line("result", "OK: every effect once, nothing missing")
		return
	}
	line("result", "FAILED")
	for _, p := range r.Problems {
		fmt.Fprintf(w, "    - %s\n", p)
	}
}

// publishedIDs returns the message-id each note's NoteCreated went out
// with: the key the dispatcher sent the broker (the intent's key under the
// deployment's namespace), which the tagger's inbox deduplicates on.
func (s *scenario) publishedIDs(ctx context.Context, noteIDs []int64) ([]string, error) {
	out := make([]string, len(noteIDs))
	for i, id := range noteIDs {
		if err := s.a.pool.QueryRow(ctx, publishedIDSQL, messageID(id)).Scan(&out[i]); err != nil {
			return nil, fmt.Errorf("read note %d's published message-id: %w", id, err)
		}
	}
	return out, nil
}
