package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/mail"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/intents"
	"github.com/outboxkit/outbox/providers/amqpprovider"
)

// Limits on a note, checked before anything is written.
const (
	maxRequestBytes       = 64 << 10
	maxTitleLength        = 200
	maxBodyLength         = 10000
	maxEmailLength        = 320
	maxIdempotencyKeyLen  = 200
	headerIdempotencyKey  = "Idempotency-Key"
	headerIdempotentReply = "Idempotent-Replayed"
)

// note is a note as the API returns it.
type note struct {
	ID          int64      `json:"id"`
	Title       string     `json:"title"`
	Body        string     `json:"body"`
	AuthorEmail string     `json:"author_email"`
	CreatedAt   time.Time  `json:"created_at"`
	TaggedAt    *time.Time `json:"tagged_at"`
	Tags        []string   `json:"tags"`
}

func scanNote(row pgx.Row) (note, error) {
	var n note
	err := row.Scan(&n.ID, &n.Title, &n.Body, &n.AuthorEmail, &n.CreatedAt, &n.TaggedAt, &n.Tags)
	return n, err
}

// createRequest is POST /notes's body.
type createRequest struct {
	Title       string `json:"title"`
	Body        string `json:"body"`
	AuthorEmail string `json:"author_email"`
}

// apiError is every error response's body. Field names the offending
// input: a JSON field, the Idempotency-Key header or the id in the path.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// api serves the notes API.
type api struct {
	pool     *pgxpool.Pool
	client   *intents.Client
	exchange string
	log      *slog.Logger
}

func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notes", a.createNote)
	mux.HandleFunc("GET /notes/{id}", a.getNote)
	return mux
}

// createNote inserts a note and, in the same transaction, records the
// rabbitmq.publish intent for its NoteCreated event. With an
// Idempotency-Key, a repeat of the POST returns the first one's note with
// 200 instead of 201 and writes nothing.
func (a *api) createNote(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	req, field, err := decodeCreate(w, r)
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
			err = fmt.Errorf("the request body is larger than %d bytes", maxRequestBytes)
		}
		writeJSON(w, status, apiError{Error: err.Error(), Field: field})
		return
	}
	var key *string
	if k := r.Header.Get(headerIdempotencyKey); k != "" || len(r.Header.Values(headerIdempotencyKey)) > 0 {
		if k == "" || len(k) > maxIdempotencyKeyLen || !printable(k) {
			writeJSON(w, http.StatusBadRequest, apiError{Field: headerIdempotencyKey,
				Error: fmt.Sprintf("%s must be 1 to %d printable characters", headerIdempotencyKey, maxIdempotencyKeyLen)})
			return
		}
		key = &k
	}

	n, created, err := a.insert(ctx, req, key)
	switch {
	case errors.Is(err, errKeyReused):
		writeJSON(w, http.StatusUnprocessableEntity, apiError{Field: headerIdempotencyKey, Error: err.Error()})
		return
	case err != nil:
		a.log.ErrorContext(ctx, "create note failed; nothing was written", "error", err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the note could not be stored; nothing was written, retry (with the same Idempotency-Key)"})
		return
	}
	w.Header().Set("Location", "/notes/"+strconv.FormatInt(n.ID, 10))
	if !created {
		a.log.InfoContext(ctx, "retried POST absorbed: returning the note created by the first", "note_id", n.ID)
		w.Header().Set(headerIdempotentReply, "true")
		writeJSON(w, http.StatusOK, n)
		return
	}
	writeJSON(w, http.StatusCreated, n)
}

// errKeyReused is returned when an Idempotency-Key comes back with
// different fields.
var errKeyReused = errors.New("this Idempotency-Key was used for a note with a different title, body or author_email")

