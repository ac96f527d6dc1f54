package sendgriddouble

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ActivityMessage is one row of the Email Activity API's
// GET /v3/messages answer. SendGrid lists one row per recipient; its msg_id
// starts with the X-Message-Id the send was answered with, followed by a
// "." and a per-recipient suffix.
type ActivityMessage struct {
	// MsgID is "<X-Message-Id>.<recipient suffix>".
	MsgID string `json:"msg_id"`
	// FromEmail is the sender's address.
	FromEmail string `json:"from_email"`
	// Subject is the email's subject.
	Subject string `json:"subject"`
	// ToEmail is this row's recipient (to, cc or bcc).
	ToEmail string `json:"to_email"`
	// Status is always "delivered" in the double.
	Status string `json:"status"`
	// OpensCount and ClicksCount are always 0 in the double.
	OpensCount  int `json:"opens_count"`
	ClicksCount int `json:"clicks_count"`
	// LastEventTime is when the email was accepted, in RFC 3339 (UTC).
	LastEventTime string `json:"last_event_time"`
}

// ActivityResponse is the body of GET /v3/messages.
type ActivityResponse struct {
	// Messages lists matching rows, most recent first, at most limit.
	Messages []ActivityMessage `json:"messages"`
}

// uniqueArgsQuery matches unique_args['KEY']="VALUE", SendGrid's query for
// a custom argument, and to_email="ADDRESS".
var uniqueArgsQuery = regexp.MustCompile(`^(?:unique_args\['([^']+)'\]|(to_email))\s*=\s*"([^"]*)"$`)

var andQuery = regexp.MustCompile(`\s+AND\s+`)

// activityClause is one condition of an activity query: a custom argument
// (key, value) or, when toEmail is set, a recipient.
type activityClause struct {
	key, value string
	toEmail    bool
}

// parseActivityQuery parses the subset of SendGrid's query language the
// double understands: unique_args['KEY']="VALUE" and to_email="ADDRESS"
// conditions joined by AND, each optionally in parentheses, the whole
// optionally in one more pair, as SendGrid's console writes queries.
func parseActivityQuery(q string) ([]activityClause, bool) {
	q = unparen(q)
	if q == "" {
		return nil, false
	}
	var out []activityClause
	for _, part := range andQuery.Split(q, -1) {
		m := uniqueArgsQuery.FindStringSubmatch(unparen(part))
		if m == nil {
			return nil, false
		}
		out = append(out, activityClause{key: m[1], value: m[3], toEmail: m[2] != ""})
	}
	return out, true
}

func unparen(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") && strings.Count(s, "(") == 1 {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	now := s.cfg.Now()
	limitPerMinute := s.cfg.ActivityRequestsPerMinute
	s.mu.Lock()
	count, reset := s.activityWind.hit(now)
	s.activityRequests++
	s.mu.Unlock()
	if limitPerMinute > 0 {
		setRateLimitHeaders(w, limitPerMinute, limitPerMinute-count, reset)
	} else {
		setRateLimitHeaders(w, ActivityRateLimit, ActivityRateLimit, reset)
	}

	if r.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, apiError{Message: "method not allowed"})
		return
	}
	if !s.authorized(r) {
		writeErrors(w, http.StatusUnauthorized, apiError{Message: msgUnauthorized})
		return
	}
	if s.lookupFault(w, r) {
		return
	}
	if limitPerMinute > 0 && count > limitPerMinute {
		writeErrors(w, http.StatusTooManyRequests, apiError{Message: msgTooManyRequests})
		return
	}

	params := r.URL.Query()
	limit := 10
	if raw := params.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > 1000 {
			writeErrors(w, http.StatusBadRequest, fieldError("limit", "limit must be an integer from 1 to 1000"))
			return
		}
		limit = n
	}
	clauses, ok := parseActivityQuery(params.Get("query"))
	if !ok {
		writeErrors(w, http.StatusBadRequest, fieldError("query", fmt.Sprintf("invalid query: the double only understands unique_args['KEY']=\"VALUE\" and to_email=\"ADDRESS\" joined by AND, got %q", params.Get("query"))))
		return
	}

	resp := ActivityResponse{Messages: []ActivityMessage{}}
	s.mu.Lock()
	// Most recent first, as SendGrid lists them.
	for i := len(s.emails) - 1; i >= 0 && len(resp.Messages) < limit; i-- {
		e := s.emails[i]
		// One row per recipient whose personalization carries the
		// arguments asked for, as SendGrid's feed lists them.
		for j, d := range e.Deliveries {
			if len(resp.Messages) == limit {
				break
			}
			to := d.Recipient
			if !argsMatch(e.personalizationArgs[d.Personalization], clauses) || !matchesRecipient(clauses, to) {
				continue
			}
			resp.Messages = append(resp.Messages, ActivityMessage{
				MsgID:         fmt.Sprintf("%s.filterdrecv-double-1-%X-%d.0", e.MessageID, e.AcceptedAt.Unix(), j),
				FromEmail:     e.From,
				Subject:       e.Subject,
				ToEmail:       to,
				Status:        "delivered",
				LastEventTime: e.AcceptedAt.UTC().Format(time.RFC3339),
			})
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// argsMatch reports whether a personalization's merged custom arguments
// carry every argument the clauses ask for.
func argsMatch(args map[string]string, clauses []activityClause) bool {
	for _, c := range clauses {
		if c.toEmail {
			continue
		}
		if v, ok := args[c.key]; !ok || v != c.value {
			return false
		}
	}
	return true
}

func matchesRecipient(clauses []activityClause, to string) bool {
	for _, c := range clauses {
		if c.toEmail && !strings.EqualFold(c.value, to) {
			return false
		}
	}
	return true
}
