package stripedouble

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
)

// ---- GET /v1/payment_intents ----

// newestFirst returns the PaymentIntents ordered as Stripe lists them:
// newest first by created (whole seconds), and among those created in the
// same second, the one created last first. The caller holds s.mu.
func (s *Server) newestFirst() []*PaymentIntent {
	out := make([]*PaymentIntent, 0, len(s.pis))
	for i := len(s.pis) - 1; i >= 0; i-- {
		out = append(out, s.pis[i])
	}
	slices.SortStableFunc(out, func(a, b *PaymentIntent) int {
		switch ca, cb := a.Created.Unix(), b.Created.Unix(); {
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

func (f createdFilter) match(pi *PaymentIntent) bool { return f.matchUnix(pi.Created.Unix()) }

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

// handleList serves GET /v1/payment_intents as Stripe does: filtered by
// customer and created ([gt], [gte], [lt], [lte] or an exact time), limit
// 1 to 100 (10 by default), paginated by starting_after or ending_before,
// newest first, in a list object with has_more. Unlike search it sees every
// PaymentIntent at once (Stripe's list endpoints are strongly consistent).
// Unknown parameters are a 400, as Stripe answers them.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	s.countRequest()
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	reqID := newID("req_", 14)
	if !s.authorize(w, r, reqID) {
		return
	}
	q := r.URL.Query()
	bad := func(param, code, msg string) {
		s.writeError(w, r, reqID, http.StatusBadRequest, *invalid(param, code, msg))
	}
	created := createdFilter{ops: map[string]int64{}}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch {
		case k == "customer" || k == "limit" || k == "starting_after" || k == "ending_before" || k == "expand[]" || expandParamRE.MatchString(k):
		case createdParamRE.MatchString(k):
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				bad(k, "parameter_invalid_integer", "Invalid integer: "+v)
				return
			}
			created.ops[createdParamRE.FindStringSubmatch(k)[1]] = n
		default:
			bad(k, "parameter_unknown", "Received unknown parameter: "+k)
			return
		}
	}
	limit := 10
	if l, ok := q["limit"]; ok {
		n, err := strconv.Atoi(l[len(l)-1])
		switch {
		case err != nil:
			bad("limit", "parameter_invalid_integer", "Invalid integer: "+l[len(l)-1])
			return
		case n < 1:
			bad("limit", "", "This value must be greater than or equal to 1.")
			return
		case n > 100:
			bad("limit", "", "This value must be less than or equal to 100.")
			return
		}
		limit = n
	}
	after, before := q.Get("starting_after"), q.Get("ending_before")
	if after != "" && before != "" {
		bad("starting_after", "", "You may only specify one of these parameters: starting_after, ending_before.")
		return
	}
	customer, filterCustomer := q.Get("customer"), q.Has("customer")

	s.mu.Lock()
	ordered := s.newestFirst()
	cursor := after + before
	from, to := 0, len(ordered) // the part of ordered the cursor leaves
	if cursor != "" {
		i := slices.IndexFunc(ordered, func(pi *PaymentIntent) bool { return pi.ID == cursor })
		if i < 0 {
			s.mu.Unlock()
			param := "starting_after"
			if before != "" {
				param = "ending_before"
			}
			bad(param, "resource_missing", "No such payment_intent: '"+cursor+"'")
			return
		}
		if after != "" {
			from = i + 1
		} else {
			to = i
		}
	}
	var matching []*PaymentIntent
	for _, pi := range ordered[from:to] {
		if filterCustomer && pi.Customer != customer {
			continue
		}
		if !created.match(pi) {
			continue
		}
		matching = append(matching, pi)
	}
	var page []*PaymentIntent
	var hasMore bool
	if before != "" {
		// The limit objects just before the cursor, still newest first.
		start := max(len(matching)-limit, 0)
		page, hasMore = matching[start:], start > 0
	} else {
		page, hasMore = matching[:min(limit, len(matching))], len(matching) > limit
	}
	data := make([]map[string]any, 0, len(page))
	for _, pi := range page {
		data = append(data, pi.wire())
	}
	s.mu.Unlock()

	body, _ := json.Marshal(map[string]any{
		"object":   "list",
		"data":     data,
		"has_more": hasMore,
		"url":      "/v1/payment_intents",
	})
	s.write(w, r, reqID, http.StatusOK, body)
}
