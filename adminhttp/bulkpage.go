package adminhttp

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

// previewReason is the reason of a bulk preview's dry run, which ActAll
// requires and records nowhere.
const previewReason = "dashboard preview"

// bulkOutcomeWords says an audit.BulkItem's outcome on the page.
var bulkOutcomeWords = map[string]string{
	audit.BulkWould: "will change", audit.BulkDone: "done", audit.BulkRefused: "refused", audit.BulkError: "error",
}

// bulkBody is the bulk action's page: the preview of what it would do,
// with the confirmation form, or what it did.
type bulkBody struct {
	// Action is the path's action: retry, cancel or resolve.
	Action string
	// As is a resolve's outcome.
	As intenttype.State
	// Filter is the filter as the list's query, which the form sends back.
	Filter string
	// ListURL is the list with this filter.
	ListURL string
	Result  audit.BulkResult
	// Applied: Result is the real run's, not the preview's.
	Applied bool
	// Seen is the intents the preview showed changeable, each at the
	// version it showed ("12:g0.a1 15:g1.a3"): the form acts on those only.
	Seen string
	// ActionID is the form's action identity: posted twice, it is applied
	// once.
	ActionID string
	// Reason, Actor and Error are the form's, kept when it comes back.
	Reason, Actor, Error string
}

// bulkLink offers one bulk action on the list's filter.
type bulkLink struct {
	Label, URL, Class string
}

// bulkLinks offers the bulk actions allowed from any of f's states, each
// leading to its preview; none without a state (a bulk action over every
// state is a mistake).
func (h *Handler) bulkLinks(f audit.Filter) []bulkLink {
	q := filterQuery(f)
	q.Del("limit") // a bulk action is over every page
	var out []bulkLink
	for _, c := range []struct {
		action string
		as     intenttype.State
		label  string
	}{
		{"retry", "", "Resend all…"},
		{"resolve", intenttype.StateSucceeded, "Resolve all as succeeded…"},
		{"resolve", intenttype.StateFailed, "Resolve all as failed…"},
		{"cancel", "", "Cancel all…"},
	} {
		if !slices.ContainsFunc(f.States, func(st intenttype.State) bool { return slices.Contains(actions[c.action].kind.AllowedFrom(), st) }) {
			continue
		}
		v := maps.Clone(q)
		if c.as != "" {
			v.Set("as", string(c.as))
		}
		out = append(out, bulkLink{Label: c.label, URL: h.path("/bulk/" + c.action + "?" + v.Encode()), Class: "bulk-" + c.action + string(c.as)})
	}
	return out
}

// bulkRequest reads a bulk action's action (from the path), its outcome
// ("as") and its filter from q, as the list reads a filter; states are
// required.
func (h *Handler) bulkRequest(r *http.Request, q url.Values) (bulkBody, audit.Filter, error) {
	action := r.PathValue("action")
	if actions[action].verb == "" {
		return bulkBody{}, audit.Filter{}, &requestError{Status: http.StatusNotFound, Msg: fmt.Sprintf("unknown action %q (known: retry, cancel, resolve)", truncate(action, 40))}
	}
	q = maps.Clone(q)
	as := intenttype.State(q.Get("as"))
	delete(q, "as")
	f, err := parseFilter(q, h.cfg.Now())
	if err != nil {
		return bulkBody{}, f, err
	}
	if len(f.States) == 0 {
		return bulkBody{}, f, badRequest("state", "a bulk action needs the states to act on (in_doubt, say): filter the list by state first")
	}
	if err := h.checkKnownChoices(r.Context(), f); err != nil {
		return bulkBody{}, f, err
	}
	f.Cursor, f.Limit = "", 0
	query := filterQuery(f)
	return bulkBody{Action: action, As: as, Filter: query.Encode(), ListURL: h.path("/?" + query.Encode())}, f, nil
}

// action is b's audit.BulkAction, by actor, for reason, on the intents
// seen (nil: on whatever the filter selects).
func (b bulkBody) action(actor, reason string, seen map[int64]intenttype.Version) audit.BulkAction {
	return audit.BulkAction{Kind: actions[b.Action].kind, As: b.As, Actor: actor, Reason: reason, ActionID: b.ActionID, Seen: seen}
}