// insert runs the outbox transaction. created is false when key already
// named a note, which is returned instead.
func (a *api) insert(ctx context.Context, req createRequest, key *string) (n note, created bool, err error) {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return n, false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit

	replay := func() (note, bool, error) {
		first, err := scanNote(tx.QueryRow(ctx, noteByKeySQL, *key))
		if err != nil {
			return note{}, false, fmt.Errorf("load the note of a retried POST: %w", err)
		}
		if first.Title != req.Title || first.Body != req.Body || first.AuthorEmail != req.AuthorEmail {
			return note{}, false, errKeyReused
		}
		return first, false, nil
	}
	if key != nil {
		// A retry of a POST that committed: answer without inserting (an
		// insert that conflicts would still use up an id).
		var exists bool
		if err := tx.QueryRow(ctx, noteKeyExistsSQL, *key).Scan(&exists); err != nil {
			return n, false, fmt.Errorf("look up the Idempotency-Key: %w", err)
		}
		if exists {
			return replay()
		}
	}
	n = note{Title: req.Title, Body: req.Body, AuthorEmail: req.AuthorEmail, Tags: []string{}}
	err = tx.QueryRow(ctx, insertNoteSQL, req.Title, req.Body, req.AuthorEmail, key).Scan(&n.ID, &n.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// A concurrent POST with the same key committed while we
		// inserted: the unique index made us wait for it, and the insert
		// did nothing. Return its note.
		return replay()
	}
	if err != nil {
		return n, false, fmt.Errorf("insert note: %w", err)
	}
	event, err := json.Marshal(noteCreated{NoteID: n.ID, Title: n.Title, Body: n.Body, AuthorEmail: n.AuthorEmail})
	if err != nil {
		return n, false, err
	}
	// The outbox: NoteCreated is published by the dispatcher once this
	// commits, and never if it rolls back. Its key, derived from the note,
	// becomes the message's AMQP message-id.
	recorded, err := a.client.RecordTx(ctx, tx, intents.Intent{
		Kind:      amqpprovider.KindPublish,
		Key:       messageID(n.ID),
		Reference: reference(n.ID),
		Payload: amqpprovider.Publish{
			Exchange:   a.exchange,
			RoutingKey: routingKeyNoteCreated,
			Body:       event,
			Headers:    map[string]string{"type": "NoteCreated"},
		},
	})
	if err != nil {
		return n, false, fmt.Errorf("record NoteCreated: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return n, false, fmt.Errorf("commit: %w", err)
	}
	a.log.InfoContext(ctx, "note created; NoteCreated recorded in the outbox", "note_id", n.ID, "intent_id", recorded[0].ID, "message_id", recorded[0].Key)
	return n, true, nil
}

// decodeCreate reads and validates POST /notes's body. On error, field
// names the offending JSON field, if any.
func decodeCreate(w http.ResponseWriter, r *http.Request) (req createRequest, field string, err error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return req, "", err
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return req, typeErr.Field, fmt.Errorf("%s must be a string", typeErr.Field)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
			return req, name, fmt.Errorf("unknown field %q: a note has title, body and author_email", name)
		case errors.Is(err, io.EOF):
			return req, "", errors.New(`the body must be a JSON object {"title","body","author_email"}`)
		default:
			return req, "", fmt.Errorf("the body is not a valid JSON object: %v", err)
		}
	}
	if dec.More() {
		return req, "", errors.New("the body must hold one JSON object")
	}
	req.Title = strings.TrimSpace(req.Title)
	req.AuthorEmail = strings.TrimSpace(req.AuthorEmail)
	switch {
	case req.Title == "":
		return req, "title", errors.New("title is required")
	case utf8.RuneCountInString(req.Title) > maxTitleLength:
		return req, "title", fmt.Errorf("title must be at most %d characters", maxTitleLength)
	case !printable(req.Title):
		return req, "title", errors.New("title must be one line of printable text")
	case strings.TrimSpace(req.Body) == "":
		return req, "body", errors.New("body is required")
	case len(req.Body) > maxBodyLength:
		return req, "body", fmt.Errorf("body must be at most %d bytes", maxBodyLength)
	case !utf8.ValidString(req.Body):
		return req, "body", errors.New("body must be valid UTF-8")
	case req.AuthorEmail == "":
		return req, "author_email", errors.New("author_email is required")
	case !validEmail(req.AuthorEmail):
		return req, "author_email", errors.New("author_email must be a bare email address, such as ann@example.com")
	}
	return req, "", nil
}

// validEmail accepts a bare address, as SendGrid requires of the author's
// notification, so a note accepted here never yields an email intent the
// provider refuses.
func validEmail(s string) bool {
	if len(s) > maxEmailLength {
		return false
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return false
	}
	local, domain, ok := strings.Cut(s, "@")
	return ok && local != "" && domain != "" && len(local) <= 64
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// getNote returns a note with its tags.
func (a *api) getNote(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeJSON(w, http.StatusBadRequest, apiError{Field: "id", Error: "id must be a positive integer"})
		return
	}
	n, err := scanNote(a.pool.QueryRow(r.Context(), noteByIDSQL, id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeJSON(w, http.StatusNotFound, apiError{Field: "id", Error: fmt.Sprintf("note %d does not exist", id)})
	case err != nil:
		a.log.ErrorContext(r.Context(), "get note failed", "note_id", id, "error", err)
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "the note could not be read"})
	default:
		writeJSON(w, http.StatusOK, n)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
