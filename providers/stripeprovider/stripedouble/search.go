package stripedouble

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// ---- GET /v1/payment_intents/search ----

// clauseRE matches one clause of the supported subset of Stripe's search
// query language: metadata['key']:'value' (either quote), or
// status/customer/currency:'value'.
var clauseRE = regexp.MustCompile(`^(?:metadata\[(?:'([^']*)'|"([^"]*)")\]|(status|customer|currency))\s*:\s*(?:'([^']*)'|"([^"]*)")$`)

var andRE = regexp.MustCompile(`\s+AND\s+`)

type clause struct {
	field, metaKey, value string
}

func parseQuery(q string) ([]clause, bool) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, false
	}
	var out []clause
	for _, part := range andRE.Split(q, -1) {
		m := clauseRE.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return nil, false
		}
		c := clause{field: m[3], value: m[4] + m[5]}
		if c.field == "" {
			c.field = "metadata"
			c.metaKey = m[1] + m[2]
		}
		out = append(out, c)
	}
	return out, true
}

func (c clause) match(pi *PaymentIntent) bool {
	switch c.field {
	case "metadata":
		v, ok := pi.Metadata[c.metaKey]
		return ok && v == c.value
	case "status":
		return pi.Status == c.value
	case "customer":
		return pi.Customer == c.value
	case "currency":
		return pi.Currency == c.value
	}
	return false
}

func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request) {
	s.countRequest()
	s.mu.Lock()
	s.searches++
	s.mu.Unlock()
	reqID := newID("req_", 14)
	if !s.authorize(w, r, reqID) {
		return
	}
	if s.lookupFault(w, r, reqID) {
		return
	}
	q := r.URL.Query()
	clauses, ok := parseQuery(q.Get("query"))
	if !ok {
		s.writeError(w, r, reqID, http.StatusBadRequest, apiError{
			Type:    "invalid_request_error",
			Param:   "query",
			Message: "The search query is not supported by this test double: " + strconv.Quote(q.Get("query")) + ". Supported: metadata['key']:'value', status:'...', customer:'...', currency:'...', joined with AND.",
		})
		return
	}
	limit := 10
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			s.writeError(w, r, reqID, http.StatusBadRequest, apiError{Type: "invalid_request_error", Param: "limit", Message: "This value must be between 1 and 100."})
			return
		}
		limit = n
	}
	offset := 0
	if pg := q.Get("page"); pg != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(pg, "page_"))
		if err != nil || n < 0 || !strings.HasPrefix(pg, "page_") {
			s.writeError(w, r, reqID, http.StatusBadRequest, apiError{Type: "invalid_request_error", Param: "page", Message: "Invalid page: " + pg})
			return
		}
		offset = n
	}
	s.mu.Lock()
	now := s.now()
	var hits []map[string]any
	for _, pi := range newestFirst(s.pis) { // as Stripe orders search results
		if now.Before(pi.SearchableAt) {
			continue // not indexed yet: search is eventually consistent
		}
		all := true
		for _, c := range clauses {
			if !c.match(pi) {
				all = false
				break
			}
		}
		if all {
			hits = append(hits, pi.wire())
		}
	}
	s.mu.Unlock()
	total := len(hits)
	hits = hits[min(offset, total):min(offset+limit, total)]
	if hits == nil {
		hits = []map[string]any{}
	}
	var next any
	hasMore := offset+limit < total
	if hasMore {
		next = "page_" + strconv.Itoa(offset+limit)
	}
	body, _ := json.Marshal(map[string]any{
		"object":    "search_result",
		"data":      hits,
		"has_more":  hasMore,
		"next_page": next,
		"url":       "/v1/payment_intents/search",
	})
	s.write(w, r, reqID, http.StatusOK, body)
}
