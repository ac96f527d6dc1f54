package adminhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
	"github.com/outboxkit/outbox/internal/bytecheck"
	"github.com/outboxkit/outbox/internal/ingest"
	"github.com/outboxkit/outbox/internal/tracing"
)

// defaultAPIActor is the actor of an API action without an X-Actor header.
const defaultAPIActor = "api"

// actions are the operator actions, by the name used in paths.
var actions = map[string]struct {
	// verb is what the dashboard's button says.
	verb string
	kind audit.ActionKind
}{
	"retry":   {"Resend", audit.ActionResend},
	"resend":  {"Resend", audit.ActionResend}, // the CLI's and the dashboard's other name for it
	"cancel":  {"Cancel", audit.ActionCancel},
	"resolve": {"Resolve", audit.ActionResolve},
}

// actionRequest is the body of POST /api/v1/intents/{id}/{action}.
type actionRequest struct {
	// Reason goes into the event log; required to resolve.
	Reason string `json:"reason"`
	// As is the outcome of a resolve: "succeeded" or "failed".
	As string `json:"as"`
	// IfState, when set, makes the action conditional on the intent still
	// being in that state (409 otherwise).
	IfState string `json:"if_state"`
	// IfVersion, when set, makes it conditional on the intent still being
	// at that version, as intents carry it ("g0.a2": key_generation and
	// attempt_count), 409 otherwise: what the caller saw.
	IfVersion string `json:"if_version"`
	// ActionID identifies the action: a request repeated with the same id
	// (after a lost answer) is found applied and answered with the intent
	// as it is, not applied twice.
	ActionID string `json:"action_id"`
	// ProviderRef, for a resolve as succeeded only, is the provider's
	// reference for the effect (see audit.Action.ProviderRef).
	ProviderRef string `json:"provider_ref"`
}

func (h *Handler) apiList(w http.ResponseWriter, r *http.Request) error {
	f, err := parseFilter(r.URL.Query(), h.cfg.Now())
	if err != nil {
		return err
	}
	if err := h.checkKnownChoices(r.Context(), f); err != nil {
		return err
	}
	page, err := h.cfg.Audit.List(r.Context(), f)
	if err != nil {
		return err
	}
	if page.Intents == nil {
		page.Intents = []intenttype.Intent{}
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

func (h *Handler) apiGet(w http.ResponseWriter, r *http.Request) error {
	ref := r.PathValue("ref")
	if err := checkRef(ref); err != nil {
		return err
	}
	d, err := h.cfg.Audit.Get(r.Context(), ref)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Handler) apiStats(w http.ResponseWriter, r *http.Request) error {
	st, _, err := h.stats.get(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (h *Handler) apiAction(w http.ResponseWriter, r *http.Request) error {
	action := r.PathValue("action")
	if _, ok := actions[action]; !ok {
		return &requestError{Status: http.StatusNotFound, Field: "action", Msg: fmt.Sprintf("unknown action %q (known: retry, cancel, resolve)", truncate(action, 40))}
	}
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req actionRequest
	if err := decodeBody(r.Body, &req, true); err != nil {
		return err
	}
	actor := actorOf(r)
	in, err := h.act(r, id, action, req, actor)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"intent": in})
	return nil
}

// revealRequest is the body of POST /api/v1/intents/{id}/reveal.
type revealRequest struct {
	// Reason goes into the event log; required.
	Reason string `json:"reason"`
}

// apiReveal answers the intent's detail with its payload unredacted, after
// recording in its event log who (X-Actor) asked and why. The intent's
// state does not change.
func (h *Handler) apiReveal(w http.ResponseWriter, r *http.Request) error {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return err
	}
	var req revealRequest
	if err := decodeBody(r.Body, &req, false); err != nil {
		return err
	}
	actor := actorOf(r)
	d, err := h.cfg.Audit.Reveal(r.Context(), strconv.FormatInt(id, 10), actor, strings.TrimSpace(req.Reason))
	if err != nil {
		return err
	}
	h.cfg.Logger.InfoContext(r.Context(), "operator revealed a payload", "intent_id", id, "actor", actor)
	writeJSON(w, http.StatusOK, d)
	return nil
}

// actorOf is the X-Actor header, or defaultAPIActor.
func actorOf(r *http.Request) string {
	if actor := strings.TrimSpace(r.Header.Get("X-Actor")); actor != "" {
		return actor
	}
	return defaultAPIActor
}

// act carries out an operator action through audit, which validates its
// arguments and the transition, and returns the intent as it now is,
// payload redacted.
func (h *Handler) act(r *http.Request, id int64, action string, req actionRequest, actor string) (intenttype.Intent, error) {
	a := audit.Action{
		Kind:     actions[action].kind,
		IntentID: id,
		As:       intenttype.State(req.As),
		Actor:    actor,
		Reason:   strings.TrimSpace(req.Reason),
		IfState:  intenttype.State(req.IfState),
		// Not trimmed: a reference with spaces is refused, not altered.
		ProviderRef: req.ProviderRef,
		ActionID:    req.ActionID,
	}
	if req.IfVersion != "" {
		v, err := intenttype.ParseVersion(req.IfVersion)
		if err != nil {
			return intenttype.Intent{}, &requestError{Status: http.StatusBadRequest, Field: "if_version", Msg: err.Error()}
		}
		a.IfVersion = &v
	}
	in, err := h.cfg.Audit.Act(r.Context(), a)
	if err != nil {
		return intenttype.Intent{}, err
	}
	h.countsChanged()
	h.cfg.Logger.InfoContext(r.Context(), "operator action", "action", action, "intent_id", id, "actor", actor, "state", in.State)
	return in, nil
}

// recordedIntent is one intent in POST /api/v1/messages' answer.
type recordedIntent struct {
	ID             int64  `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	Kind           string `json:"kind"`
	Name           string `json:"name,omitempty"`
}

func (h *Handler) apiRecord(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if tooLarge := bodyTooLarge(err); tooLarge != nil {
			return tooLarge
		}
		return badRequest("", "read request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "request body is empty: send one message as JSON")
	}
	// The caller's W3C trace context, as a broker's message headers carry
	// it: the message's span, and the intents' attempts, continue its trace.
	ctx := tracing.Extract(r.Context(), r.Header.Get(tracing.TraceParentHeader),
		strings.Join(r.Header.Values(tracing.TraceStateHeader), ","))
	res, err := h.ingest.RecordJSON(ctx, body)
	if err != nil {
		return err
	}
	out := []recordedIntent{}
	for _, in := range res.Intents {
		out = append(out, recordedIntent{ID: in.ID, IdempotencyKey: in.Key, Kind: in.Kind, Name: in.Name})
	}
	status := http.StatusCreated
	if res.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"duplicate": res.Duplicate, "intents": out})
	return nil
}

// decodeBody decodes one JSON object with no unknown fields and no invalid
// UTF-8, NUL or lone surrogate escape. An empty body is allowed when
// emptyOK.
func decodeBody(body io.Reader, v any, emptyOK bool) error {
	data, err := io.ReadAll(body)
	if err != nil {
		if tooLarge := bodyTooLarge(err); tooLarge != nil {
			return tooLarge
		}
		return badRequest("", "read request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if emptyOK {
			return nil
		}
		return badRequest("", "request body is empty")
	}
	// encoding/json would rewrite invalid UTF-8 and lone surrogate escapes
	// to U+FFFD: a reason is recorded as sent or not at all.
	if err := bytecheck.JSON(data); err != nil {
		var be *bytecheck.Error
		errors.As(err, &be)
		return badRequest(be.Path, "request body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field = typeErr.Field
		} else if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
			field = strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`)
		}
		return badRequest(field, "request body: %v", err)
	}
	if dec.More() {
		return badRequest("", "request body holds more than one JSON value")
	}
	return nil
}

