package stripedouble

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// The machinery every list endpoint shares: Stripe's list endpoints read
// limit, starting_after, ending_before and created the same way, order
// newest first and answer a list object with has_more, whatever they list.

// listItem is an object a list endpoint returns.
type listItem interface {
	objectID() string
	createdAt() time.Time
	wire() map[string]any
}

func (pi *PaymentIntent) objectID() string     { return pi.ID }
func (pi *PaymentIntent) createdAt() time.Time { return pi.Created }
func (rf *Refund) objectID() string            { return rf.ID }
func (rf *Refund) createdAt() time.Time        { return rf.Created }

// newestFirst returns items (in the order they were made) ordered as
// Stripe lists them: newest first by created (whole seconds), and among
// those created in the same second, the one made last first. The caller
// holds s.mu.
func newestFirst[T listItem](items []T) []T {
	out := make([]T, 0, len(items))
	for i := len(items) - 1; i >= 0; i-- {
		out = append(out, items[i])
	}
	slices.SortStableFunc(out, func(a, b T) int {
		switch ca, cb := a.createdAt().Unix(), b.createdAt().Unix(); {
		case ca > cb:
			return -1
		case ca < cb:
			return 1
		}
		return 0
	})
	return out
}

// createdParamRE matches the created filter's forms: created=T and
// created[gt|gte|lt|lte]=T.
var createdParamRE = regexp.MustCompile(`^created(?:\[(gt|gte|lt|lte)\])?$`)

var expandParamRE = regexp.MustCompile(`^expand\[\d*\]$`)

// createdFilter is the created filter of a list request.
type createdFilter struct {
	ops map[string]int64 // "" (equal), gt, gte, lt, lte
}

func (f createdFilter) matchUnix(c int64) bool {
	for op, v := range f.ops {
		switch op {
		case "":
			if c != v {
				return false
			}
		case "gt":
			if c <= v {
				return false
			}
		case "gte":
			if c < v {
				return false
			}
		case "lt":
			if c >= v {
				return false
			}
		case "lte":
			if c > v {
				return false
			}
		}
	}
	return true
}

// listParams is what a list request asks for, beyond its endpoint's own
// filters.
type listParams struct {
	created       createdFilter
	limit         int
	after, before string // the starting_after and ending_before cursors
}

// parseListParams reads a list request's query as Stripe checks it: the
// endpoint's own filters (which the caller reads), created, limit 1 to 100
// (10 by default), and at most one of starting_after and ending_before.
// Any other parameter is unknown.
func parseListParams(q url.Values, filters ...string) (listParams, *apiError) {
	lp := listParams{created: createdFilter{ops: map[string]int64{}}, limit: 10}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch {
		case slices.Contains(filters, k) || k == "limit" || k == "starting_after" || k == "ending_before" || k == "expand[]" || expandParamRE.MatchString(k):
		case createdParamRE.MatchString(k):
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return lp, invalid(k, "parameter_invalid_integer", "Invalid integer: "+v)
			}
			lp.created.ops[createdParamRE.FindStringSubmatch(k)[1]] = n
		default:
			return lp, invalid(k, "parameter_unknown", "Received unknown parameter: "+k)
		}
	}
	if l, ok := q["limit"]; ok {
		n, err := strconv.Atoi(l[len(l)-1])
		switch {
		case err != nil:
			return lp, invalid("limit", "parameter_invalid_integer", "Invalid integer: "+l[len(l)-1])
		case n < 1:
			return lp, invalid("limit", "", "This value must be greater than or equal to 1.")
		case n > 100:
			return lp, invalid("limit", "", "This value must be less than or equal to 100.")
		}
		lp.limit = n
	}
	lp.after, lp.before = q.Get("starting_after"), q.Get("ending_before")
	if lp.after != "" && lp.before != "" {
		return lp, invalid("starting_after", "", "You may only specify one of these parameters: starting_after, ending_before.")
	}
	return lp, nil
}

// listPage orders items newest first, keeps those past the cursor that
// keep accepts and the created filter matches, and returns one page of
// them on the wire and has_more. A cursor naming no item is a
// resource_missing for object ("payment_intent", "refund"). The caller
// holds s.mu.
func listPage[T listItem](items []T, lp listParams, object string, keep func(T) bool) ([]map[string]any, bool, *apiError) {
	ordered := newestFirst(items)
	cursor := lp.after + lp.before
	from, to := 0, len(ordered) // the part of ordered the cursor leaves
	if cursor != "" {
		i := slices.IndexFunc(ordered, func(it T) bool { return it.objectID() == cursor })
		if i < 0 {
			param := "starting_after"
			if lp.before != "" {
				param = "ending_before"
			}
			return nil, false, invalid(param, "resource_missing", "No such "+object+": '"+cursor+"'")
		}
		if lp.after != "" {
			from = i + 1
		} else {
			to = i
		}
	}
	var matching []T
	for _, it := range ordered[from:to] {
		if keep(it) && lp.created.matchUnix(it.createdAt().Unix()) {
			matching = append(matching, it)
		}
	}
	var page []T
	var hasMore bool
	if lp.before != "" {
		// The limit objects just before the cursor, still newest first.
		start := max(len(matching)-lp.limit, 0)
		page, hasMore = matching[start:], start > 0
	} else {
		page, hasMore = matching[:min(lp.limit, len(matching))], len(matching) > lp.limit
	}
	data := make([]map[string]any, 0, len(page))
	for _, it := range page {
		data = append(data, it.wire())
	}
	return data, hasMore, nil
}

// serveList answers a GET on a list endpoint at path: it counts and
// authorizes the request, reads its list parameters (filters being the
// endpoint's own), and under s.mu has page pick the data and has_more. Any
// error (parameters or page's) is a 400, as Stripe answers them.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request, path string, filters []string, page func(q url.Values, lp listParams) ([]map[string]any, bool, *apiError)) {
	s.countRequest()
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	reqID := newID("req_", 14)
	if !s.authorize(w, r, reqID) || s.lookupFault(w, r, reqID) {
		return
	}
	q := r.URL.Query()
	lp, e := parseListParams(q, filters...)
	if e != nil {
		s.writeError(w, r, reqID, http.StatusBadRequest, *e)
		return
	}
	s.mu.Lock()
	data, hasMore, e := page(q, lp)
	s.mu.Unlock()
	if e != nil {
		s.writeError(w, r, reqID, http.StatusBadRequest, *e)
		return
	}
	body, _ := json.Marshal(map[string]any{
		"object":   "list",
		"data":     data,
		"has_more": hasMore,
		"url":      path,
	})
	s.write(w, r, reqID, http.StatusOK, body)
}
