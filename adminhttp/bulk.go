package adminhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/outboxkit/outbox/intents/audit"
	"github.com/outboxkit/outbox/intents/intenttype"
)

// bulkRequest is the body of POST /api/v1/intents/bulk.
type bulkRequest struct {
	// Filter selects the intents, with the names and forms of GET
	// /api/v1/intents' query parameters; state is required.
	Filter bulkFilter `json:"filter"`
	// Action is retry, cancel or resolve.
	Action string `json:"action"`
	// As is the outcome of a resolve: "succeeded" or "failed".
	As string `json:"as"`
	// Reason goes into every intent's event log; required.
	Reason string `json:"reason"`
	// DryRun lists what would change and changes nothing.
	DryRun bool `json:"dry_run"`
	// ActionID identifies the bulk action: sent again with the same id
	// (after a lost answer), no intent is acted on twice.
	ActionID string `json:"action_id"`
	// Seen, when set, is what the caller saw (a dry run's items: intent id
	// and version): only those intents are acted on, each only at the
	// version seen.
	Seen []bulkSeen `json:"seen"`
}

// bulkSeen is one intent as a dry run showed it.
type bulkSeen struct {
	IntentID int64              `json:"intent_id"`
	Version  intenttype.Version `json:"version"`
}

type bulkFilter struct {
	State     stringList `json:"state"`
	Kind      stringList `json:"kind"`
	Provider  stringList `json:"provider"`
	Consumer  string     `json:"consumer"`
	MessageID string     `json:"message_id"`
	Reference string     `json:"reference"`
	Since     string     `json:"since"`
	Until     string     `json:"until"`
}

// values is the filter as GET /api/v1/intents' query, for parseFilter.
func (f bulkFilter) values() url.Values {
	q := url.Values{}
	for name, list := range map[string][]string{"state": f.State, "kind": f.Kind, "provider": f.Provider} {
		if len(list) > 0 {
			q[name] = list
		}
	}
	for name, v := range map[string]string{"consumer": f.Consumer, "message_id": f.MessageID, "reference": f.Reference, "since": f.Since, "until": f.Until} {
		if v != "" {
			q.Set(name, v)
		}
	}
	return q
}

// apiBulk applies one operator action to every intent a filter selects,
// through audit.ActAll: each intent in its own transaction with its own
// event, only if still in the state it was listed in. It answers the
// summary and every intent's outcome (200 even when some were refused:
// see "refused" and each item's "why").
func (h *Handler) apiBulk(w http.ResponseWriter, r *http.Request) error {
	var req bulkRequest
	if err := decodeBody(r.Body, &req, false); err != nil {
		return err
	}
	act, ok := actions[req.Action]
	if !ok {
		return badRequest("action", "unknown action %q (known: retry, cancel, resolve)", truncate(req.Action, 40))
	}
	if len(req.Filter.State) == 0 {
		return badRequest("filter.state", "a bulk action needs the states to act on (in_doubt, say)")
	}
	f, err := parseFilter(req.Filter.values(), h.cfg.Now())
	if err != nil {
		return err
	}
	actor := actorOf(r)
	ba := audit.BulkAction{Kind: act.kind, As: intenttype.State(req.As), Actor: actor, Reason: strings.TrimSpace(req.Reason), ActionID: req.ActionID}
	if req.Seen != nil {
		if len(req.Seen) > audit.MaxBulkIntents {
			return badRequest("seen", "more than %d intents", audit.MaxBulkIntents)
		}
		ba.Seen = make(map[int64]intenttype.Version, len(req.Seen))
		for _, it := range req.Seen {
			ba.Seen[it.IntentID] = it.Version
		}
	}
	res, err := h.cfg.Audit.ActAll(r.Context(), f, ba, req.DryRun, nil)
	if err != nil && res.Matched == 0 {
		return err
	}
	if !req.DryRun {
		h.countsChanged()
		h.cfg.Logger.InfoContext(r.Context(), "operator bulk action", "action", req.Action, "actor", actor,
			"matched", res.Matched, "done", res.Done, "refused", res.Refused, "errors", res.Errors)
	}
	if err != nil {
		return fmt.Errorf("bulk %s stopped after %d of %d intents: %w", req.Action, len(res.Items), res.Matched, err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// stringList is a JSON list of strings, or one string for a list of one:
// {"state": "in_doubt"} as {"state": ["in_doubt"]}.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or a list of strings")
	}
	*l = many
	return nil
}
