package adminhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/intents/audit"
)

// revealForm is the intent page's form that reveals its payload.
type revealForm struct {
	// Revealed: the page shows the payload unredacted.
	Revealed bool
	// Reason and Actor are what the operator typed, kept when the form is
	// shown again with Error.
	Reason, Actor, Error string
}

// revealSubmit answers the intent page's reveal form with the intent's
// page, its payload unredacted, after audit.Reveal wrote who asked and why
// to its event log (as the API's reveal does; the intent's state does not
// change). It is a POST, guarded like every form by the CSRF token, so a
// link or a prefetch never reveals anything; the answer is the page
// itself, never a redirect, so the payload is not kept anywhere to be
// fetched again (and every response is Cache-Control: no-store). A reason
// is required: without one the page comes back with the form's error, and
// nothing is revealed or written.
func (h *Handler) revealSubmit(w http.ResponseWriter, r *http.Request) error {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return err
	}
	form := revealForm{Reason: strings.TrimSpace(r.PostForm.Get("reason")), Actor: strings.TrimSpace(r.PostForm.Get("actor"))}
	actor := dashboardActor(form.Actor)
	d, err := h.cfg.Audit.Reveal(r.Context(), strconv.FormatInt(id, 10), actor, form.Reason)
	var fieldErr *audit.FieldError
	switch {
	case errors.As(err, &fieldErr) && errors.Is(err, audit.ErrInvalidInput):
		if d, err = h.cfg.Audit.Get(r.Context(), strconv.FormatInt(id, 10)); err != nil {
			return err
		}
		form.Error = revealProblem(fieldErr)
		h.render(w, r, http.StatusBadRequest, "detail.html", fmt.Sprintf("Intent %d", id), detailBody{Detail: d, Actions: offered(d.Intent.State), Reveal: form})
		return nil
	case err != nil:
		return err
	}
	h.cfg.Logger.InfoContext(r.Context(), "operator revealed a payload", "intent_id", id, "actor", actor)
	form.Revealed = true
	h.render(w, r, http.StatusOK, "detail.html", fmt.Sprintf("Intent %d", id), detailBody{Detail: d, Actions: offered(d.Intent.State), Reveal: form})
	return nil
}

// revealProblem says what is wrong with the reveal form, by its labels.
func revealProblem(e *audit.FieldError) string {
	switch e.Field {
	case "reason":
		return "Why you need the payload whole: " + e.Problem + "."
	case "actor":
		return "Your name: " + e.Problem + "."
	}
	return e.Error()
}