// classify maps an error to a status, a field and a message safe to show.
func (h *Handler) classify(r *http.Request, err error) (status int, field, msg string) {
	var reqErr *requestError
	var inputErr *ingest.InputError
	var transErr *audit.TransitionError
	var fieldErr *audit.FieldError
	switch {
	case errors.As(err, &reqErr):
		return reqErr.Status, reqErr.Field, reqErr.Msg
	case bodyTooLarge(err) != nil:
		return http.StatusRequestEntityTooLarge, "", bodyTooLarge(err).Msg
	case errors.As(err, &inputErr):
		return http.StatusBadRequest, inputErr.Field, inputErr.Error()
	case errors.Is(err, audit.ErrNotFound):
		return http.StatusNotFound, "", err.Error()
	case errors.As(err, &transErr):
		return http.StatusConflict, "", transErr.Error()
	case errors.As(err, &fieldErr) && errors.Is(err, audit.ErrInvalidFilter):
		param := filterParamOf[fieldErr.Field]
		if param == "" {
			param = fieldErr.Field
		}
		return http.StatusBadRequest, param, fmt.Sprintf("query parameter %q: %s", param, fieldErr.Problem)
	case errors.As(err, &fieldErr) && errors.Is(err, audit.ErrInvalidInput):
		field := fieldErr.Field
		if field == "actor" {
			field = "X-Actor"
		}
		return http.StatusBadRequest, field, fmt.Sprintf("%s: %s", field, fieldErr.Problem)
	case errors.Is(err, audit.ErrInvalidFilter), errors.Is(err, audit.ErrInvalidInput):
		return http.StatusBadRequest, "", err.Error()
	case r.Context().Err() != nil:
		return 499, "", "request cancelled"
	}
	h.cfg.Logger.ErrorContext(r.Context(), "admin request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	return http.StatusInternalServerError, "", "internal error (logged by the server)"
}

// filterParamOf maps audit.Filter's field names to query parameters.
var filterParamOf = map[string]string{
	"States": "state", "Kinds": "kind", "Providers": "provider", "Consumer": "consumer",
	"MessageID": "message_id", "Reference": "reference", "CreatedSince": "since",
	"CreatedUntil": "until", "Cursor": "cursor", "Limit": "limit",
}

// slogPrinter adapts a slog.Logger to promhttp's error log.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Error("metrics: " + fmt.Sprint(v...)) }

// checkKnownChoices refuses a kind or provider filter that names none the
// dashboard offers, as the dashboard does: a typo would silently match
// nothing. The counts that list the kinds of old intents no provider
// declares any more are read only when a filter names an unregistered
// kind.
func (h *Handler) checkKnownChoices(ctx context.Context, f audit.Filter) error {
	registered := h.cfg.Audit.Kinds()
	var stats audit.Stats
	for _, k := range f.Kinds {
		if !slices.Contains(registered, k) {
			var err error
			if stats, _, err = h.stats.get(ctx); err != nil {
				return err
			}
			break
		}
	}
	if err := checkChoices("kind", f.Kinds, kindChoices(registered, stats, f.Kinds)); err != nil {
		return err
	}
	return checkChoices("provider", f.Providers, providerChoices(h.cfg.Audit.Providers(), f.Providers))
}