// bulkPreview is a bulk action's first step: a dry run listing every
// intent the filter selects and what the action would do to each, with
// the form that confirms it for the changeable ones, at the versions
// listed.
func (h *Handler) bulkPreview(w http.ResponseWriter, r *http.Request) error {
	b, f, err := h.bulkRequest(r, r.URL.Query())
	if err != nil {
		return err
	}
	b.ActionID = newFormActionID()
	if b.Result, err = h.cfg.Audit.ActAll(r.Context(), f, b.action(dashboardActor(""), previewReason, nil), true, nil); err != nil {
		return err
	}
	b.Seen = formatSeen(b.Result)
	h.render(w, r, http.StatusOK, "bulk.html", bulkTitle(b), b)
	return nil
}

// bulkSubmit carries out a confirmed bulk action on the intents its
// preview showed changeable, each only at the version shown and once
// however often the form is posted (the form's action id), and shows what
// became of each. An incomplete form shows the preview again, of the same
// intents at the same versions.
func (h *Handler) bulkSubmit(w http.ResponseWriter, r *http.Request) error {
	q, err := url.ParseQuery(r.PostForm.Get("filter"))
	if err != nil {
		return badRequest("filter", "the form's filter is malformed: open the preview again")
	}
	if as := r.PostForm.Get("as"); as != "" {
		q.Set("as", as)
	}
	b, f, err := h.bulkRequest(r, q)
	if err != nil {
		return err
	}
	b.Seen, b.ActionID = r.PostForm.Get("seen"), r.PostForm.Get("action_id")
	b.Reason, b.Actor = r.PostForm.Get("reason"), strings.TrimSpace(r.PostForm.Get("actor"))
	seen, err := parseSeen(b.Seen)
	if err != nil {
		return err
	}
	if b.ActionID == "" {
		return badRequest("action_id", "the form carries no action id: open the preview again")
	}
	again := func(msg string) error {
		b.Error = msg
		if b.Result, err = h.cfg.Audit.ActAll(r.Context(), f, b.action(dashboardActor(""), previewReason, seen), true, nil); err != nil {
			return err
		}
		h.render(w, r, http.StatusBadRequest, "bulk.html", bulkTitle(b), b)
		return nil
	}
	switch {
	case r.PostForm.Get("confirmed") != "yes":
		return again("Tick the confirmation box first.")
	case strings.TrimSpace(b.Reason) == "":
		return again("Give a reason: it goes into every intent's event log.")
	}
	actor := dashboardActor(b.Actor)
	b.Result, err = h.cfg.Audit.ActAll(r.Context(), f, b.action(actor, strings.TrimSpace(b.Reason), seen), false, nil)
	h.countsChanged()
	var fieldErr *audit.FieldError
	if errors.As(err, &fieldErr) && errors.Is(err, audit.ErrInvalidInput) {
		return again(fieldErr.Field + ": " + fieldErr.Problem)
	}
	h.cfg.Logger.InfoContext(r.Context(), "operator bulk action", "action", b.Action, "actor", actor,
		"matched", b.Result.Matched, "done", b.Result.Done, "refused", b.Result.Refused, "errors", b.Result.Errors)
	if err != nil {
		return fmt.Errorf("bulk %s stopped after %d intents: %w", b.Action, len(b.Result.Items), err)
	}
	b.Applied = true
	h.render(w, r, http.StatusOK, "bulk.html", bulkTitle(b), b)
	return nil
}

func bulkTitle(b bulkBody) string {
	title := actions[b.Action].verb + " in bulk"
	if b.As != "" {
		title += " as " + string(b.As)
	}
	return title
}

// formatSeen writes the intents a preview found changeable, each with the
// version it listed, as the form carries them: "12:g0.a1 15:g1.a3".
func formatSeen(res audit.BulkResult) string {
	var parts []string
	for _, it := range res.Items {
		if it.Outcome == audit.BulkWould {
			parts = append(parts, strconv.FormatInt(it.IntentID, 10)+":"+it.Version.String())
		}
	}
	return strings.Join(parts, " ")
}

// parseSeen reads what formatSeen wrote. An empty list is refused: a
// confirmation with nothing seen would act on nothing.
func parseSeen(s string) (map[int64]intenttype.Version, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > audit.MaxBulkIntents {
		return nil, badRequest("seen", "the form lists no intents seen, or more than %d: open the preview again", audit.MaxBulkIntents)
	}
	seen := make(map[int64]intenttype.Version, len(fields))
	for _, field := range fields {
		id, version, _ := strings.Cut(field, ":")
		n, err := strconv.ParseInt(id, 10, 64)
		v, verr := intenttype.ParseVersion(version)
		if err != nil || n < 1 || verr != nil {
			return nil, badRequest("seen", "the form's list of intents seen is malformed at %q: open the preview again", truncate(field, 40))
		}
		seen[n] = v
	}
	return seen, nil
}
